#!/bin/bash
# session 13, call 3: correctness of the engine with the new selector, then the grid with
# auto (ROWMASK/HALFSKIP by the rule) and plainmask (both off: the kernel as before), peers in the same run
set -u
t0=$(date +%s)
GPU_CHECK_ONLY='^(kernels_gpu|gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small)$' bash scripts/gpu-check.sh 2>&1 | tail -15
cp /tmp/gpu-check/kernels_gpu.log $OUT/kernels_gpu.log 2>/dev/null
echo "check done $(( $(date +%s) - t0 )) s"
KERNELS=auto,plainmask OUT=$OUT/d64 bash bench/run-gpu.sh 2>&1 | tail -5
echo "d64 done $(( $(date +%s) - t0 )) s"
KERNELS=auto,plainmask HEADS=32 DIM=128 OUT=$OUT/d128 bash bench/run-gpu.sh 1x8192 2>&1 | tail -5
echo "d128 done $(( $(date +%s) - t0 )) s"
