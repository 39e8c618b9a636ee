#!/bin/bash
# session 19 call 5: D 128 with the peers on main 86655a8+ (the alternating-turn ping-pong):
# the grid 8 x 1024 .. 16 x 4096 H 12 (every mask), 1 x 8192 H 32 (dense, causal), and the
# engine at tile 64 against tile 128 where the D 128 rule is near its edge
cd "$(dirname "$0")/.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/d128 $OUT/d128b $OUT/tiles
DIM=128 OUT=$OUT/d128 timeout 300 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -1
echo "d128 $(( $(date +%s) - t0 )) s"
HEADS=32 DIM=128 OUT=$OUT/d128b timeout 90 bash bench/run-gpu.sh 1x8192 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "d128b $(( $(date +%s) - t0 )) s"
timeout 80 build-gpu/bench_attention --shapes 8x1024,16x2048 --masks dense,causal,document,causal_sliding --heads 12 --dim 128 \
  --tiles 64,128 --out $OUT/tiles/tiles.jsonl > $OUT/tiles/tiles.log 2>&1
echo "tiles rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/tiles/tiles.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "ms" in j: print(j["mask"], j["B"], j["S"], "tile", j.get("tile"), "asked", j.get("asked"), "%.4f ms" % j["ms"], "err %.1e" % j.get("rel_err", 0))
PY
/usr/bin/python3 bench/report.py $OUT/d128 2>/dev/null | tail -30
