#!/bin/bash
# session 20 call 6: D 64 dense, stof's engine configuration against cuDNN in ncu's cycles
cd "$(dirname "$0")/.."
mkdir -p $OUT/prof
for s in 16x2048 16x4096; do
OUT=$OUT/prof ATTN_DEV_NOBUILD=1 ATTN_PROFILE_TIMEOUT=120 timeout 250 bash bench/profile_dense_cudnn.sh g64_t128_s2_k_m2_tma_k64_np $s 12 64 2>&1 | tail -34
done
cd $OUT && tar czf prof.tgz prof && rm -rf prof
