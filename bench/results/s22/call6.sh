#!/bin/bash
# session 22 call 6: the final tree (6c4e2f3): the review's changes to the query shift (the
# masking decided again from the shifted tiles, the counting pass) and the tests' new front
# guard zone. test_kernels_gpu's qshift_matches_cpu (now with bitmap masking and the half skip),
# split_rows_match_cpu and launch_order_matches_cpu, side by side.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='qshift*' timeout 130 $b > $OUT/logs/kgpu_qshift.log 2>&1 &
pa=$!
STOF_TEST_FILTER='split_rows*' timeout 130 $b > $OUT/logs/kgpu_split.log 2>&1 &
pb=$!
STOF_TEST_FILTER='launch_order*' timeout 130 $b > $OUT/logs/kgpu_order.log 2>&1
wait $pa; echo "qshift rc=$?"; wait $pb; echo "split rc=$?"
echo "$(( $(date +%s) - t0 )) s"
grep -ahE "^\[  (PASSED|FAILED)|FAIL|before the start" $OUT/logs/*.log | head -20
grep -ac "^ok" $OUT/logs/kgpu_qshift.log
cd $OUT && tar czf r.tgz logs && rm -rf logs
