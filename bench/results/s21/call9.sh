#!/bin/bash
# session 21 call 9 (final tree: interleave removed, the review's fixes): test_kernels_gpu's
# plan tests (plan_time with its 200 ms warm-up), the split and launch-order tests, the Lua
# benchmark suite, bench_attention's --reps check, and the D 128 window masks once more
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*plan_*' timeout 120 $b > $OUT/logs/kgpu_plan.log 2>&1 &
p1=$!
GPU_CHECK_ONLY='^(gpu_bench_attention)$' OUT=$OUT/logs timeout 150 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua rc=$? $(( $(date +%s) - t0 )) s"; grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -2
wait $p1; echo "kgpu plan rc=$? $(( $(date +%s) - t0 )) s"
STOF_TEST_FILTER='*split_rows*' timeout 120 $b > $OUT/logs/kgpu_split.log 2>&1; echo "kgpu split rc=$?"
grep -ahE "^\[ *(OK|FAILED|ERROR)|ERROR|200 ms" $OUT/logs/kgpu_*.log | head -12
build-gpu/bench_attention --reps 2000000 2>&1 | tail -1; echo "reps check rc=$?"
timeout 100 build-gpu/bench_attention --shapes 16x4096 --masks sliding,causal_sliding,longformer --heads 12 --dim 128 \
  --out $OUT/logs/final_d128.jsonl 2>&1 | grep -E "^(sliding|causal_sliding|longformer)"
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz logs && rm -rf logs
