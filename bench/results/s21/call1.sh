#!/bin/bash
# session 21 call 1: issue 14 item 2. bench/profile_sparse.sh (ncu on the engine's kernel, mask by
# mask) at D 128 16x4096 and D 64 8x1024, then bench/attn_ab_m3.sh (a third CTA an SM for the
# D 128 tile-64 kernel, a fifth for BigBird's tile-32 kernel)
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
mkdir -p $OUT/prof128 $OUT/prof64 $OUT/m3
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
OUT=$OUT/prof128 PROFILE_TIMEOUT=80 timeout 260 bash bench/profile_sparse.sh 16x4096 sliding,causal_sliding,longformer,bigbird,document 128 12 2>&1 | tail -14
echo "prof128 done $(( $(date +%s) - t0 )) s"
OUT=$OUT/prof64 PROFILE_TIMEOUT=60 timeout 160 bash bench/profile_sparse.sh 8x1024 sliding,longformer,document 64 12 2>&1 | tail -10
echo "prof64 done $(( $(date +%s) - t0 )) s"
ATTN_DEV_NOBUILD=1 OUT=$OUT/m3 timeout $(( 585 - ($(date +%s) - t0) )) bash bench/attn_ab_m3.sh 2>&1 | tail -60
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz prof128 prof64 m3 && rm -rf prof128 prof64 m3
