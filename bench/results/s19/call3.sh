#!/bin/bash
# session 19 call 3: ping-pong hand-over variants, D 128 (and D 64 at T 128): PPEARLY 2 (warpgroup
# 1 arrives once its S is done) and 3 (both warpgroups overlapped, alternating turns to issue)
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
B=build-attn/attn_dev
timeout 100 $B --cfg g128_t128_s3_pp_tma_np_e2,g128_t128_s3_pp_tma_np_e3,g64_t128_s3_pp_tma_np_e3 --masks dense \
  --shapes 1x128,2x512,1x1024,2x2048,3x4096 --heads 4 --kernels block --notime --quiet > $OUT/r/np_check.log 2>&1
echo "np check rc=$?"; grep -E "FAIL|ALL PASS" $OUT/r/np_check.log | head -5
timeout 100 $B --odd --cfg g128_t128_s3_pp_tma_e3,g64_t128_s3_pp_tma_e3 --kernels block --quiet > $OUT/r/odd.log 2>&1
echo "odd check rc=$? $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS" $OUT/r/odd.log | head -5
A=g128_t128_s3_pp_tma_np; L=$A,${A}_e2,${A}_e3
timeout 150 $B --cfg $L,$L,$L --masks dense --shapes 1x8192,64x1024 --heads 32 --kernels block --nocheck --quiet > $OUT/r/d128.log 2>&1
echo "d128 rc=$? $(( $(date +%s) - t0 )) s"
timeout 100 $B --cfg $L,$L,$L --masks dense --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/d128h12.log 2>&1
echo "d128 h12 rc=$? $(( $(date +%s) - t0 )) s"
C=g128_t128_s3_pp_tma; L2=$C,${C}_e3
timeout 60 $B --cfg $L2,$L2 --masks causal,document --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/c128.log 2>&1
K=g64_t128_s2_k_m2_tma_k64_np; L3=$K,g64_t128_s3_pp_tma_np_e3
timeout 100 $B --cfg $L3,$L3 --masks dense --shapes 16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/d64.log 2>&1
K=g64_t128_s2_k_m2_tma_k64; L4=$K,g64_t128_s3_pp_tma_e3
timeout 100 $B --cfg $L4,$L4 --masks causal --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/c64.log 2>&1
echo "d64 rc=$? $(( $(date +%s) - t0 )) s"
cat $OUT/r/d128.log $OUT/r/d128h12.log $OUT/r/c128.log $OUT/r/d64.log $OUT/r/c64.log | grep '^TIME' | awk '
  { k = $2 " " $3 " " $5 " " $6 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-56s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' | sort -k2,2 -k3,5 | tee $OUT/r/table.txt
cd $OUT && tar czf r.tgz r && rm -rf r
