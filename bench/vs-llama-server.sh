#!/usr/bin/env bash
# svc serve against llama.cpp's llama-server, side by side, printed as
# Markdown (issue 19): the same GGUF, threads, slots and context per slot,
# streamed /v1/chat/completions on 127.0.0.1, runs alternating svc /
# llama-server, medians over rounds, ratio svc / llama-server per row:
#  1. single stream: decode tokens/s (128 tokens), TTFT of a short prompt;
#  2. 4 and 16 concurrent streams: aggregate tokens/s, TTFT p50 and p99;
#  3. turn-7 TTFT of one conversation (~1,500 tokens of history: ~200 tokens
#     of user text per turn plus the server's replies, the whole history in
#     each request, as a REPL sends it);
#  4. turn-7 TTFT median of 8 conversations interleaved turn by turn;
#  5. worst gap between chunks of 8 running streams while a 1,400-token
#     prompt arrives, and that prompt's TTFT;
#  6. VmRSS of each server idle after start and after all runs, VmHWM.
# Details of each measurement: bench/engine/vs_server.py. The medians also go
# to bench/results/vs-llama-server.json (a run of some rows, BENCH_ONLY or
# BENCH_QUICK, to vs-llama-server.partial.json, which git ignores), from
# which `python3 bench/charts.py` redraws BENCHMARKS.md's table and charts.
#
# llama-server is built on first use (bench/llama-server-build.sh) from the
# llama.cpp that svc links (the llama-cpp-sys-2 crate) with the server sources
# of the llama-cpp-python sdist, with svc's SIMD flags, into
# $SVC_BENCH_LLAMA_SERVER (default $HOME/.cache/svc-bench/llama-server).
#
# Usage: bench/vs-llama-server.sh [MODEL.gguf]
#        bench/vs-llama-server.sh --build-only   # just build llama-server
#        bench/vs-llama-server.sh --tree-only    # just assemble its sources; prints the path
#   MODEL defaults to svc's default model, fetched with
#   `svc pull --data-dir ${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}`.
# Settings (environment):
#   BENCH_ROUNDS=3  BENCH_CONV8_ROUNDS=1 (rounds of the 8-conversation row, the
#   longest)  BENCH_THREADS=2  BENCH_PARALLEL=16  BENCH_CONTEXT=4096 (tokens
#   per slot; llama-server gets -c PARALLEL*CONTEXT)  BENCH_MAX_TOKENS=128
#   BENCH_QUIET_WAIT=60 (seconds to wait for an idle machine before each
#   measurement)  BENCH_QUIET_BUDGET=600 (seconds of such waiting in all;
#   then it measures without waiting or retrying)  BENCH_MAX_FOREIGN=0.10 and BENCH_RETRIES=1 (a measurement
#   is redone when others used more than that share of the CPUs)
#   BENCH_ONLY=single,pp,c4,c16,conv1,conv8,stall
#   BENCH_QUICK=1: one round, 4 conversations instead of 8, no retries,
#   shorter waits (a few minutes instead of ~10-15)
#   BENCH_SVC_ARGS: more `svc serve` flags (e.g. the engine's new options)
#   BENCH_LLAMA_SERVER_ARGS: more llama-server flags
#   BENCH_SVC_BIN: use this svc binary instead of building one
#   BENCH_LLAMA_SERVER_BIN: use this llama-server instead of building one
#   (described by the BIN.sources file beside it when there is one)
#   BENCH_LLAMA_SERVER_CMAKE_ARGS: more CMake flags for llama-server's build
#   BENCH_KEEP_JSON=DIR: keep the JSON (written after every measurement;
#   `bench/engine/vs_server.py --report DIR/vs.json` prints a cut-short run's
#   table) and both servers' logs there
#   SVC_BENCH_VENV (default target/.venv-bench): venv with httpx
#   BENCH_RESULTS=FILE: write the result file there instead; =none: not at all
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source bench/llama-server-build.sh

log() { echo "$*" >&2; }
ls_dir=${SVC_BENCH_LLAMA_SERVER:-$HOME/.cache/svc-bench/llama-server}
if [ "${1:-}" = "--build-only" ]; then
  build_llama_server "$ls_dir"
  exit
fi
if [ "${1:-}" = "--tree-only" ]; then
  llama_server_tree "$ls_dir"
  exit
fi

threads=${BENCH_THREADS:-2}
parallel=${BENCH_PARALLEL:-16}
context=${BENCH_CONTEXT:-4096}
rounds=${BENCH_ROUNDS:-3}
conv8_rounds=${BENCH_CONV8_ROUNDS:-1}
conv_count=8
quiet=${BENCH_QUIET_WAIT:-60}
retries=${BENCH_RETRIES:-1}
stall_tokens=1024
quiet_budget=600
if [ -n "${BENCH_QUICK:-}" ]; then
  rounds=${BENCH_ROUNDS:-1}
  conv_count=4
  quiet=${BENCH_QUIET_WAIT:-20}
  retries=${BENCH_RETRIES:-0}
  quiet_budget=120
fi
venv=${SVC_BENCH_VENV:-$root/target/.venv-bench}
py=$venv/bin/python
[ -x "$py" ] || { log "creating $venv"; python3 -m venv "$venv"; }
"$py" -c 'import httpx' 2>/dev/null || "$py" -m pip install -q "httpx>=0.27"

