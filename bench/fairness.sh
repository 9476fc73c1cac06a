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
# The table also goes to bench/results/fairness.json (bench/results.py; a run
# of some conditions to fairness.partial.json, which git ignores), from which
# `python3 bench/charts.py` redraws BENCHMARKS.md's table and charts;
# BENCH_RESULTS=FILE writes it elsewhere, BENCH_RESULTS=none not at all.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
# shellcheck source=bench/embedded-lib.sh
source bench/embedded-lib.sh
threads=${BENCH_THREADS:-1}
parallel=${BENCH_PARALLEL:-8}
serve_embedded b a "$threads" "$parallel"
# shellcheck disable=SC2086
"$py" bench/engine/fairness_ttft.py --url "$url/v1" --key "$key" --pid "$pid" --rounds "$rounds" \
  --results auto --command "$(python3 bench/results.py command bench/fairness.sh "$@")" \
  --threads "$threads" --parallel "$parallel" ${BENCH_FAIRNESS_ARGS:-}
