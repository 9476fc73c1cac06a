# Sourced by the benchmarks that drive one `svc serve` on the embedded
# default model (SmolLM2-135M-Instruct) with two keys of their own
# (bench/batch.sh, bench/fairness.sh).
# Settings: BENCH_SVC_BIN (an svc binary; default: a release build),
#   SVC_BENCH_DATA_DIR (the model, pulled with `svc pull` on first use;
#   default ~/.cache/svc-bench), SVC_BENCH_VENV (default
#   target/.venv-bench: a venv with httpx).

log() { echo "$*" >&2; }

# serve_embedded FIRST_KEY SECOND_KEY THREADS PARALLEL: builds svc unless
# BENCH_SVC_BIN names one, makes the venv, starts `svc serve --threads
# THREADS --parallel PARALLEL` in a data folder of its own (stopped and
# removed on exit) and sets `py` (the venv's python), `url`, `pid` and
# `key` ("FIRST,SECOND": the keys so named).
serve_embedded() {
  local first=$1 second=$2 threads=$3 parallel=$4
  local root=$PWD data=${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench} svc venv
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
  trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"' EXIT
  mkdir -p "$out/data/models"
  ln -s "$data"/models/* "$out/data/models/"
  key=$("$svc" keys create --name "$first" --data-dir "$out/data"),$("$svc" keys create --name "$second" --data-dir "$out/data")
  SVC_LOG=warn "$svc" serve --data-dir "$out/data" --model "$data/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
    --bind 127.0.0.1:0 --threads "$threads" --parallel "$parallel" 2>"$out/serve.log" &
  pid=$!
  for _ in $(seq 600); do grep -q "svc is serving on" "$out/serve.log" && break; sleep 0.1; done
  url=$(sed -n 's/^svc is serving on \(\S*\).*/\1/p' "$out/serve.log" | head -1)
  [ -n "$url" ] || { cat "$out/serve.log" >&2; exit 1; }
}
