#!/bin/bash
# session 21 call 7: the tile rule at D 128 with three CTAs at tile 64: tile 64 against tile 128
# (and the selector's choice) on the masks between 20% and 60% non-empty, alternated
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
timeout 300 build-gpu/bench_attention --shapes 8x1024,16x2048,1x8192 --masks causal,document,bigbird --heads 12 --dim 128 \
  --tiles 0,64,128,0,64,128 --reps 30 --out $OUT/logs/tiles_d128.jsonl 2>&1 | grep -vE "^\{|^\"|why" | tail -60
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz logs && rm -rf logs
