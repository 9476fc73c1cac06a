#!/usr/bin/env bash
# What the request log and traces cost the HTTP layer: bench/gateway.sh's
# chat and stream runs (wrk, the zero-latency fake engine, release build)
# against three servers started side by side and measured in turns:
#   off      --no-request-log, no traces
#   log      the request log (the default)
#   log+otlp the request log and traces sent to an OTLP receiver here
#            (a Python HTTP server that answers 200 to every POST)
# Usage: bench/observability.sh [seconds per run, default 6] [connections,
# default 64] [rounds, default 3]. Needs wrk. Prints a Markdown table: the
# median of the rounds for each server and path.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}
conns=${2:-64}
rounds=${3:-3}
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p svc-test-support --bin svc-fake-server
target=${CARGO_TARGET_DIR:-target}
out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$out"' EXIT

python3 - "$out/receiver" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(f"http://127.0.0.1:{s.server_address[1]}\n")
s.serve_forever()
PY
pids+=($!)
for _ in $(seq 100); do [ -s "$out/receiver" ] && break; sleep 0.1; done
receiver=$(cat "$out/receiver")

start() { # name args...
  local name=$1; shift
  "$target/release/svc-fake-server" "$@" >"$out/$name.server" 2>"$out/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do grep -q '^key ' "$out/$name.server" 2>/dev/null && break; sleep 0.1; done
  local key
  key=$(awk '/^key /{print $2}' "$out/$name.server")
  cat >"$out/$name-chat.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"svc","messages":[{"role":"user","content":"Say hello to the benchmark"}]}'
LUA
  sed 's/"messages"/"stream":true,"messages"/' "$out/$name-chat.lua" >"$out/$name-stream.lua"
}
start off --no-request-log
start log
start log+otlp --otlp-endpoint "$receiver"

measure() { # server kind round
  local url
  url=$(awk '/^url /{print $2}' "$out/$1.server")
  wrk -t2 -c"$conns" -d"${secs}s" --latency -s "$out/$1-$2.lua" "$url/v1/chat/completions" >"$out/$1-$2-$3.txt"
}
for round in $(seq "$rounds"); do
  for kind in chat stream; do
    for server in off log log+otlp; do measure "$server" "$kind" "$round"; done
  done
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; printf "%.2f\n", v}'; }
echo "svc HTTP layer with the request log and traces, fake engine, ${conns} connections, ${secs}s x ${rounds} rounds each (median), $(nproc) cores shared with wrk"
echo
echo '| path | server | req/s | p50 ms | p99 ms | non-2xx |'
echo '|---|---|---:|---:|---:|---:|'
for kind in chat stream; do
  for server in off log log+otlp; do
    files=("$out/$server-$kind"-*.txt)
    rps=$(for f in "${files[@]}"; do awk '/^Requests\/sec/{printf "%.0f\n", $2}' "$f"; done | median)
    p50=$(for f in "${files[@]}"; do awk '$1=="50%"{print $2}' "$f" | ms; done | median)
    p99=$(for f in "${files[@]}"; do awk '$1=="99%"{print $2}' "$f" | ms; done | median)
    errors=$(cat "${files[@]}" | awk '/Non-2xx/{n+=$NF} END {print n+0}')
    echo "| $kind | $server | $rps | $p50 | $p99 | $errors |"
  done
done
# Rows the request log could not keep up with (dropped when its queue was
# full): what the table's throughput cost in completeness.
echo
for server in log log+otlp; do
  url=$(awk '/^url /{print $2}' "$out/$server.server")
  sleep 2  # the writer's last batch
  dropped=$(curl -s "$url/metrics" | awk '/^svc_request_log_dropped_total /{print $2}')
  requests=$(cat "$out/$server"-*-*.txt | awk '/requests in/{n+=$1} END {print n+0}')
  echo "$server: ${dropped:-?} of $requests request-log rows dropped"
done
