#!/usr/bin/env bash
# Benchmark of the embedded engine (svc-engine-llama), printed as Markdown:
#  1. single stream, svc's engine vs llama.cpp itself in the same run:
#     prompt and decode tokens/s and their ratio, same GGUF, threads, prompt
#     (~512 tokens), decode length (128, EOS ignored), context and flash
#     attention setting; llama.cpp is llama-cpp-python built from source with
#     the same SIMD flags as svc's llama.cpp (x86-64-v3, no -march=native);
#  2. through the HTTP API of a real `svc serve --parallel 16` (release):
#     aggregate completion tokens/s of 1, 4 and 16 concurrent streamed chat
#     completions, time to first token p50, the server's VmRSS/VmHWM.
#
# Usage: bench/engine.sh [MODEL.gguf]
#   MODEL defaults to svc's default model, fetched with
#   `svc pull --data-dir ${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}`.
# Settings (environment):
#   BENCH_THREADS=2  BENCH_PROMPT=512  BENCH_GEN=128  BENCH_RUNS=3 (timed runs per
#   program)  BENCH_ROUNDS=5 (alternating svc / llama.cpp rounds)
#   BENCH_FLASH_ATTN=auto|on|off  BENCH_PARALLEL=16  BENCH_CONTEXT (svc serve
#   --context; default: serve's default)  BENCH_CONCURRENCY=1,4,16
#   BENCH_MAX_TOKENS=128  BENCH_HTTP_ROUNDS=3  BENCH_QUIET_WAIT=120 (seconds to
#   wait for an idle machine before each measurement)  BENCH_SKIP_SINGLE=1 /
#   BENCH_SKIP_HTTP=1
#   SVC_BENCH_VENV (default target/.venv-bench): venv with llama-cpp-python and
#   httpx; created on first use. A wheel in SVC_BENCH_WHEELS (default
#   /tmp/llcpp/wheels) is reused when it was built for x86-64-v3 (checked
#   after installing); otherwise llama-cpp-python is built from source.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

threads=${BENCH_THREADS:-2}
prompt=${BENCH_PROMPT:-512}
gen=${BENCH_GEN:-128}
runs=${BENCH_RUNS:-3}
rounds=${BENCH_ROUNDS:-5}
flash=${BENCH_FLASH_ATTN:-auto}
parallel=${BENCH_PARALLEL:-16}
concurrency=${BENCH_CONCURRENCY:-1,4,16}
max_tokens=${BENCH_MAX_TOKENS:-128}
http_rounds=${BENCH_HTTP_ROUNDS:-3}
quiet=${BENCH_QUIET_WAIT:-120}
venv=${SVC_BENCH_VENV:-$root/target/.venv-bench}
wheels=${SVC_BENCH_WHEELS:-/tmp/llcpp/wheels}
llcpp_version=0.3.36
# The same SIMD level as svc's llama.cpp (.cargo/config.toml), never native.
llcpp_cmake="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"

log() { echo "$*" >&2; }

# --- the Python side: venv with llama-cpp-python (from source) and httpx ---
py=$venv/bin/python
simd_ok() { # llama.cpp in the venv has AVX2/FMA/F16C and no AVX-512
  "$py" - <<'PY' 2>/dev/null
import sys, llama_cpp
info = llama_cpp.llama_print_system_info().decode()
sys.exit(0 if all(f"{f} = 1" in info for f in ("AVX2", "FMA", "F16C")) and "AVX512 = 1" not in info else 1)
PY
}
if [ ! -x "$py" ]; then
  log "creating $venv"
  python3 -m venv "$venv"
fi
if ! "$py" -c "import llama_cpp, httpx; assert llama_cpp.__version__ == '$llcpp_version'" 2>/dev/null || ! simd_ok; then
  "$py" -m pip install -q "httpx>=0.27"
  wheel=$(ls "$wheels"/llama_cpp_python-"$llcpp_version"-*.whl 2>/dev/null | head -n1 || true)
  if [ -n "$wheel" ]; then
    log "installing $wheel"
    "$py" -m pip install -q --force-reinstall --no-deps "$wheel"
  fi
  if ! simd_ok; then
    log "building llama-cpp-python $llcpp_version from source with: $llcpp_cmake (takes a while)"
    CMAKE_ARGS="$llcpp_cmake" "$py" -m pip install -q --force-reinstall --no-cache-dir \
      --no-binary llama-cpp-python "llama-cpp-python==$llcpp_version"
    simd_ok || { log "llama-cpp-python was not built with the expected SIMD flags"; exit 1; }
  fi
