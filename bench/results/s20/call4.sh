#!/bin/bash
# session 20 call 4: the grid at D 128 and D 64 (8x1024, 16x2048, 16x4096, every mask) with
# peers.py, stof timed with peers.py's protocol (bench_attention --warm-ms 0, the new default);
# then dense and causal in the sustained state (WARM_MS=3000, bench/peers_sustained.py)
cd "$(dirname "$0")/.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/d128 $OUT/d64 $OUT/d128b $OUT/s128 $OUT/s64
DIM=128 OUT=$OUT/d128 timeout 200 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -1
echo "d128 $(( $(date +%s) - t0 )) s"
DIM=64 OUT=$OUT/d64 timeout 200 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -1
echo "d64 $(( $(date +%s) - t0 )) s"
HEADS=32 DIM=128 OUT=$OUT/d128b timeout 60 bash bench/run-gpu.sh 1x8192 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "d128b $(( $(date +%s) - t0 )) s"
WARM_MS=3000 DIM=128 OUT=$OUT/s128 timeout 120 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 dense,causal 2>&1 | grep -v Deprec | tail -2
echo "s128 $(( $(date +%s) - t0 )) s"
WARM_MS=3000 DIM=64 OUT=$OUT/s64 timeout 100 bash bench/run-gpu.sh 16x2048,16x4096 dense,causal 2>&1 | grep -v Deprec | tail -2
echo "s64 $(( $(date +%s) - t0 )) s"
for d in d128 d64 d128b s128 s64; do echo "== $d"; /usr/bin/python3 bench/report.py $OUT/$d 2>/dev/null | grep -E "^\| (dense|causal) " | cut -d'|' -f2-6,7,10,13-; done
