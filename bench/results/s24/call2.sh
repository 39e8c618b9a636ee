#!/bin/bash
# session 24 call 2 (main 737c226, the lazy rescale in the engine): every GPU test that the
# rule's new default touches. test_kernels_gpu in two halves side by side (the new
# lazy_rescale_matches_cpu among the *match* ones), then the Lua GPU suites for attention
# (gpu_attention_mod forces lazy under T5 / ALiBi / soft cap) and the models.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*match*' timeout 420 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 420 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small|gpu_models)$' OUT=$OUT/logs timeout 500 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -ahE "^\[  (PASSED|FAILED)|^\[  FAILED|FAIL|mismatch" $OUT/logs/kgpu_*.log | head -20
grep -ah -A3 "RUN.*lazy_rescale" $OUT/logs/kgpu_a.log | head -5
grep -ah "lazy" $OUT/logs/kgpu_a.log | head -3
grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -8
cp /tmp/gpu-check/*.log $OUT/logs/ 2>/dev/null
cd $OUT && tar czf r.tgz logs && rm -rf logs
