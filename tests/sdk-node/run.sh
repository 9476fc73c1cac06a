#!/usr/bin/env bash
# Tests that drive svc with the official `openai` Node SDK and the Vercel AI
# SDK (`ai` + `@ai-sdk/openai`), on Node's test runner.
# Usage: tests/sdk-node/run.sh [node --test args...]
#
# Installs the pinned npm packages when node_modules is missing or older than
# package-lock.json, builds svc-fake-server with cargo unless SVC_FAKE_SERVER
# names a binary (and `svc`, when SVC_TEST_MODEL names the default model's
# GGUF for real-model.test.mjs, unless SVC_BIN names one), and runs every
# *.test.mjs here. Any server a test leaves
# running is killed on exit. The exit code is the test runner's.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$HERE"

if ! command -v node >/dev/null 2>&1; then
    echo "run.sh: node (20 or later) is needed: apt-get install nodejs npm" >&2
    exit 1
fi

if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
    npm ci --no-audit --no-fund
fi

if [[ -z "${SVC_FAKE_SERVER:-}" ]]; then
    TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
    [[ "$TARGET" = /* ]] || TARGET="$ROOT/$TARGET"
    (cd "$ROOT" && cargo build --locked -q -p svc-test-support --bin svc-fake-server)
    SVC_FAKE_SERVER="$TARGET/debug/svc-fake-server"
fi
# real-model.test.mjs serves the default model ($SVC_TEST_MODEL) with `svc`.
if [[ -n "${SVC_TEST_MODEL:-}" && -z "${SVC_BIN:-}" ]]; then
    TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
    [[ "$TARGET" = /* ]] || TARGET="$ROOT/$TARGET"
    (cd "$ROOT" && cargo build --locked -q -p svc-cli --bin svc)
    SVC_BIN="$TARGET/debug/svc"
    export SVC_BIN
fi
if [[ ! -x "$SVC_FAKE_SERVER" ]]; then
    echo "run.sh: $SVC_FAKE_SERVER is not an executable svc-fake-server" >&2
    exit 1
fi
export SVC_FAKE_SERVER

# Each server a test starts leaves a file named after its pid here; whatever
# is left at exit (a test process that crashed or was killed) is killed.
SVC_SDK_PIDS="$(mktemp -d "${TMPDIR:-/tmp}/svc-sdk-node-pids.XXXXXX")"
export SVC_SDK_PIDS
cleanup() {
    local file pid
    for file in "$SVC_SDK_PIDS"/*; do
        [[ -f "$file" ]] || continue
        pid="$(basename "$file")"
        if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$SVC_SDK_PIDS"
}
trap cleanup EXIT

# In the background so that a signal to this script reaches the runner at
# once (and the servers are killed after it), not only when it ends.
node --test --test-reporter=spec "$@" ./*.test.mjs &
runner=$!
trap 'kill -INT "$runner" 2>/dev/null || true' INT
trap 'kill -TERM "$runner" 2>/dev/null || true' TERM
status=0
wait "$runner" || status=$?
while kill -0 "$runner" 2>/dev/null; do
    status=0
    wait "$runner" || status=$?
done
exit "$status"
