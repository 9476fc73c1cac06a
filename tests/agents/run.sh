#!/usr/bin/env bash
# The real coding agents against svc: Codex CLI (`codex exec`, OpenAI
# Responses API) and Claude Code (`claude -p`, Anthropic Messages API), both
# from npm at pinned versions, each run against a `svc serve` that routes its
# model to a scripted chat-completions upstream (their prompts are longer
# than the default model's context), and Codex CLI again on svc's own engine
# with a tiny GGUF of Devstral's family. And svc's own MCP server (`/mcp`)
# used by MCP clients nobody here wrote (the MCP Inspector's command line,
# Claude Code, Codex CLI), offering the tools of
# @modelcontextprotocol/server-everything registered in svc's configuration.
# Usage: tests/agents/run.sh [node --test args...]
#
# Installs the npm packages when node_modules is missing or older than
# package-lock.json, builds `svc`, `svc-fake-upstream` and the engine's
# `tiny-gguf` example with cargo unless SVC_BIN / SVC_FAKE_UPSTREAM /
# SVC_TINY_GGUF name binaries, and runs every *.test.mjs
# here. The exit code is the test runner's.
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

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$TARGET" = /* ]] || TARGET="$ROOT/$TARGET"
if [[ -z "${SVC_BIN:-}" ]]; then
    (cd "$ROOT" && cargo build --locked -q -p svc-cli --bin svc)
    SVC_BIN="$TARGET/debug/svc"
fi
if [[ -z "${SVC_FAKE_UPSTREAM:-}" ]]; then
    (cd "$ROOT" && cargo build --locked -q -p svc-test-support --bin svc-fake-upstream)
    SVC_FAKE_UPSTREAM="$TARGET/debug/svc-fake-upstream"
fi
if [[ -z "${SVC_TINY_GGUF:-}" ]]; then
    (cd "$ROOT" && cargo build --locked -q -p svc-engine-llama --example tiny-gguf)
    SVC_TINY_GGUF="$TARGET/debug/examples/tiny-gguf"
fi
export SVC_BIN SVC_FAKE_UPSTREAM SVC_TINY_GGUF

shopt -s nullglob
tests=("$HERE"/*.test.mjs)
if [[ ${#tests[@]} -eq 0 ]]; then
    echo "run.sh: no tests in $HERE" >&2
    exit 1
fi
exec node --test --test-concurrency=1 "$@" "${tests[@]}"
