#!/usr/bin/env bash
# Prepares a run of svc on a GPU machine that has CUDA, cmake and Python but
# no Rust toolchain and no network (issue 32: the `cuda` check), as done for
# BENCHMARKS.md's "Embedded engine against llama-server on an NVIDIA H100"
# (the whole run: bench/LOG.md's "On an NVIDIA H100 with CUDA"):
#
#   1. here: bench/cuda/prepare.sh  -> .gpu/ (ignored): svc built with
#      llama.cpp as shared libraries (xz), its libllama-common (xz), the
#      llama.cpp + llama-server tree (tar.xz), the default model in two
#      halves (a call of the device tool carries at most 64 MiB) and its sha256;
#   2. there, first call: bash bench/cuda/build-there.sh, carrying
#      .gpu/tree.tar.xz and .gpu/model.part.aa: builds llama.cpp with CUDA in
#      the background (about 4 minutes on 16 cores) and returns;
#   3. there, second call at once: bash bench/cuda/run-there.sh, carrying the
#      rest of .gpu/: waits for the build, runs the greedy smoke check
#      (bench/cuda/greedy_smoke.py) and bench/vs-llama-server.sh, results in $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu
mkdir -p "$out"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.gpu/ >>.git/info/exclude; }
target=${SVC_GPU_TARGET:-/work/.gpu-target}
LLAMA_BUILD_SHARED_LIBS=1 CARGO_TARGET_DIR=$target cargo build --release -q -p svc-cli --bin svc
libs=$(dirname "$(find "$target/release/build" -path '*llama-cpp-sys-2-*/out/build/bin/libllama-common.so.0' | head -n1)")
objcopy --strip-debug "$target/release/svc" "$out/svc" && xz -f -T2 "$out/svc"
objcopy --strip-debug "$libs/libllama-common.so.0" "$out/libllama-common.so.0" && xz -f "$out/libllama-common.so.0"
tree=$(bench/vs-llama-server.sh --tree-only)
# Only what a CUDA build of llama-server reads: no model vocabularies, docs
# or other backends.
(cd "$(dirname "$tree")" && tar -cJf "$OLDPWD/$out/tree.tar.xz" \
  --exclude='*/models' --exclude='*/docs' --exclude='*/media' --exclude='*/benches' --exclude='*/.github' \
  --exclude='*/ggml/src/ggml-vulkan' --exclude='*/ggml/src/ggml-sycl' --exclude='*/ggml/src/ggml-opencl' \
  --exclude='*/ggml/src/ggml-metal' --exclude='*/ggml/src/ggml-cann' --exclude='*/ggml/src/ggml-musa' \
  --exclude='*/ggml/src/ggml-webgpu' "$(basename "$tree")")
model=$(CARGO_TARGET_DIR=$target LD_LIBRARY_PATH=$libs "$target/release/svc" pull --data-dir "${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}")
(cd "$out" && rm -f model.part.* && split -b 50000000 "$model" model.part.)
sha256sum "$model" | cut -c1-64 >"$out/model.sha256"
ls -la "$out"
