#!/usr/bin/env bash
# Does a batch slow interactive requests? (issue 34) One `svc serve` on the
# embedded default model (SmolLM2-135M-Instruct, --threads $BENCH_THREADS);
# an interactive client's TTFT when nothing else runs, while a batch runs,
# and while the same lines come as plain requests from 4 clients (the
# reference: that load without the batch's low priority). Details:
# bench/engine/batch_ttft.py. Prints a Markdown table.
# Usage: bench/batch.sh [rounds, default 3]
# Settings: BENCH_THREADS=2, BENCH_PARALLEL=4 (slots), BENCH_SVC_BIN (an svc
#   binary; default: a release build), SVC_BENCH_DATA_DIR (the model, pulled
#   with `svc pull` on first use; default ~/.cache/svc-bench),
#   SVC_BENCH_VENV (default target/.venv-bench: a venv with httpx)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-3}
threads=${BENCH_THREADS:-2}
parallel=${BENCH_PARALLEL:-4}
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
key=$("$svc" keys create --name interactive --data-dir "$out/data"),$("$svc" keys create --name batch --data-dir "$out/data")
SVC_LOG=warn "$svc" serve --data-dir "$out/data" --model "$data/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --bind 127.0.0.1:0 --threads "$threads" --parallel "$parallel" 2>"$out/serve.log" &
pid=$!
for _ in $(seq 600); do grep -q "svc is serving on" "$out/serve.log" && break; sleep 0.1; done
url=$(sed -n 's/^svc is serving on \(\S*\).*/\1/p' "$out/serve.log" | head -1)
[ -n "$url" ] || { cat "$out/serve.log" >&2; exit 1; }
"$py" bench/engine/batch_ttft.py --url "$url/v1" --key "$key" --pid "$pid" --rounds "$rounds"
