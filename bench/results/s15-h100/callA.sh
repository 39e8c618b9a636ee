#!/bin/bash
# session 15 call A: item 1 profile (dense vs cuDNN, two shapes), then tile 32 A/B
cd "$(dirname "$0")/../.." || exit 1
export ATTN_DEV_NOBUILD=1
O=$OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/pa /tmp/pb /tmp/t32
ATTN_PROFILE_TIMEOUT=150 OUT=/tmp/pa timeout 280 bash bench/profile_dense_cudnn.sh > /tmp/pa/summary.txt 2>&1
echo "profile A rc=$? t=$(( $(date +%s) - t0 ))"
ATTN_PROFILE_TIMEOUT=120 OUT=/tmp/pb timeout 200 bash bench/profile_dense_cudnn.sh g128_t128_s3_pp_tma 1x8192 32 128 > /tmp/pb/summary.txt 2>&1
echo "profile B rc=$? t=$(( $(date +%s) - t0 ))"
OUT=/tmp/t32 ATTN_DEV_TIMEOUT=100 timeout $(( 570 - ($(date +%s) - t0) )) bash bench/attn_ab_tile32.sh > /tmp/t32/summary.txt 2>&1
echo "t32 rc=$? t=$(( $(date +%s) - t0 ))"
cat /tmp/pa/summary.txt /tmp/pb/summary.txt /tmp/t32/summary.txt
tar czf $O/callA.tgz /tmp/pa /tmp/pb /tmp/t32 2>/dev/null
