#!/usr/bin/env bash
# Gateway overhead: svc in front of a zero-latency fake OpenAI upstream,
# against the same upstream called directly, and against LiteLLM's proxy
# (from PyPI) in front of the same upstream, in one run, over loopback.
#
#   latency   open-loop at a fixed rate, latency from each request's
#             scheduled start; overhead = p50/p99 of the gateway minus
#             p50/p99 of the upstream alone at the same rate. svc and the
#             upstream at RATE and at RATE/2; svc, LiteLLM and the
#             upstream at LITELLM_RATE, below LiteLLM's saturation, so the
#             two gateways are compared at the same load
#   peak      closed loop, CONC concurrent requests, requests/s
#   floor     when socat is installed: a bare TCP relay (socat, no HTTP)
#             in front of the same upstream at LITELLM_RATE, the least a
#             process between client and upstream can add on this machine
#
# Usage: bench/overhead.sh [seconds per run, default 10]
# Env: RATE (5000), LITELLM_RATE (20), SLOW_SECS (30: seconds of the runs at
#      LITELLM_RATE, so that their p99 rests on 600 requests, not 200),
#      CONC (64), LITELLM_CONC (16),
#      LITELLM_VERSION (1.106.2), LITELLM_VENV (an existing venv with
#      litellm[proxy]). Builds release binaries; otherwise creates a venv
#      for LiteLLM under target/.venv-litellm. Prints a Markdown table, and
#      writes the run to bench/results/overhead.json (bench/results.py;
#      BENCH_RESULTS=FILE elsewhere, =none not at all), from which
#      `python3 bench/charts.py` redraws BENCHMARKS.md's table and charts.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rate=${RATE:-5000}
litellm_rate=${LITELLM_RATE:-20}
slow_secs=${SLOW_SECS:-30}
half_rate=$((rate / 2))
conc=${CONC:-64}
litellm_conc=${LITELLM_CONC:-16}
litellm_version=${LITELLM_VERSION:-1.106.2}
target=${CARGO_TARGET_DIR:-target}
started=$(date +%s)
command=$(python3 bench/results.py command --env RATE --env LITELLM_ --env SLOW_SECS --env CONC bench/overhead.sh "$@")

cargo build --release --locked -q -p svc-cli --bin svc \
  -p svc-test-support --bin svc-fake-upstream --bin svc-loadgen
venv="$target/.venv-litellm"
if [[ -n "${LITELLM_VENV:-}" ]]; then
  venv=$LITELLM_VENV
