#!/bin/bash
# session 20 call 5: dense again with the peers (peers.py), D 64 twice and D 128 once, to see
# the run-to-run spread of the new protocol's ratios; D 64 8x1024 in the sustained state
cd "$(dirname "$0")/.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for r in a64 b128 c64; do
  mkdir -p $OUT/r/$r
  DIM=${r:1} OUT=$OUT/r/$r timeout 120 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 dense 2>&1 | grep -v Deprec | tail -1
  echo "$r $(( $(date +%s) - t0 )) s"
done
mkdir -p $OUT/r/s64
WARM_MS=3000 DIM=64 OUT=$OUT/r/s64 timeout 100 bash bench/run-gpu.sh 8x1024 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "s64 $(( $(date +%s) - t0 )) s"
for d in a64 b128 c64 s64; do echo "== $d"; /usr/bin/python3 bench/report.py $OUT/r/$d 2>/dev/null | grep -E "^\| (dense|causal) " | cut -d'|' -f2-6,7,13-; done
cd $OUT && rm -rf r/*/masks && tar czf r.tgz r && rm -rf r
