#!/usr/bin/env bash
# Soak: svc (release, SQLite) in front of a zero-latency fake upstream under
# 500 requests/s of mixed traffic for 10 minutes, over loopback:
#
#   chat, whole        200 req/s   POST /v1/chat/completions
#   chat, streamed     100 req/s   POST /v1/chat/completions, "stream": true
#   models             100 req/s   GET  /v1/models
#   device polls        50 req/s   POST /v1/auth/device/token, an unknown code (400 by design)
#   dashboard page      50 req/s   GET  /dashboard/login
#
# Each stream is open-loop (latency from each request's scheduled start).
# Prints, per stream, requests, errors and p50/p99/max, and svc's resident
# memory, open files and threads at the start and the end of the run.
#
# Usage: bench/soak.sh [seconds, default 600]
# Env: SCALE (1.0: multiplies every rate), CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
scale=${SCALE:-1.0}
target=${CARGO_TARGET_DIR:-target}

cargo build --release --locked -q -p svc-cli --bin svc \
  -p svc-test-support --bin svc-fake-upstream --bin svc-loadgen

source bench/gateway-lib.sh
start_gateway
port=$svc_port
base="http://127.0.0.1:$port"

sample() { # label: svc's RSS (KiB), open files, threads
  local rss fds threads
  rss=$(awk '/^VmRSS/{print $2}' "/proc/$svc_pid/status")
  threads=$(awk '/^Threads/{print $2}' "/proc/$svc_pid/status")
  fds=$(find "/proc/$svc_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
  echo "$1 $rss $fds $threads"
}

rate() { python3 -c "print(round($1 * $scale, 1))"; }
chat='{"model":"svc","messages":[{"role":"user","content":"Say hello to the soak test"}]}'
stream='{"model":"svc","stream":true,"messages":[{"role":"user","content":"Say hello to the soak test"}]}'
poll='{"device_code":"soak-unknown-device-code"}'
load() { # name rate url extra-args...
  local name=$1 r; r=$(rate "$2"); shift 2
  "$target/release/svc-loadgen" --duration "$secs" --warmup 5 --rate "$r" --url "$@" >"$out/$name.json" &
  pids+=($!)
  loads+=($!)
}

# A short warm-up so the start sample is of a server that has served.
"$target/release/svc-loadgen" --duration 3 --warmup 0 --rate 100 --url "$base/v1/chat/completions" \
  --body "$chat" --header "Authorization: Bearer $key" >/dev/null
start=$(sample start)

loads=()
load chat 200 "$base/v1/chat/completions" --body "$chat" --header "Authorization: Bearer $key"
load stream 100 "$base/v1/chat/completions" --body "$stream" --header "Authorization: Bearer $key"
load models 100 "$base/v1/models" --header "Authorization: Bearer $key"
load device 50 "$base/v1/auth/device/token" --body "$poll" --expect 400
load dashboard 50 "$base/dashboard/login"
peak_rss=0
peak_fds=0
while kill -0 "${loads[0]}" 2>/dev/null; do
  read -r _ rss fds _ <<<"$(sample now)"
  ((rss > peak_rss)) && peak_rss=$rss
  ((fds > peak_fds)) && peak_fds=$fds
  sleep 5
done
for p in "${loads[@]}"; do wait "$p"; done
end=$(sample end)

python3 - "$out" "$secs" "$start" "$end" "$peak_rss" "$peak_fds" <<'PY'
import json, sys
out, secs, start, end, peak_rss, peak_fds = sys.argv[1:]
print(f"soak: {secs} s, svc release build, SQLite, fake upstream\n")
print("| traffic | ok | errors | req/s | p50 ms | p99 ms | max ms |")
print("|---|---|---|---|---|---|---|")
total_errors = 0
for name in ["chat", "stream", "models", "device", "dashboard"]:
    r = json.load(open(f"{out}/{name}.json"))
    total_errors += r["errors"]
    print(f"| {name} | {r['ok']} | {r['errors']} | {r['rps']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.1f} |")
s, e = start.split(), end.split()
print()
print("| svc | start | end | peak (5 s samples) |")
print("|---|---|---|---|")
print(f"| resident memory (MiB) | {int(s[1])/1024:.1f} | {int(e[1])/1024:.1f} | {int(peak_rss)/1024:.1f} |")
print(f"| open files | {s[2]} | {e[2]} | {peak_fds} |")
print(f"| threads | {s[3]} | {e[3]} | |")
print(f"\nerrors in all: {total_errors}")
sys.exit(1 if total_errors else 0)
PY
