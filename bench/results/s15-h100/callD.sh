#!/bin/bash
# session 15 call D: the GPU suites call C's time limit cut off, then bigbird at long context
# with the selector (tile 32) and tile 64 forced (before)
set -u
cd "$(dirname "$0")/../.." || exit 1
t0=$(date +%s)
GPU_CHECK_ONLY='^(gpu_attention_mod|gpu_bench_attention|gpu_models_small)$' timeout 300 bash scripts/gpu-check.sh 2>&1 | tail -8
echo "check done $(( $(date +%s) - t0 )) s"
timeout 200 build-gpu/bench_attention --shapes 1x32768,1x65536,1x131072 --heads 32 --dim 128 --reps 10 \
  --masks bigbird --tiles 0,64 --out $OUT/long-bigbird.jsonl 2>$OUT/long-bigbird.err >/dev/null
echo "long rc=$? $(( $(date +%s) - t0 )) s"
tail -3 $OUT/long-bigbird.err
