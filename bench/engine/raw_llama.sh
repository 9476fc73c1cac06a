#!/usr/bin/env bash
# Builds bench/engine/raw_llama.c against the llama.cpp that svc's release
# build compiled (llama-cpp-sys-2's static libraries), into
# target/bench-raw/raw_llama, and runs it with the given arguments:
#   bench/engine/raw_llama.sh MODEL.gguf [threads] [prompt] [gen] [runs] [fa]
# Run `cargo build --release -p svc-engine-llama --example bench` first.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(ls -td target/release/build/llama-cpp-sys-2-*/out 2>/dev/null | head -n1)
[ -f "$out/lib/libllama.a" ] || { echo "build svc (release) first" >&2; exit 1; }
mkdir -p target/bench-raw
gcc -O2 -o target/bench-raw/raw_llama bench/engine/raw_llama.c -I"$out/include" \
  "$out/lib/libllama.a" "$out/lib/libggml.a" "$out/lib/libggml-cpu.a" "$out/lib/libggml-base.a" \
  -lstdc++ -fopenmp -lpthread -lm -ldl
exec target/bench-raw/raw_llama "$@"