elif [[ ! -x "$venv/bin/litellm" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "litellm[proxy]==$litellm_version"
fi

source bench/gateway-lib.sh
start_gateway

# LiteLLM's proxy, one worker, the same upstream.
litellm_port=$(free_port)
litellm_key="sk-litellm-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
cat >"$out/litellm.yaml" <<YAML
model_list:
  - model_name: svc
    litellm_params:
      model: openai/fake
      api_base: $upstream
      api_key: sk-fake
litellm_settings:
  telemetry: false
general_settings:
  master_key: $litellm_key
YAML
LITELLM_LOG=ERROR "$venv/bin/litellm" --config "$out/litellm.yaml" --host 127.0.0.1 \
  --port "$litellm_port" --num_workers 1 >"$out/litellm.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$litellm_port/health/liveliness" >/dev/null 2>&1 && break; sleep 0.2
done
# Its first request warms it up (seconds); not part of the measurement.
curl -sf -o /dev/null "http://127.0.0.1:$litellm_port/v1/chat/completions" -H "Authorization: Bearer $litellm_key" \
  -H 'Content-Type: application/json' -d '{"model":"svc","messages":[{"role":"user","content":"warm up"}]}' || true

# The floor: a byte relay, one process hop with no HTTP at all.
relay_url=
if command -v socat >/dev/null; then
  relay_port=$(free_port)
  upstream_port=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlsplit(sys.argv[1]).port)' "$upstream")
  socat "TCP-LISTEN:$relay_port,bind=127.0.0.1,fork,reuseaddr,nodelay" "TCP:127.0.0.1:$upstream_port,nodelay" &
  pids+=($!)
  relay_url="http://127.0.0.1:$relay_port/v1/chat/completions"
fi

body='{"model":"svc","messages":[{"role":"user","content":"Say hello to the benchmark"}]}'
direct_body='{"model":"fake","messages":[{"role":"user","content":"Say hello to the benchmark"}]}'
load() { # url body extra-args...
  local url=$1 b=$2; shift 2
  "$target/release/svc-loadgen" --url "$url" --body "$b" --duration "$secs" --warmup 2 "$@"
}
slow() { # url body extra-args...: at LITELLM_RATE for SLOW_SECS
  local url=$1 b=$2; shift 2
  "$target/release/svc-loadgen" --url "$url" --body "$b" --duration "$slow_secs" --warmup 2 --rate "$litellm_rate" "$@"
}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

direct_lat=$(load "$upstream/chat/completions" "$direct_body" --rate "$rate")
svc_lat=$(load "http://127.0.0.1:$svc_port/v1/chat/completions" "$body" --rate "$rate" --header "Authorization: Bearer $key")
direct_half=$(load "$upstream/chat/completions" "$direct_body" --rate "$half_rate")
svc_half=$(load "http://127.0.0.1:$svc_port/v1/chat/completions" "$body" --rate "$half_rate" --header "Authorization: Bearer $key")
direct_slow=$(slow "$upstream/chat/completions" "$direct_body")
svc_slow=$(slow "http://127.0.0.1:$svc_port/v1/chat/completions" "$body" --header "Authorization: Bearer $key")
relay_slow=null
[[ -n "$relay_url" ]] && relay_slow=$(slow "$relay_url" "$direct_body")
litellm_lat=$(slow "http://127.0.0.1:$litellm_port/v1/chat/completions" "$body" --header "Authorization: Bearer $litellm_key")
direct_peak=$(load "$upstream/chat/completions" "$direct_body" --concurrency "$conc")
svc_peak=$(load "http://127.0.0.1:$svc_port/v1/chat/completions" "$body" --concurrency "$conc" --header "Authorization: Bearer $key")
litellm_peak=$(load "http://127.0.0.1:$litellm_port/v1/chat/completions" "$body" --concurrency "$litellm_conc" --header "Authorization: Bearer $litellm_key")
# One request through LiteLLM must have worked, or the numbers mean nothing.
[[ $(field "$litellm_lat" ok) -gt 0 ]] || { echo "LiteLLM answered nothing; its log:" >&2; tail -20 "$out/litellm.log" >&2; exit 1; }

litellm_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null || echo "$litellm_version")
python3 - "$direct_lat" "$svc_lat" "$direct_half" "$svc_half" "$direct_slow" "$svc_slow" "$litellm_lat" "$direct_peak" "$svc_peak" "$litellm_peak" "$relay_slow" "$rate" "$half_rate" "$litellm_rate" "$(nproc)" "$command" "$started" "$litellm_version" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import results
d, s, dh, sh, ds, ss, l, dp, sp, lp, rs = (json.loads(a) for a in sys.argv[1:12])
rate, half, lrate, cores = sys.argv[12:16]
command, started, litellm_version = sys.argv[16], float(sys.argv[17]), sys.argv[18]
def over(g, base, k): return max(g[k] - base[k], 0.0)
print(f"Gateway overhead over loopback, {cores} cores shared by upstream, gateway and load generator")
print()
print("| target | offered req/s | ok | errors | p50 ms | p99 ms | overhead p50 ms | overhead p99 ms | peak req/s |")
print("|---|---|---|---|---|---|---|---|---|")
def row(name, offered, r, base=None, peak=None):
    o50 = f"{over(r, base, 'p50_ms'):.3f}" if base else "–"
    o99 = f"{over(r, base, 'p99_ms'):.3f}" if base else "–"
    pk = f"{peak['rps']:.0f}" if peak else ""
    print(f"| {name} | {offered} | {r['ok']} | {r['errors']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {o50} | {o99} | {pk} |")
