#!/usr/bin/env bash
# Prefix-aware routing to upstreams against plain least-outstanding, in one
# run: two llama.cpp `llama-server` upstreams on loopback (same GGUF, one
# thread each, their default prompt caches), one gateway-only `svc serve`
# with two model ids over both upstreams: `affinity` (prefix affinity on,
# the default) and `least` (affinity_entries = 0). N conversations of 7
# turns run interleaved (each its own task, a random pause of up to 0.3 s
# before each turn; about 1,500 tokens of history by turn 7) against one id,
# then the other, alternating which goes first by round. Prints a Markdown
# table: turn-7 time to first token (median over all rounds' conversations,
# and the spread of the rounds' medians), the median over turns 2-7, the
# prompt tokens the upstreams evaluated (llama-server's /metrics), and how
# svc routed the requests.
#
# Usage: bench/prefix-routing.sh [MODEL.gguf]
#   MODEL defaults to svc's default model, fetched with
#   `svc pull --data-dir ${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}`.
# Env: LLAMA_SERVER (path of llama-server; default: the one on PATH)
#   ROUNDS=3 CONVERSATIONS=8 TURNS=7 WORDS=140 (per user message)
#   THINK=0.3 (most seconds of random pause before each turn)
#   MAX_TOKENS=40 PARALLEL=4 (slots per llama-server) CONTEXT=12288 (per
#   llama-server) THREADS=1 (per llama-server)
#   BENCH_VENV (default target/.venv-httpx): a venv with httpx; created on
#   first use.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
rounds=${ROUNDS:-3}
conversations=${CONVERSATIONS:-8}
turns=${TURNS:-7}
words=${WORDS:-140}
max_tokens=${MAX_TOKENS:-40}
think=${THINK:-0.3}
parallel=${PARALLEL:-4}
context=${CONTEXT:-12288}
threads=${THREADS:-1}
llama_server=${LLAMA_SERVER:-$(command -v llama-server || true)}
venv=${BENCH_VENV:-$root/target/.venv-httpx}
log() { echo "$*" >&2; }

[ -x "$llama_server" ] || { log "llama-server not found: set LLAMA_SERVER"; exit 1; }
if ! "$venv/bin/python" -c 'import httpx' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "httpx>=0.27"
fi

log "building svc (gateway only, release)"
cargo build --release --locked -q -p svc-cli --no-default-features --bin svc
out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT
cp "$target/release/svc" "$out/svc"

model=${1:-}
if [ -z "$model" ]; then
  model=$("$out/svc" pull --data-dir "${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}")
fi
[ -f "$model" ] || { log "no such model: $model"; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # url log pid
  for _ in $(seq 600); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$3" 2>/dev/null || { cat "$2" >&2; exit 1; }
    sleep 0.2
  done
  log "timed out waiting for $1"; cat "$2" >&2; exit 1
}

upstreams=()
for i in 1 2; do
  port=$(free_port)
  "$llama_server" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" \
    --parallel "$parallel" -c "$context" --metrics >"$out/llama-$i.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$port/health" "$out/llama-$i.log" "$!"
  upstreams+=("http://127.0.0.1:$port")
done

svc_port=$(free_port)
ups="{ base_url = \"${upstreams[0]}/v1\", model = \"m\" }, { base_url = \"${upstreams[1]}/v1\", model = \"m\" }"
cat >"$out/svc.toml" <<TOML
bind = "127.0.0.1:$svc_port"
data_dir = "$out/svc-data"
[models.svc]
upstreams = [$ups]
[models.svc-thinking]
reasoning = true
upstreams = [$ups]
[models.affinity]
upstreams = [$ups]
[models.least]
affinity_entries = 0
upstreams = [$ups]
TOML
key=$("$out/svc" keys create --config "$out/svc.toml" --name bench 2>/dev/null)
SVC_LOG=warn "$out/svc" serve --config "$out/svc.toml" >"$out/svc.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$svc_port/health" "$out/svc.log" "$!"

cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
commit="$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes in crates/')"
llama_version=$("$llama_server" --version 2>&1 | grep -m1 -i version || true)
log "running: $rounds rounds x 2 modes x $conversations conversations x $turns turns"
"$venv/bin/python" bench/prefix_routing.py --url "http://127.0.0.1:$svc_port" --key "$key" \
  --upstreams "${upstreams[@]}" --models affinity least --rounds "$rounds" \
  --conversations "$conversations" --turns "$turns" --words "$words" --max-tokens "$max_tokens" --think "$think" \
  >"$out/result.json"

echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $cpu, nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "svc commit $commit; llama-server: $llama_version; model \`$(basename "$model")\`"
echo "2 x llama-server -t $threads --parallel $parallel -c $context; $conversations conversations x $turns turns, $words words a user message, max_tokens $max_tokens, pauses up to ${think} s, $rounds rounds alternating"
echo
"$venv/bin/python" - "$out/result.json" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
runs = d["runs"]
turns = d["args"]["turns"]
ms = lambda s: f"{s * 1000:.0f} ms"
rows = {}
for run in runs:
    r = rows.setdefault(run["model"], {"t7": [], "later": [], "medians": [], "tokens": 0, "routed": {}, "prompt": [], "seconds": []})
    r["seconds"].append(run["seconds"])
    t7 = [c["ttft"][-1] for c in run["conversations"]]
    r["t7"] += t7
    r["medians"].append(statistics.median(t7))
    r["later"] += [t for c in run["conversations"] for t in c["ttft"][1:]]
    r["tokens"] += run["upstream_prompt_tokens"] or 0
    r["prompt"] += [c["last_prompt_tokens"] for c in run["conversations"] if c["last_prompt_tokens"]]
    for k, v in run["routed"].items():
        r["routed"][k] = r["routed"].get(k, 0) + v
base = statistics.median(rows["least"]["t7"])
print(f"| routing | turn-{turns} TTFT median | rounds' medians | vs least-outstanding | TTFT median, turns 2-{turns} | prompt tokens the upstreams evaluated | requests by route (prefix/fallback/load) | seconds a run |")
print("|---|---|---|---|---|---|---|---|")
for name in ("affinity", "least"):
    r = rows[name]
    t7 = statistics.median(r["t7"])
    rt = r["routed"]
    print(
        f"| {'prefix affinity' if name == 'affinity' else 'least outstanding'} | {ms(t7)} | "
        f"{', '.join(ms(m) for m in r['medians'])} | {t7 / base:.2f}x | {ms(statistics.median(r['later']))} | "
        f"{int(r['tokens'])} | {rt.get('prefix', 0)}/{rt.get('fallback', 0)}/{rt.get('load', 0)} | "
        f"{', '.join(f'{s:.0f}' for s in r['seconds'])} |"
    )
if rows["least"]["prompt"]:
    print()
    print(f"turn-{turns} prompts: {min(rows['least']['prompt'])}-{max(rows['least']['prompt'])} tokens")
PY
