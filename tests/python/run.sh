#!/usr/bin/env bash
# The conformance suite: the official openai SDK and schemathesis against the
# svc fake server. Usage: tests/python/run.sh [pytest args...]
#
# Creates .venv at the repository root if missing, installs
# tests/python/requirements.txt into it, builds svc-fake-server with cargo
# unless SVC_FAKE_SERVER names a binary (and `svc`, for the TLS and
# real-model tests, unless SVC_BIN names one, and the engine's tiny-gguf
# example, unless SVC_TINY_GGUF names it), and runs pytest on
# tests/python.
# The exit code is pytest's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "run.sh: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt

if [[ -z "${SVC_FAKE_SERVER:-}" ]]; then
    cargo build --quiet -p svc-test-support --bin svc-fake-server
fi
# test_tls.py runs `svc serve`, and test_real_model.py too on $SVC_TEST_MODEL.
if [[ -z "${SVC_FAKE_UPSTREAM:-}" ]]; then
    cargo build --quiet -p svc-test-support --bin svc-fake-upstream
fi
if [[ -z "${SVC_BIN:-}" ]]; then
    cargo build --quiet --locked -p svc-cli --bin svc
fi
# test_families.py serves tiny GGUFs of model families that this writes.
if [[ -z "${SVC_TINY_GGUF:-}" ]]; then
    cargo build --quiet --locked -p svc-engine-llama --example tiny-gguf
fi

exec "$VENV/bin/python" -m pytest tests/python "$@"
