#!/usr/bin/env bash
# Load benchmark of the HTTP layer with the zero-latency fake engine:
# requests/s and p50/p99 latency at 64 connections over loopback, for
#   health   GET /health               reference: no auth, no engine
#   auth     GET /v1/models            the key check alone (hash + store lookup)
#   chat     POST /v1/chat/completions whole reply
#   stream   POST /v1/chat/completions streamed (SSE) reply
#   resp     POST /v1/responses        whole reply (store false, as Codex sends)
#   resp-sse POST /v1/responses        streamed reply
#   msgs     POST /v1/messages         whole reply (x-api-key)
#   msgs-sse POST /v1/messages         streamed reply
# The last four against chat/stream are what translating the Responses and
# Messages dialects to and from the engine boundary costs.
# Usage: bench/gateway.sh [seconds per run, default 10] [connections, default 64]
# Needs wrk (apt-get install wrk). Prints a Markdown table, and writes the run
# to bench/results/gateway.json (bench/results.py; BENCH_RESULTS=FILE writes
# elsewhere, BENCH_RESULTS=none not at all): `python3 bench/charts.py` then
# redraws BENCHMARKS.md's table and charts.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
conns=${2:-64}
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p svc-test-support --bin svc-fake-server
started=$(date +%s)
out=$(mktemp -d)
trap 'kill $server 2>/dev/null; rm -rf "$out"' EXIT
target=${CARGO_TARGET_DIR:-target}
"$target/release/svc-fake-server" >"$out/server" 2>"$out/server.log" &
server=$!
for _ in $(seq 100); do grep -q '^key ' "$out/server" 2>/dev/null && break; sleep 0.1; done
url=$(awk '/^url /{print $2}' "$out/server")
key=$(awk '/^key /{print $2}' "$out/server")

cat >"$out/chat.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"svc","messages":[{"role":"user","content":"Say hello to the benchmark"}]}'
LUA
sed 's/"messages"/"stream":true,"messages"/' "$out/chat.lua" >"$out/stream.lua"
cat >"$out/resp.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"svc","store":false,"input":"Say hello to the benchmark"}'
LUA
sed 's/"store"/"stream":true,"store"/' "$out/resp.lua" >"$out/resp-sse.lua"
cat >"$out/msgs.lua" <<LUA
wrk.method = "POST"
wrk.headers["x-api-key"] = "$key"
wrk.headers["anthropic-version"] = "2023-06-01"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"svc","max_tokens":64,"messages":[{"role":"user","content":"Say hello to the benchmark"}]}'
LUA
sed 's/"max_tokens"/"stream":true,"max_tokens"/' "$out/msgs.lua" >"$out/msgs-sse.lua"
cat >"$out/auth.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $key"
LUA
echo 'wrk.method = "GET"' >"$out/health.lua"

run() { # name path script
  wrk -t2 -c"$conns" -d"${secs}s" --latency -s "$out/$3.lua" "$url$2" >"$out/$1.txt"
  local rps p50 p99 errors
  rps=$(awk '/^Requests\/sec/{printf "%.0f", $2}' "$out/$1.txt")
  p50=$(awk '$1=="50%"{print $2}' "$out/$1.txt")
  p99=$(awk '$1=="99%"{print $2}' "$out/$1.txt")
  errors=$(awk '/Non-2xx/{print $NF}' "$out/$1.txt")
  printf '| %-7s | %-28s | %9s | %8s | %8s | %6s |\n' "$1" "$2" "$rps" "$p50" "$p99" "${errors:-0}"
}
echo "svc HTTP layer, fake engine, ${conns} connections, ${secs}s each, $(nproc) cores shared with wrk"
echo
echo '| run     | path                         |  req/s    |  p50     |  p99     | non-2xx |'
echo '|---------|------------------------------|-----------|----------|----------|--------|'
run health /health health
run auth /v1/models auth
run chat /v1/chat/completions chat
run stream /v1/chat/completions stream
run resp /v1/responses resp
run resp-sse /v1/responses resp-sse
run msgs /v1/messages msgs
run msgs-sse /v1/messages msgs-sse
python3 bench/results.py gateway "$out" --secs "$secs" --conns "$conns" --started "$started"
