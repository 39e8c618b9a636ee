#!/bin/bash
# session 21 call 3: bench/attn_ab_persist.sh (STOF_SM90_PERSIST at D 64 tile 64 against the
# engine's kernels), then the long-context set's tile-64 masks at D 128 with three CTAs an SM
# (stof only; session 18's peers' numbers stand: their kernels did not change)
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/p $OUT/long
ATTN_DEV_NOBUILD=1 OUT=$OUT/p timeout 400 bash bench/attn_ab_persist.sh 2>&1 | tail -45
echo "persist done $(( $(date +%s) - t0 )) s"
timeout $(( 585 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 1x32768,1x65536,1x131072 \
  --masks sliding,causal_sliding,longformer --heads 32 --dim 128 --reps 10 --out $OUT/long/long-stof.jsonl 2>&1 | tail -12
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz p long && rm -rf p long
