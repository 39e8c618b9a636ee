#!/bin/bash
# session 25 call 3 (main with the half-skip thresholds 45% at D 64, 20% at D 128): the GPU
# tests that run the half skip with the query shift and the split, then an A/B of the rule's
# choice against no half skip in one process (the grid's shapes and 1 x 32 x 32768, where
# longformer at D 128 is shifted, split and now half-skipped), then both grids with the peers.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/x
b=build-gpu/tests/test_kernels_gpu
for t in qshift_matches split_rows_match; do
  STOF_TEST_FILTER="*${t}*" timeout 150 $b > $OUT/x/kgpu_$t.log 2>&1
  echo "kgpu $t rc=$? $(( $(date +%s) - t0 )) s"; grep -aE "^\[  (PASSED|FAILED)|runs failed" $OUT/x/kgpu_$t.log | head -3
done
for D in 64 128; do
  build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks longformer,causal_sliding \
    --kernels auto,nohalfskip,auto,nohalfskip --dim $D --out $OUT/x/ab$D.jsonl > $OUT/x/ab$D.log 2>&1
  echo "ab D $D rc=$? $(( $(date +%s) - t0 )) s"
done
build-gpu/bench_attention --shapes 1x32768 --heads 32 --masks longformer,causal_sliding \
  --kernels auto,nohalfskip,auto,nohalfskip --dim 128 --out $OUT/x/ablong.jsonl > $OUT/x/ablong.log 2>&1
echo "ab long rc=$? $(( $(date +%s) - t0 )) s"
for D in 128 64; do
  mkdir -p $OUT/x/d$D
  DIM=$D OUT=$OUT/x/d$D timeout 200 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -1
  echo "grid D $D $(( $(date +%s) - t0 )) s"
done
cd $OUT && tar czf r.tgz x && rm -rf x
