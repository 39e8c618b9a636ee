#!/bin/bash
# session 17 call 1: wip/nopartial (dbe8dc3) A/B + GPU tests of the branch
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/ab
ATTN_DEV_NOBUILD=1 OUT=$OUT/ab timeout 300 bash bench/attn_ab_nopartial.sh 2>&1 | tail -40
echo "ab done $(( $(date +%s) - t0 )) s"
GPU_CHECK_ONLY='^(kernels_gpu|gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small)$' OUT=$OUT timeout $((560 - ($(date +%s) - t0))) bash scripts/gpu-check.sh 2>&1 | tail -40
echo "check done $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED)" /tmp/gpu-check/kernels_gpu.log | head
cd $OUT && tar czf ab.tgz ab && rm -rf ab
