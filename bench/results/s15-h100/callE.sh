#!/bin/bash
# session 15 call E: the bench suite call D failed on its own assumption (tile >= 64), then
# the whole grid with the peers (the selector's choice; tile 32 for bigbird from 16 x 2048)
set -u
cd "$(dirname "$0")/../.." || exit 1
t0=$(date +%s)
GPU_CHECK_ONLY='^(gpu_bench_attention)$' timeout 120 bash scripts/gpu-check.sh 2>&1 | tail -4
grep -E "tile" /tmp/gpu-check/gpu_bench_attention.log | head -8
echo "check done $(( $(date +%s) - t0 )) s"
OUT=$OUT/d64 timeout 330 bash bench/run-gpu.sh 2>&1 | tail -2
echo "d64 done $(( $(date +%s) - t0 )) s"
HEADS=32 DIM=128 OUT=$OUT/d128 timeout 120 bash bench/run-gpu.sh 1x8192 2>&1 | tail -2
echo "d128 done $(( $(date +%s) - t0 )) s"
