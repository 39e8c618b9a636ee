#!/bin/bash
# session 19 call 2: STOF_SM90_PPEARLY (warpgroup 1 arrives on the ping-pong barrier once its
# MMAs are issued) and STOF_SM90_PERSIST (one CTA an SM walking the tile-rows), D 128 dense;
# checks first, then alternations, cuDNN in the same call
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/r
B=build-attn/attn_dev
OUT=$OUT/r timeout 200 bash bench/attn_dev.sh --list > $OUT/r/build.log 2>&1
echo "build+nvrtc rc=$? $(( $(date +%s) - t0 )) s"; grep -iE "nvrtc|error" $OUT/r/build.log | head -5
grep -A2 "np_pe_block\|np_p_block\|tma_e_block" $OUT/r/build.log | grep -E "registers|spill" | head
timeout 100 $B --cfg g128_t128_s3_pp_tma_np,g128_t128_s3_pp_tma_np_e,g128_t128_s3_pp_tma_np_p,g128_t128_s3_pp_tma_np_pe,g64_t128_s3_pp_tma_np_pe --masks dense \
  --shapes 1x128,2x512,1x1024,2x2048,3x4096 --heads 4 --kernels block --notime --quiet > $OUT/r/np_check.log 2>&1
echo "np check rc=$?"; grep -E "FAIL|ALL PASS" $OUT/r/np_check.log | head -5
timeout 100 $B --odd --cfg g128_t128_s3_pp_tma_e,g64_t128_s3_pp_tma_e --kernels block --quiet > $OUT/r/odd.log 2>&1
echo "odd check rc=$? $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS" $OUT/r/odd.log | head -5
A=g128_t128_s3_pp_tma_np; L=$A,${A}_e,${A}_p,${A}_pe
timeout 150 $B --cfg $L,$L,$L --masks dense --shapes 1x8192,4x4096,16x2048,64x1024 --heads 32 --kernels block --nocheck --quiet > $OUT/r/d128.log 2>&1
echo "d128 rc=$? $(( $(date +%s) - t0 )) s"
timeout 100 $B --cfg $L,$L,$L --masks dense --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/d128h12.log 2>&1
echo "d128 h12 rc=$? $(( $(date +%s) - t0 )) s"
C=g128_t128_s3_pp_tma; L2=$C,${C}_e
timeout 60 $B --cfg $L2,$L2 --masks causal --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/c128.log 2>&1
K=g64_t128_s2_k_m2_tma_k64_np; L3=$K,g64_t128_s3_pp_tma_np_pe
timeout 100 $B --cfg $L3,$L3,$L3 --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/d64.log 2>&1
echo "d64 rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 python3 .peers/peers.py attn --shapes 1x8192,4x4096,16x2048,64x1024 --masks dense --heads 32 --dim 128 > $OUT/r/peers128.jsonl 2>$OUT/r/peers.err
timeout 60 python3 .peers/peers.py attn --shapes 16x4096 --masks dense --heads 12 --dim 128 >> $OUT/r/peers128.jsonl 2>>$OUT/r/peers.err
echo "peers $(( $(date +%s) - t0 )) s"
grep -h '"sdpa_cudnn"' $OUT/r/peers128.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    j=json.loads(l); print("cudnn", j["B"], j["H"], j["S"], j["D"], j.get("ms"))'
cat $OUT/r/d128.log $OUT/r/d128h12.log $OUT/r/c128.log $OUT/r/d64.log | grep '^TIME' | awk '
  { k = $2 " " $3 " " $5 " " $6 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-56s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' | sort -k2,2 -k3,5 | tee $OUT/r/table.txt
cd $OUT && tar czf r.tgz r && rm -rf r
