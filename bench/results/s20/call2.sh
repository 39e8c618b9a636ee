#!/bin/bash
# session 20 call 2: bench/attn_ab_peel.sh (PEEL against the engine's D 128 tile-128 kernel), then
# bench/profile_dense_cudnn.sh at D 128 16x2048 (ncu: stof and cuDNN in the same counters)
cd "$(dirname "$0")/.."
t0=$(date +%s)
mkdir -p $OUT/peel $OUT/prof
ATTN_DEV_NOBUILD=1 OUT=$OUT/peel timeout 200 bash bench/attn_ab_peel.sh 2>&1 | tail -25
OUT=$OUT/prof ATTN_DEV_NOBUILD=1 ATTN_PROFILE_TIMEOUT=150 timeout 340 bash bench/profile_dense_cudnn.sh g128_t128_s3_pp_tma_np 16x2048 12 128 2>&1 | tail -40
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz peel prof && rm -rf peel prof
