#!/bin/bash
# session 15 call C: correctness of the engine with tile 32 (GPU suites), then the grid with
# the selector (tiles 0) and tile 64 forced (the selector before this session, for bigbird),
# peers in the same run
set -u
cd "$(dirname "$0")/../.." || exit 1
t0=$(date +%s)
GPU_CHECK_ONLY='^(kernels_gpu|gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small)$' timeout 330 bash scripts/gpu-check.sh 2>&1 | tail -15
mkdir -p $OUT/logs
for s in kernels_gpu gpu_attention gpu_attention_mod gpu_bench_attention gpu_models_small; do cp /tmp/gpu-check/$s.log $OUT/logs/ 2>/dev/null; done
grep -E "portable/32|/32 ->|block/32" /tmp/gpu-check/kernels_gpu.log | head -5
grep -cE "block/32 -> block/32" /tmp/gpu-check/kernels_gpu.log
echo "check done $(( $(date +%s) - t0 )) s"
TILES=0,64 OUT=$OUT/d64 timeout 170 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 bigbird,sliding,longformer 2>&1 | tail -3
echo "d64 done $(( $(date +%s) - t0 )) s"
TILES=0,64 HEADS=32 DIM=128 OUT=$OUT/d128 timeout 80 bash bench/run-gpu.sh 1x8192 bigbird,sliding,longformer 2>&1 | tail -3
echo "d128 done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf logs.tgz logs && rm -rf logs
