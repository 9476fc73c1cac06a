#!/usr/bin/env bash
# Checks the container image and the Kubernetes manifests (issue 33), as far
# as a machine that cannot pull images or run containers allows:
#
#  1. the Containerfile builds with podman, both targets (`full`, `gateway`),
#     from a Debian bookworm base made here (debootstrap, podman import) and
#     a builder image holding this machine's Rust toolchain (instead of
#     docker.io's rust image); RUN steps use chroot isolation;
#  2. the `svc` inside each image starts from the image's root filesystem
#     (chroot) and answers GET /health and GET /ready: `full` on the default
#     model ($SVC_TEST_MODEL, copied in), `gateway` on an upstream;
#  3. deploy/kubernetes renders (the base and the 3-replica overlay, by
#     scripts/kustomize.py) and every manifest validates against the
#     Kubernetes schemas of its API version (kubernetes-validate, from PyPI).
#
# Takes a full release build in each image (20-40 minutes on 2 cores), so it
# is not part of the default test command: scripts/test.sh runs it only when
# SVC_TEST_IMAGE=1. Run as root (debootstrap, chroot). Needs podman and
# debootstrap (installed with apt-get when missing).
# Usage: scripts/check-image.sh [--manifests-only]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

manifests_only=0
[ "${1:-}" = "--manifests-only" ] && manifests_only=1

say() { echo "--- check-image: $*"; }

check_manifests() {
  say "Kubernetes manifests"
  local venv="$ROOT/.venv-k8s"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check PyYAML==6.0.4 kubernetes-validate==1.37.0
  local out
  out="$(mktemp -d)"
  "$venv/bin/python" scripts/kustomize.py deploy/kubernetes/base > "$out/base.yaml"
  "$venv/bin/python" scripts/kustomize.py deploy/kubernetes/overlays/three-replicas > "$out/three.yaml"
  for rendered in "$out/base.yaml" "$out/three.yaml"; do
    "$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.31.0 "$rendered"
  done
  grep -q '^  replicas: 3$' "$out/three.yaml" || { echo "the overlay did not set 3 replicas" >&2; exit 1; }
  say "manifests: base and three-replicas render and validate ($(grep -c '^kind:' "$out/three.yaml") objects)"
  rm -rf "$out"
}

if [ "$manifests_only" = 1 ]; then
  check_manifests
  exit 0
fi

[ "$(id -u)" = 0 ] || { echo "check-image: run as root (debootstrap and chroot need it)" >&2; exit 1; }
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman debootstrap >/dev/null
done
: "${SVC_TEST_MODEL:?set SVC_TEST_MODEL to the default model (scripts/test.sh does)}"

cache="${XDG_CACHE_HOME:-$HOME/.cache}/svc-image"
mkdir -p "$cache"

# 1. The base: Debian bookworm, minimal, as docker.io's debian:bookworm-slim.
if ! podman image exists localhost/svc-debian:bookworm; then
  say "debootstrap bookworm"
  rm -rf "$cache/rootfs"
  debootstrap --variant=minbase bookworm "$cache/rootfs" http://deb.debian.org/debian >/dev/null
  # This machine's own certificate authorities (registries may be reached
  # through a TLS-inspecting proxy): trusted in the images built on it,
  # once their ca-certificates package is installed.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$cache/rootfs/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$cache/rootfs/usr/local/share/ca-certificates/"
  fi
  tar -C "$cache/rootfs" -c . | podman import - localhost/svc-debian:bookworm >/dev/null
fi
# The builder: that base, build tools and this machine's Rust toolchain.
if ! podman image exists localhost/svc-rust:1.95; then
  say "builder image with $(rustc --version)"
  sysroot="$(rustc --print sysroot)"
  work="$(mktemp -d)"
  mkdir -p "$work/ctx"
  cp -a "$sysroot" "$work/ctx/rust"
  cat > "$work/ctx/Containerfile" <<'EOF'
FROM localhost/svc-debian:bookworm
RUN apt-get update -q && apt-get install -y -q --no-install-recommends \
      build-essential ca-certificates git pkg-config >/dev/null && rm -rf /var/lib/apt/lists/*
COPY rust /usr/local/rust
ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CARGO_HOME=/usr/local/cargo
EOF
  podman build --isolation=chroot -q -t localhost/svc-rust:1.95 "$work/ctx" >/dev/null
  rm -rf "$work"
fi

build() {
  local target="$1"
  say "podman build --target $target"
  local started=$SECONDS
  podman build --isolation=chroot --target "$target" \
    --build-arg BUILDER=localhost/svc-rust:1.95 \
    --build-arg BASE=localhost/svc-debian:bookworm \
    -t "localhost/svc:$target" -f Containerfile . > "$cache/build-$target.log" 2>&1 \
    || { tail -40 "$cache/build-$target.log"; exit 1; }
  say "built localhost/svc:$target in $((SECONDS - started)) s, $(podman image inspect --format '{{.Size}}' "localhost/svc:$target" | numfmt --to=iec) "
}

# 2. svc from the image's root filesystem answers /health and /ready.
serve_from() {
  local target="$1"; shift
  local root
  root="$(podman image mount "localhost/svc:$target")"
  # A writable copy: the image's layers stay untouched.
  local run
  run="$(mktemp -d)"
  cp -a "$root/." "$run/"
  podman image unmount "localhost/svc:$target" >/dev/null
  mkdir -p "$run/data" "$run/proc" "$run/dev"
  mount -t proc proc "$run/proc"
  mount --bind /dev "$run/dev"
  cp /etc/resolv.conf "$run/etc/resolv.conf"
  "$@" "$run"
  chroot --userspec=10001:10001 "$run" /usr/local/bin/svc serve --bind 127.0.0.1:0 --data-dir /data \
    ${SVC_IMAGE_ARGS:-} > "$run/serve.log" 2>&1 &
  local pid=$!
  local url=""
  for _ in $(seq 1200); do
    url="$(sed -n 's/^svc is serving on \(http[^ ]*\).*/\1/p' "$run/serve.log" | head -1)"
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  local ok=1
  if [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] \
     && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/ready")" = 200 ]; then
    say "$target: svc from the image's root filesystem answers /health and /ready at $url"
    ok=0
  else
    cat "$run/serve.log"
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  umount "$run/proc" "$run/dev"
  rm -rf "$run"
  return $ok
}

with_model() {
  mkdir -p "$1/data/models"
  cp "$SVC_TEST_MODEL" "$1/data/models/"
  [ -z "${SVC_TEST_EMBED_MODEL:-}" ] || cp "$SVC_TEST_EMBED_MODEL" "$1/data/models/"
  chown -R 10001:10001 "$1/data"
}

with_upstream() {
  # Nothing listens there: /ready still answers (upstreams are not the store).
  printf '[models.svc]\nupstreams = [{ base_url = "http://127.0.0.1:9/v1", model = "svc" }]\n[models.svc-thinking]\nupstreams = [{ base_url = "http://127.0.0.1:9/v1", model = "svc" }]\n' > "$1/data/svc.toml"
  chown -R 10001:10001 "$1/data"
}

build full
build gateway
SVC_IMAGE_ARGS="" serve_from full with_model
SVC_IMAGE_ARGS="--config /data/svc.toml" serve_from gateway with_upstream
check_manifests
say "all checks passed"
