#!/bin/bash
# session 24 call 4: dense D 128 against cuDNN again (call 3's grid had 16 x 4096 at 0.95x,
# cuDNN 2.598 ms against session 23's 2.895 ms; stof's dense kernel is byte-identical to
# session 23's): bench/run-gpu.sh on dense alone, 16 x 2048 and 16 x 4096, three times.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
for r in 1 2 3; do
  mkdir -p $OUT/r$r
  DIM=128 OUT=$OUT/r$r timeout 150 bash bench/run-gpu.sh 16x2048,16x4096 dense 2>&1 | grep -v Deprec | tail -1
  echo "rep $r $(( $(date +%s) - t0 )) s"
  /usr/bin/python3 bench/report.py $OUT/r$r 2>/dev/null | grep -E "^\| dense" | cut -d'|' -f2-4,6,7,9,14-16
done
cd $OUT && tar czf r.tgz r1 r2 r3 && rm -rf r1 r2 r3
