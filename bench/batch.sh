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
rounds=${1:-3}
# shellcheck source=bench/embedded-lib.sh
source bench/embedded-lib.sh
serve_embedded interactive batch "${BENCH_THREADS:-2}" "${BENCH_PARALLEL:-4}"
"$py" bench/engine/batch_ttft.py --url "$url/v1" --key "$key" --pid "$pid" --rounds "$rounds"
