#!/bin/bash
# session 16 call 5 (final main): engine tests of the TMA path not yet run with the producer's
# bmp_off copy (split rows, strided layouts, a 3000-long suite), then dense/causal and the
# sparse masks with the peers
cd "$(dirname "$0")/../.." || exit 1
O=$OUT; W=/tmp/c5; mkdir -p $W
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
export STOF_CACHE_DIR=/tmp/stof-cache
for f in '*split*' '*strided*' 'suite_masks_at_1x3000' 'grouped_query_matches_cpu'; do
  STOF_TEST_FILTER="$f" timeout 60 build-gpu/tests/test_kernels_gpu > $W/kg.log 2>&1
  echo "kernels_gpu $f rc=$? t=$(( $(date +%s) - t0 ))"; grep -E "PASSED|FAILED|OK \]" $W/kg.log | tail -4; cat $W/kg.log >> $W/kernels_gpu.log
done
OUT=$W/d64 timeout 110 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "dense d64 t=$(( $(date +%s) - t0 ))"
HEADS=32 DIM=128 OUT=$W/d128 timeout 90 bash bench/run-gpu.sh 1x8192 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "dense d128 t=$(( $(date +%s) - t0 ))"
left=$(( 370 - ($(date +%s) - t0) ))
[ $left -gt 30 ] && OUT=$W/s64 timeout $left bash bench/run-gpu.sh 16x4096 sliding,causal_sliding,longformer,document,bigbird 2>&1 | grep -v Deprec | tail -1
echo "sparse d64 t=$(( $(date +%s) - t0 ))"
cd /tmp && tar czf $O/call5.tgz c5
