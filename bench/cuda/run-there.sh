#!/usr/bin/env bash
# On the GPU machine, right after build-there.sh (see bench/cuda/prepare.sh):
# joins the model, waits for the CUDA build, runs svc on it through a
# wrapper that puts svc's own libllama-common first (llama-server keeps the
# one it was linked with), then the greedy smoke check and the benchmark.
# Results: $OUT/smoke.json, $OUT/bench.md, $OUT/bench/ (logs and JSON) and
# $OUT/vs-llama-server-h100.json, the run as a result file (bench/results.py)
# to copy into bench/results/ here (on another GPU, name its area in
# BENCH_RESULTS_AREA and give it a title in bench/engine/vs_server.py's AREAS).
set -x
repo=$PWD
dir=${GPU_DIR:-/root/gpu}
cd "$dir" || exit 1
cat model.part.aa "$repo/.gpu/model.part.ab" >model.gguf && rm -f model.part.aa
[ "$(sha256sum model.gguf | cut -c1-64)" = "$(cat "$repo/.gpu/model.sha256")" ] || { echo "model corrupt"; exit 1; }
mkdir -p svclib
xz -dc "$repo/.gpu/svc.xz" >svc && chmod +x svc
xz -dc "$repo/.gpu/libllama-common.so.0.xz" >svclib/libllama-common.so.0
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/svclib:%s/build/bin exec %s/svc "$@"\n' "$dir" "$dir" "$dir" >svc-run && chmod +x svc-run
for _ in $(seq 400); do [ -f build.done ] && break; sleep 1; done
tail -2 build.log; [ "$(cat build.done 2>/dev/null)" = 0 ] || { echo "the CUDA build did not finish"; exit 1; }
ldd ./svc | grep -E 'ggml-cuda' || echo "no libggml-cuda: svc would run on the CPU"
echo "llama.cpp of svc's tree, CUDA sm_${CUDA_ARCH:-90}, shared libraries" >build/bin/llama-server.sources
key=$(./svc-run keys create --data-dir data --name gpu)
./svc-run serve --data-dir data --model model.gguf --bind 127.0.0.1:0 --threads 4 >svc.out 2>svc.log &
for _ in $(seq 600); do url=$(sed -n 's/^svc is serving on \(http[^ ]*\).*/\1/p' svc.log); [ -n "$url" ] && break; sleep 0.2; done
# The engine's ready line names the devices llama.cpp runs on (CUDA0 for the GPU).
sed 's/\x1b\[[0-9;]*m//g' svc.log | grep -o 'devices=.*' || echo "no engine ready line"
timeout 90 python3 "$repo/bench/cuda/greedy_smoke.py" "$url" "$key" | tee "$OUT/smoke.json"
kill %1; wait
cd "$repo"
# The image's python3 is a virtual environment with httpx.
BENCH_RESULTS="$OUT/vs-llama-server-h100.json" BENCH_RESULTS_AREA=vs-llama-server-h100 \
  BENCH_THREADS=4 BENCH_SVC_BIN=$dir/svc-run BENCH_LLAMA_SERVER_BIN=$dir/build/bin/llama-server \
  SVC_BENCH_VENV=$(dirname "$(dirname "$(command -v python3)")") BENCH_KEEP_JSON="$OUT/bench" \
  timeout "${BENCH_LIMIT:-300}" bash bench/vs-llama-server.sh "$dir/model.gguf" 2>&1 | tee "$OUT/bench.md"
