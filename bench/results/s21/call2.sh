#!/bin/bash
# session 21 call 2: three CTAs an SM for the D 128 tile-64 kernel in the engine
# (hopper_min_blocks). The GPU suites (test_kernels_gpu in two halves, the Lua GPU suites) on
# this tree, then the D 128 grid with peers.py (8x1024, 16x2048, 16x4096, every mask)
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs $OUT/d128
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*match*' timeout 400 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 400 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small|gpu_models)$' OUT=$OUT/logs timeout 400 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -ahE "^\[  (PASSED|FAILED)|FAIL" $OUT/logs/kgpu_*.log | head -20
grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -8
DIM=128 OUT=$OUT/d128 timeout $(( 580 - ($(date +%s) - t0) )) bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -1
echo "d128 $(( $(date +%s) - t0 )) s"
/usr/bin/python3 bench/report.py $OUT/d128 2>/dev/null | grep -E "^\| " | cut -d'|' -f2-4,7-10,16
cd $OUT && tar czf r.tgz logs d128 && rm -rf logs d128
