#!/usr/bin/env bash
# Builds svc and starts `svc serve` (arguments after the options go to it):
#
#   scripts/serve.sh [svc serve args...]            the full svc, with the embedded engine
#   scripts/serve.sh --gateway [svc serve args...]  svc without the embedded engine
#
# The full build installs what it lacks first (scripts/setup.sh --build:
# cmake, clang and libclang, with apt-get as root; otherwise it prints the
# command to run and stops), then compiles llama.cpp from source the first
# time: about 15 minutes on 2 cores, with cargo's progress shown; later
# builds take seconds. With no arguments it serves on the embedded defaults.
#
# The gateway build needs no C++ toolchain and builds in a fraction of the
# time, but serves only models on upstream engines (`[models.<id>]` tables
# with `upstreams`, for `svc` and `svc-thinking` too): pass `--config FILE`.
#
# SVC_SETUP_DRY_RUN=1 says what would be installed and run, and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

features=()
what="svc (with the embedded engine)"
if [ "${1:-}" = "--gateway" ]; then
    shift
    features=(--no-default-features)
    what="svc without the embedded engine (gateway only)"
else
    bash scripts/setup.sh --build
fi

build=(cargo build --release --locked -p svc-cli --bin svc "${features[@]}")
run=(cargo run --release --locked -q -p svc-cli --bin svc "${features[@]}" -- serve "$@")
if [ "${SVC_SETUP_DRY_RUN:-0}" != 0 ]; then
    echo "serve: dry run; would run: ${build[*]}"
    echo "serve: dry run; would run: ${run[*]}"
    exit 0
fi

echo "--- building $what"
if [ ${#features[@]} -eq 0 ]; then
    echo "    (the first build compiles llama.cpp from source: about 15 minutes on 2 cores)"
fi
"${build[@]}"
echo "--- svc serve $*"
exec "${run[@]}"
