#!/bin/bash
# session 18 call 6: the fixed selector on GPU-kept formats (engine_builds_long_sequence...),
# key64 again; then the D 64 grid and the long-context set with the peers on final main
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs $OUT/d64 $OUT/long
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='engine_builds_long*' timeout 150 $b > $OUT/logs/kgpu_long.log 2>&1 &
pa=$!
STOF_TEST_FILTER='*key64*' timeout 150 $b > $OUT/logs/kgpu_key64.log 2>&1
echo "key64 rc=$? $(( $(date +%s) - t0 )) s"; wait $pa; echo "long rc=$? $(( $(date +%s) - t0 )) s"
grep -hE "^\[  (PASSED|FAILED)|ERROR|through the engine" $OUT/logs/kgpu_*.log | head
export STOF_CACHE_DIR=/tmp/stof-cache
OUT=$OUT/d64 timeout 200 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -2
echo "grid d64 $(( $(date +%s) - t0 )) s"
left=$(( 555 - ($(date +%s) - t0) ))
echo "long: $left s left"
[ $left -gt 60 ] && OUT=$OUT/long timeout $left bash bench/long-gpu.sh 2>&1 | grep -v Deprec | tail -2
echo "long $(( $(date +%s) - t0 )) s"
ls -la $OUT/d64 $OUT/long
cd $OUT && tar czf logs.tgz logs && rm -rf logs