row("upstream alone", rate, d, peak=dp)
row("svc → upstream", rate, s, d, sp)
row("upstream alone", half, dh)
row("svc → upstream", half, sh, dh)
row("upstream alone", lrate, ds)
if rs:
    row("TCP relay (socat) → upstream", lrate, rs, ds)
row("svc → upstream", lrate, ss, ds)
row("LiteLLM → upstream", lrate, l, ds, lp)
print()
ratio = lambda a, b: (a / b) if b > 0 else float("inf")
# Latencies are measured to the microsecond: a smaller overhead counts as 1 µs.
so50, so99 = max(over(ss, ds, "p50_ms"), 0.001), max(over(ss, ds, "p99_ms"), 0.001)
lo50, lo99 = over(l, ds, "p50_ms"), over(l, ds, "p99_ms")
print(f"At {lrate} req/s: overhead p50 LiteLLM/svc = {ratio(lo50, so50):.0f}x, p99 = {ratio(lo99, so99):.0f}x; "
      f"peak throughput: svc/LiteLLM = {ratio(sp['rps'], lp['rps']):.0f}x")
if rs:
    print(f"At {lrate} req/s a bare TCP relay adds {over(rs, ds, 'p50_ms'):.3f} ms at p50 and "
          f"{over(rs, ds, 'p99_ms'):.3f} ms at p99: the floor for any gateway in a process of its own")

# The same rows as bench/results/overhead.json.
def result_row(name, offered, r, base=None, peak=None):
    return {"target": name, "offered_rps": int(offered), "ok": r["ok"], "errors": r["errors"],
            "p50_ms": round(r["p50_ms"], 3), "p99_ms": round(r["p99_ms"], 3),
            "overhead_p50_ms": round(over(r, base, "p50_ms"), 3) if base else None,
            "overhead_p99_ms": round(over(r, base, "p99_ms"), 3) if base else None,
            "peak_rps": round(peak["rps"]) if peak else None}
rows = [result_row("upstream alone", rate, d, peak=dp), result_row("svc → upstream", rate, s, d, sp),
        result_row("upstream alone", half, dh), result_row("svc → upstream", half, sh, dh),
        result_row("upstream alone", lrate, ds)]
if rs:
    rows.append(result_row("TCP relay (socat) → upstream", lrate, rs, ds))
rows += [result_row("svc → upstream", lrate, ss, ds), result_row("LiteLLM → upstream", lrate, l, ds, lp)]
litellm = f"LiteLLM proxy {litellm_version}, one worker"
summary = [
    results.compare(f"overhead.p50@{lrate}", f"added to the upstream's p50 at {lrate} req/s", "ms", "lower",
                    round(so50, 3), round(lo50, 3), reference_name=litellm),
    results.compare(f"overhead.p99@{lrate}", f"added to the upstream's p99 at {lrate} req/s", "ms", "lower",
                    round(so99, 3), round(lo99, 3), reference_name=litellm),
    results.compare("peak", "peak throughput, closed loop", "req/s", "higher", round(sp["rps"]), round(lp["rps"]),
                    reference_name=litellm),
]
if rs:
    summary.append(results.compare(
        f"floor.p50@{lrate}", f"the relay floor: added to the upstream's p50 at {lrate} req/s", "ms", "lower",
        round(so50, 3), round(max(over(rs, ds, "p50_ms"), 0.001), 3), reference_name="a bare TCP relay, socat"))
results.write(results.document(
    "overhead", title="Gateway overhead against LiteLLM and a bare relay", external=True, script="bench/overhead.sh",
    command=command, started=started,
    reference=f"the fake upstream alone; LiteLLM's proxy ({litellm_version}, one worker)"
              + (" and a bare TCP relay (socat)" if rs else "") + " in front of the same upstream",
    summary=summary, rows=rows,
    notes=f"{cores} cores shared by upstream, gateway and load generator; latency open loop, overhead = the "
          f"gateway's percentile minus the upstream's alone at the same rate"))
PY
