#!/bin/bash
# session 13, call 4: the split (helper) and the new selector: GPU tests, then long context A/B
set -u
t0=$(date +%s)
GPU_CHECK_ONLY='^(kernels_gpu|gpu_attention|gpu_attention_mod)$' bash scripts/gpu-check.sh 2>&1 | tail -8
cp /tmp/gpu-check/kernels_gpu.log $OUT/kernels_gpu.log 2>/dev/null
grep -E "split|FAIL" /tmp/gpu-check/kernels_gpu.log | head -20
echo "check done $(( $(date +%s) - t0 )) s"
timeout 300 build-gpu/bench_attention --shapes 1x32768,1x131072 --heads 32 --dim 128 --reps 10 \
  --masks longformer,bigbird,sliding,causal_sliding,document --kernels auto,plainmask --splits auto,off \
  --out $OUT/long-ab.jsonl 2>&1 | grep -vE "^ *$" | tail -50
echo "long done $(( $(date +%s) - t0 )) s"
timeout 120 build-gpu/bench_attention --shapes 8x1024,16x4096 --heads 12 --dim 64 \
  --masks longformer,bigbird --splits auto,off,32 --out $OUT/grid-split.jsonl 2>&1 | tail -16
echo "grid done $(( $(date +%s) - t0 )) s"