fi

# --- svc: release builds, copied so that concurrent rebuilds cannot swap them mid-run ---
log "building svc and the engine's example bench (release)"
cargo build --release -q -p svc-cli --bin svc -p svc-engine-llama --example bench
work=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
cp target/release/svc target/release/examples/bench "$work/"

model=${1:-}
if [ -z "$model" ]; then
  model=$("$work/svc" pull --data-dir "${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}")
fi
[ -f "$model" ] || { log "no such model: $model"; exit 1; }

cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
echo "## Embedded engine"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $cpu, nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "model: \`$(basename "$model")\` ($(stat -c %s "$model") bytes), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes in crates/')"
echo

# --- 1. single stream, svc vs llama.cpp ---
if [ -z "${BENCH_SKIP_SINGLE:-}" ]; then
  log "single stream: $rounds rounds of svc and llama.cpp, $runs runs each"
  "$py" bench/engine/single.py "$model" --svc-bench "$work/bench" --python "$py" \
    --threads "$threads" --prompt "$prompt" --gen "$gen" --runs "$runs" --rounds "$rounds" \
    --flash-attn "$flash" --quiet-wait "$quiet" >"$work/single.json"
  "$py" - "$work/single.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"svc: {d['svc_header']}")
print(f"llama.cpp: {d['llama_engine']}, {d['llama_system_info']}")
PY
  echo
  "$py" -c 'import sys; sys.path.insert(0, "bench/engine"); import json, report; print(report.single_table(json.load(open(sys.argv[1]))))' "$work/single.json"
  echo
fi

# --- 2. HTTP API of a real svc serve ---
if [ -z "${BENCH_SKIP_HTTP:-}" ]; then
  data=$work/data
  mkdir -p "$data"
  key=$("$work/svc" keys create --data-dir "$data" --name bench)
  ctx_args=()
  [ -n "${BENCH_CONTEXT:-}" ] && ctx_args=(--context "$BENCH_CONTEXT")
  log "starting svc serve --parallel $parallel --threads $threads ${ctx_args[*]}"
  "$work/svc" serve --data-dir "$data" --model "$model" --bind 127.0.0.1:0 \
    --parallel "$parallel" --threads "$threads" "${ctx_args[@]}" >"$work/serve.out" 2>"$work/serve.log" &
  server=$!
  url=
  for _ in $(seq 600); do
    url=$(sed -n 's/^svc is serving on \(http[^ ]*\).*/\1/p' "$work/serve.log")
    [ -n "$url" ] && break
    kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$url" ] || { log "svc serve did not start"; cat "$work/serve.log" >&2; exit 1; }
  log "$(grep -m1 'tokens x' "$work/serve.log" || true)"
  meta=$(printf '{"parallel": %s, "threads": %s, "context": "%s"}' "$parallel" "$threads" \
    "$(sed -n 's/.*context \([0-9]*\) tokens x.*/\1/p' "$work/serve.log" | head -n1)")
  "$py" bench/engine/http_load.py --url "$url" --key "$key" --pid "$server" \
    --concurrency "$concurrency" --max-tokens "$max_tokens" --rounds "$http_rounds" \
    --quiet-wait "$quiet" --meta "$meta" >"$work/http.json"
  "$py" -c 'import sys; sys.path.insert(0, "bench/engine"); import json, report; d = json.load(open(sys.argv[1])); print(report.http_table(d, d["meta"]))' "$work/http.json"
  echo
fi
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
if [ -n "${BENCH_KEEP_JSON:-}" ]; then
  mkdir -p "$BENCH_KEEP_JSON"
  cp "$work"/*.json "$BENCH_KEEP_JSON"/ 2>/dev/null || true
fi
