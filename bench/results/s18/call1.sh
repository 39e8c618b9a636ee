#!/bin/bash
# session 18 call 1: the GPU check of main 0aef8f6 + the per-head order test (test_kernels_gpu
# in two halves side by side, the GPU Lua attention suites beside them)
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*match*' timeout 560 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 560 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small)$' OUT=$OUT/logs timeout 560 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -hE "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|^\[       OK|^\[ RUN" $OUT/logs/kgpu_*.log | grep -v RUN | head -60
grep -h -A3 'launch_order' $OUT/logs/kgpu_a.log | head -30
cat $OUT/logs/lua.log | grep -E 'PASS|FAIL|passed'
cd $OUT && tar czf logs.tgz logs && rm -rf logs
