#!/bin/bash
# session 23 call 8 (main + the ORDER 1 / 2 split, the final kernels): the grid with the peers, D 128 then D 64
# (bench/run-gpu.sh: stof's bench_attention and .peers/peers.py attn in one run, peers.py's
# protocol), every suite mask at 8x1024, 16x2048, 16x4096.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/d128 $OUT/d64
DIM=128 OUT=$OUT/d128 timeout 280 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -2
echo "d128 $(( $(date +%s) - t0 )) s"
DIM=64 OUT=$OUT/d64 timeout $(( 585 - ($(date +%s) - t0) )) bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -2
echo "d64 $(( $(date +%s) - t0 )) s"
for d in d128 d64; do /usr/bin/python3 bench/report.py $OUT/$d 2>/dev/null | grep -E "^\| [a-z]|Geometric|slower" | cut -d'|' -f2-4,6,8,9,16; done
cd $OUT && tar czf r.tgz d128 d64 && rm -rf d128 d64
