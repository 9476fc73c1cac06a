#!/usr/bin/env bash
# What the response cache saves: a reproducible chat request (temperature 0)
# through the fake server (release build), measured with wrk:
#   off   the cache off; every request goes to the engine
#   miss  the cache on, every request different (a new seed each): looked
#         up, not found, answered by the engine and kept
#   hit   the cache on, the same request each time: sent from the cache
# for two fake models: `svc` answers at once (the HTTP layer's own cost)
# and `fake-slow` takes 50 ms a word (an engine's time, which a hit saves).
# The three servers run side by side, measured in turns.
# Usage: bench/cache.sh [seconds per run, default 6] [connections, default 64]
# (fake-slow runs with a quarter of them). Needs wrk. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-6}
conns=${2:-64}
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
cargo build --release -q -p svc-test-support --bin svc-fake-server
target=${CARGO_TARGET_DIR:-target}
out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$out"' EXIT

start() { # name args...
  local name=$1; shift
  "$target/release/svc-fake-server" --no-request-log "$@" >"$out/$name.server" 2>"$out/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do grep -q '^key ' "$out/$name.server" 2>/dev/null && break; sleep 0.1; done
}
start off
start on --response-cache-ttl 3600

script() { # server model kind(same|fresh)
  local key
  key=$(awk '/^key /{print $2}' "$out/$1.server")
  cat <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end
local n = 0
request = function()
  n = n + 1
  -- A seed no request of this server had: the thread, the time, a count.
  local seed = "$3" == "fresh" and string.format(', "seed": %d%d%07d', id, os.time() % 100000, n) or ""
  return wrk.format(nil, nil, nil,
    '{"model":"$2","temperature":0' .. seed .. ',"messages":[{"role":"user","content":"Say hello to the benchmark"}]}')
end
LUA
}

measure() { # label server model kind connections
  script "$2" "$3" "$4" >"$out/$1.lua"
  local url
  url=$(awk '/^url /{print $2}' "$out/$2.server")
  # One request first, so a hit run finds its entry kept.
  wrk -t1 -c1 -d1s -s "$out/$1.lua" "$url/v1/chat/completions" >/dev/null
  sleep 0.5
  wrk -t2 -c"$5" -d"${secs}s" --latency -s "$out/$1.lua" "$url/v1/chat/completions" >"$out/$1.txt"
}
slow=$(( conns / 4 > 0 ? conns / 4 : 1 ))
for model in svc fake-slow; do
  c=$conns; [ "$model" = fake-slow ] && c=$slow
  measure "$model-off" off "$model" same "$c"
  measure "$model-miss" on "$model" fresh "$c"
  measure "$model-hit" on "$model" same "$c"
done

ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; printf "%.2f\n", v}'; }
echo "svc response cache, fake engine, ${secs}s a run, ${conns} connections (fake-slow: ${slow}), $(nproc) cores shared with wrk"
echo
echo '| model | cache | req/s | p50 ms | p99 ms | non-2xx |'
echo '|---|---|---:|---:|---:|---:|'
for model in svc fake-slow; do
  for kind in off miss hit; do
    f="$out/$model-$kind.txt"
    rps=$(awk '/^Requests\/sec/{printf "%.0f", $2}' "$f")
    p50=$(awk '$1=="50%"{print $2}' "$f" | ms)
    p99=$(awk '$1=="99%"{print $2}' "$f" | ms)
    errors=$(awk '/Non-2xx/{print $NF}' "$f"); errors=${errors:-0}
    echo "| $model | $kind | $rps | $p50 | $p99 | $errors |"
  done
done
