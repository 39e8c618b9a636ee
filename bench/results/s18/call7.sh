#!/bin/bash
# session 18 call 7: D 128 with the peers on final main (16 x 4096 H 12, every mask; 1 x 8192 H 32 dense, causal)
cd "$(dirname "$0")/.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/d128 $OUT/d128b
DIM=128 OUT=$OUT/d128 timeout 110 bash bench/run-gpu.sh 16x4096 2>&1 | grep -v Deprec | tail -1
echo "d128 $(( $(date +%s) - t0 )) s"
HEADS=32 DIM=128 OUT=$OUT/d128b timeout 60 bash bench/run-gpu.sh 1x8192 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "d128b $(( $(date +%s) - t0 )) s"
