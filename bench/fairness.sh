#!/usr/bin/env bash
# Can one key's prompt work hold another key's first token? (issue 61) One
# `svc serve` on the embedded default model (SmolLM2-135M-Instruct,
# --threads $BENCH_THREADS, --parallel $BENCH_PARALLEL: the security
# review's 1 thread and 8 slots by default); key B's TTFT when nothing else
# runs, beside key A's long generations (the reference), long prompts,
# scored prompts and one scored request of n choices. Details:
# bench/engine/fairness_ttft.py. Prints a Markdown table.
# Usage: bench/fairness.sh [rounds, default 3]
# Settings: BENCH_THREADS=1, BENCH_PARALLEL=8 (slots), BENCH_SVC_BIN (an svc
#   binary; default: a release build), SVC_BENCH_DATA_DIR (the model, pulled
#   with `svc pull` on first use; default ~/.cache/svc-bench),
#   SVC_BENCH_VENV (default target/.venv-bench: a venv with httpx),
#   BENCH_FAIRNESS_ARGS (more flags for fairness_ttft.py, e.g. --conditions idle,scored)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-3}
threads=${BENCH_THREADS:-1}
parallel=${BENCH_PARALLEL:-8}
data=${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}
log() { echo "$*" >&2; }

if [ -n "${BENCH_SVC_BIN:-}" ]; then
  svc=$BENCH_SVC_BIN
else
  cargo build --release -q --locked -p svc-cli --bin svc
  svc=${CARGO_TARGET_DIR:-target}/release/svc
fi
venv=${SVC_BENCH_VENV:-$root/target/.venv-bench}
py=$venv/bin/python
[ -x "$py" ] || { log "creating $venv"; python3 -m venv "$venv"; }
"$py" -c 'import httpx' 2>/dev/null || "$py" -m pip install -q "httpx>=0.27"

"$svc" pull --data-dir "$data" >&2
out=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
mkdir -p "$out/data/models"
ln -s "$data"/models/* "$out/data/models/"
key=$("$svc" keys create --name b --data-dir "$out/data"),$("$svc" keys create --name a --data-dir "$out/data")
SVC_LOG=warn "$svc" serve --data-dir "$out/data" --model "$data/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --bind 127.0.0.1:0 --threads "$threads" --parallel "$parallel" 2>"$out/serve.log" &
pid=$!
for _ in $(seq 600); do grep -q "svc is serving on" "$out/serve.log" && break; sleep 0.1; done
url=$(sed -n 's/^svc is serving on \(\S*\).*/\1/p' "$out/serve.log" | head -1)
[ -n "$url" ] || { cat "$out/serve.log" >&2; exit 1; }
# shellcheck disable=SC2086
"$py" bench/engine/fairness_ttft.py --url "$url/v1" --key "$key" --pid "$pid" --rounds "$rounds" ${BENCH_FAIRNESS_ARGS:-}