if [ -n "${BENCH_LLAMA_SERVER_BIN:-}" ]; then
  ls_bin=$BENCH_LLAMA_SERVER_BIN
  ls_from=$(head -n1 "$ls_bin.sources" 2>/dev/null || echo "$ls_bin")
else
  ls_bin=$(build_llama_server "$ls_dir")
  ls_from=$(head -n1 "$ls_dir/bin/llama-server.sources")
fi

# --- svc: a release build, copied so that a concurrent rebuild cannot swap it mid-run ---
work=$(mktemp -d)
pids=()
keep=${BENCH_KEEP_JSON:-}
[ -n "$keep" ] && mkdir -p "$keep"
cleanup() {
  # the JSON is written after every measurement: a cut-short run keeps its results
  [ -n "$keep" ] && cp "$work"/*.log "$keep"/ 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${BENCH_SVC_BIN:-}" ]; then
  cp "$BENCH_SVC_BIN" "$work/svc"
  svc_from="$BENCH_SVC_BIN"
else
  log "building svc (release)"
  cargo build --release -q -p svc-cli --bin svc
  cp "${CARGO_TARGET_DIR:-target}/release/svc" "$work/svc"
  svc_from="commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes in crates/')"
fi
cp "$ls_bin" "$work/llama-server"

model=${1:-}
if [ -z "$model" ]; then
  model=$("$work/svc" pull --data-dir "${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}")
fi
[ -f "$model" ] || { log "no such model: $model"; exit 1; }

# --- llama-server ---
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ls_args=(-m "$model" --host 127.0.0.1 --port "$port" -np "$parallel" -c $((parallel * context))
  -t "$threads" -tb "$threads" --no-webui)
# shellcheck disable=SC2206
ls_args+=(${BENCH_LLAMA_SERVER_ARGS:-})
log "starting llama-server ${ls_args[*]}"
"$work/llama-server" "${ls_args[@]}" >"$work/llama-server.log" 2>&1 &
pids+=($!)
ls_pid=$!
ls_url=http://127.0.0.1:$port
for _ in $(seq 1200); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$ls_url/health" || true)" = 200 ] && break
  kill -0 "$ls_pid" 2>/dev/null || { tail -n 30 "$work/llama-server.log" >&2; exit 1; }
  sleep 0.1
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "$ls_url/health" || true)" = 200 ] ||
  { log "llama-server did not start"; tail -n 30 "$work/llama-server.log" >&2; exit 1; }

# --- svc serve ---
data=$work/data
mkdir -p "$data"
key=$("$work/svc" keys create --data-dir "$data" --name bench)
# One key sends every stream, as one client of llama-server does; svc's
# defaults give a key alone every slot.
svc_args=(--data-dir "$data" --model "$model" --bind 127.0.0.1:0 --parallel "$parallel"
  --context "$context" --threads "$threads")
# shellcheck disable=SC2206
svc_args+=(${BENCH_SVC_ARGS:-})
log "starting svc serve ${svc_args[*]}"
"$work/svc" serve "${svc_args[@]}" >"$work/svc.out" 2>"$work/svc.log" &
pids+=($!)
svc_pid=$!
svc_url=
for _ in $(seq 1200); do
  svc_url=$(sed -n 's/^svc is serving on \(http[^ ]*\).*/\1/p' "$work/svc.log")
  [ -n "$svc_url" ] && break
  kill -0 "$svc_pid" 2>/dev/null || { tail -n 30 "$work/svc.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$svc_url" ] || { log "svc serve did not start"; tail -n 30 "$work/svc.log" >&2; exit 1; }

cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
ls_settings=$(grep -o 'n_ctx_seq[^,]*\|n_parallel[^,]*\|kv_unified[^,]*\|flash_attn[^,]*' "$work/llama-server.log" |
  sort -u | tr '\n' ' ' || true)
header=$(cat <<EOF
$(date -u '+%Y-%m-%d %H:%M UTC'), $cpu, nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg) at start.
Model \`$(basename "$model")\` ($(stat -c %s "$model") bytes), $threads threads, $parallel slots, $context tokens per slot.

- svc: $svc_from; \`svc serve ${svc_args[*]:4}\`; $(grep -m1 'tokens x' "$work/svc.log" | sed 's/^ *//' || true)
- llama-server: built from ${ls_from%%;*}; \`llama-server ${ls_args[*]:2}\` (defaults otherwise: prompt cache, \`--cache-ram\` 8192 MiB)${ls_settings:+; log: $ls_settings}
EOF
)
only=${BENCH_ONLY:-single,pp,c4,c16,conv1,conv8,stall}
log "measuring: $only, $rounds rounds"
"$py" bench/engine/vs_server.py --svc-url "$svc_url" --svc-key "$key" --svc-pid "$svc_pid" \
  --ls-url "$ls_url" --ls-pid "$ls_pid" --rounds "$rounds" --conv8-rounds "$conv8_rounds" \
  --conv-count "$conv_count" --stall-stream-tokens "$stall_tokens" \
  --max-tokens "${BENCH_MAX_TOKENS:-128}" --quiet-wait "$quiet" --quiet-budget "${BENCH_QUIET_BUDGET:-$quiet_budget}" --retries "$retries" \
  --max-foreign "${BENCH_MAX_FOREIGN:-0.10}" --only "$only" \
  --results auto --command "$(python3 bench/results.py command bench/vs-llama-server.sh "$@")" \
  --json "${keep:-$work}/vs.json" --header "## svc serve against llama-server

$header
"
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
