#!/usr/bin/env bash
# On the GPU machine (see bench/cuda/prepare.sh): says what is there, keeps
# the model's first half outside the checkout, and starts the CUDA build of
# llama.cpp in its own session, so that it runs on after this call returns.
# $GPU_DIR (default /root/gpu) keeps everything between calls.
set -x
dir=${GPU_DIR:-/root/gpu}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
for t in cargo nvcc cmake ninja curl python3; do command -v $t || echo "no $t"; done
nvcc --version | tail -1
mkdir -p "$dir" && mv .gpu/model.part.aa "$dir/" && tar -xJf .gpu/tree.tar.xz -C "$dir" || exit 1
source bench/llama-server-build.sh
tree=$(ls -d "$dir"/llama.cpp-sys-*)
setsid bash -c "cmake -S $tree -B $dir/build -G Ninja ${llama_server_cmake_flags[*]} -DGGML_CUDA=ON -DBUILD_SHARED_LIBS=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} > $dir/build.log 2>&1 && cmake --build $dir/build --target llama-server -j $(nproc) >> $dir/build.log 2>&1; echo \$? > $dir/build.done" </dev/null >/dev/null 2>&1 &
sleep 10; tail -2 "$dir/build.log"
