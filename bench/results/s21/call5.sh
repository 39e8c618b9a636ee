#!/bin/bash
# session 21 call 5: stof_attn_plan_time (the one timing function of bench_attention and
# AttnPlan:time): its GPU test, the Lua benchmark suite, then bench/host_overhead.lua (one input
# set against three rotated: the host's share of a timed run)
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
STOF_TEST_FILTER='*plan_*' timeout 200 build-gpu/tests/test_kernels_gpu > $OUT/logs/kgpu_plan.log 2>&1
echo "kgpu plan_* rc=$? $(( $(date +%s) - t0 )) s"; grep -aE "^\[ *(OK|FAILED|PASSED|ERROR)|8 runs|ERROR" $OUT/logs/kgpu_plan.log | head -20
GPU_CHECK_ONLY='^(gpu_bench_attention)$' OUT=$OUT/logs timeout 200 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua rc=$? $(( $(date +%s) - t0 )) s"; grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -3
timeout 200 build-gpu/stof run bench/host_overhead.lua 2>&1 | tee $OUT/logs/host_overhead.txt | tail -12
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz logs && rm -rf logs
