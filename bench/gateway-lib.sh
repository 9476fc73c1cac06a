# Sourced by bench/overhead.sh and bench/soak.sh: svc as a pure gateway
# (release build, SQLite) in front of the zero-latency fake upstream.
# Needs $target (the cargo target directory). Gives: $out (a temporary
# directory, removed at exit, with each process's log), $pids (killed at
# exit), wait_for, free_port, and after start_gateway: $upstream (the fake
# upstream's /v1 URL), $svc_port, $svc_pid and $key (an API key).

out=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT
wait_for() { # file pattern
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for $2 in $1" >&2; cat "$1" >&2; exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_gateway() {
  # The upstream: answers every chat completion at once.
  "$target/release/svc-fake-upstream" >"$out/upstream" 2>&1 &
  pids+=($!)
  wait_for "$out/upstream" '^url '
  upstream=$(awk '/^url /{print $2}' "$out/upstream")

  # svc, gateway only: both built-in ids routed to the upstream, so no
  # embedded model is loaded.
  svc_port=$(free_port)
  cat >"$out/svc.toml" <<TOML
bind = "127.0.0.1:$svc_port"
data_dir = "$out/svc-data"
[models.svc]
upstreams = [{ base_url = "$upstream", model = "fake" }]
[models.svc-thinking]
reasoning = true
upstreams = [{ base_url = "$upstream", model = "fake" }]
TOML
  key=$("$target/release/svc" keys create --config "$out/svc.toml" --name bench 2>/dev/null)
  SVC_LOG=warn "$target/release/svc" serve --config "$out/svc.toml" >"$out/svc.log" 2>&1 &
  svc_pid=$!
  pids+=($svc_pid)
  wait_for "$out/svc.log" 'serving on'
}
