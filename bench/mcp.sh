#!/usr/bin/env bash
# What svc's /mcp adds to an MCP tool call: the official MCP Python SDK's
# Client calling its own MCPServer's `add` directly, and through svc's /mcp
# (svc-fake-server, release, with the server registered), one call at a
# time, alternating rounds (bench/mcp_calls.py). The target: at most 2 ms
# added to the p50.
# Usage: bench/mcp.sh [calls per round, default 300] [rounds, default 3]
# Needs the `mcp` package: uses .venv (tests/python/run.sh makes it) when it
# has it, else makes bench/.venv-mcp with pip. Prints a Markdown table and
# writes bench/results/mcp.json (BENCH_RESULTS=none: not at all).
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-300}
rounds=${2:-3}
python=.venv/bin/python
if ! "$python" -c 'import mcp.server.mcpserver' 2>/dev/null; then
  python=bench/.venv-mcp/bin/python
  if ! "$python" -c 'import mcp.server.mcpserver' 2>/dev/null; then
    python3 -m venv bench/.venv-mcp
    "$python" -m pip install --quiet --disable-pip-version-check mcp==2.3.0
  fi
fi
cargo build --release -q -p svc-test-support --bin svc-fake-server
target=${CARGO_TARGET_DIR:-target}
out=$(mktemp -d)
trap 'kill $server $upstream 2>/dev/null; rm -rf "$out"' EXIT
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$out/upstream.py" <<'PY'
import sys
from mcp.server.mcpserver import MCPServer

app = MCPServer("py")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=True)
PY
"$python" "$out/upstream.py" "$port" >"$out/upstream.log" 2>&1 &
upstream=$!
for _ in $(seq 300); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
"$target/release/svc-fake-server" --mcp-server "py=http://127.0.0.1:$port/mcp" \
  >"$out/server" 2>"$out/server.log" &
server=$!
for _ in $(seq 100); do grep -q '^key ' "$out/server" 2>/dev/null && break; sleep 0.1; done
url=$(awk '/^url /{print $2}' "$out/server")
key=$(awk '/^key /{print $2}' "$out/server")
"$python" bench/mcp_calls.py "$url" "$key" "http://127.0.0.1:$port/mcp" "$calls" "$rounds"
