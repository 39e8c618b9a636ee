#!/bin/bash
# session 23 call 9 (main 7f2f4a5, the review's mends; host code only): the order's GPU test
# and plan_time's, then the Lua bench suite (stof.attention_time_limits, plan:time's median).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
for pat in '*grouped_order*' '*plan_time*'; do
  STOF_TEST_FILTER="$pat" timeout 110 $b > "$OUT/logs/kgpu_$(echo $pat | tr -d '*').log" 2>&1
  echo "kgpu $pat rc=$? $(( $(date +%s) - t0 )) s"
done
grep -ahE "^\[  (PASSED|FAILED)|^\[  FAILED|ERROR|FAIL" $OUT/logs/kgpu_*.log | head
GPU_CHECK_ONLY='^(gpu_bench_attention)$' OUT=$OUT/logs timeout $(( 160 - ($(date +%s) - t0) )) bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua rc=$? $(( $(date +%s) - t0 )) s"; grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -3
cd $OUT && tar czf r.tgz logs && rm -rf logs
