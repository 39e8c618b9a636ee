#!/bin/bash
# session 22 call 4: the D 64 grid with the peers on main with the query shift (58923cb):
# 8x1024, 16x2048, 16x4096, every mask (bench/run-gpu.sh, peers.py's protocol).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/d64
DIM=64 OUT=$OUT/d64 timeout 400 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -1
echo "d64 $(( $(date +%s) - t0 )) s"
/usr/bin/python3 bench/report.py $OUT/d64 2>/dev/null | grep -E "^\| " | cut -d'|' -f2-4,7-10,16
cd $OUT && tar czf r.tgz d64 && rm -rf d64
