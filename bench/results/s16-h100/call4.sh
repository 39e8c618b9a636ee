#!/bin/bash
# session 16 call 4: STOF_SM90_PFLAG (producer's copy of bmp_off) bitcmp + A/B; then the GPU
# tests call 3 did not reach, on this source (PFLAG on)
cd "$(dirname "$0")/../.." || exit 1
O=$OUT; W=/tmp/c4; mkdir -p $W
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
B=build-attn/attn_dev
M=causal,sliding,longformer,bigbird,hole,perhead,dilated,dense,document
timeout 100 $B --odd --quiet --bitcmp --kernels block --masks $M \
  --cfg g64_t64_s2_k_m4_tma_pf0,g64_t64_s2_k_m4_tma,g128_t128_s3_pp_tma_pf0,g128_t128_s3_pp_tma,g64_t64_s2_k_m4_tma_hs_rm_pf0,g64_t64_s2_k_m4_tma_hs_rm,g128_t128_s3_pp_tma_rm_pf0,g128_t128_s3_pp_tma_rm > $W/bit.log 2>&1
echo "bitcmp rc=$? t=$(( $(date +%s) - t0 ))"; grep -E "FAIL|DIFFER|ALL PASS|BITCMP|rror" $W/bit.log | head -20
ab() { # name cfgA masks shapes heads
  local A=$2; local C="${A}_pf0,$A,${A}_pf0,$A,${A}_pf0,$A,${A}_pf0,$A"
  timeout 100 $B --cfg $C --masks $3 --shapes $4 --heads $5 --kernels block --nocheck --quiet --json $W/$1.jsonl > $W/$1.log 2>&1
  echo "$1 rc=$? t=$(( $(date +%s) - t0 ))"
}
ab t64 g64_t64_s2_k_m4_tma dense,causal,document 16x4096,16x2048,8x1024 12
ab t128 g128_t128_s3_pp_tma dense,causal 1x8192 32
ab hs64 g64_t64_s2_k_m4_tma_hs_rm longformer,sliding 16x4096,8x2048 12
ab rm128 g128_t128_s3_pp_tma_rm document,causal 1x8192 32
grep -h '^TIME' $W/t64.log $W/t128.log $W/hs64.log $W/rm128.log | awk '
  { cfg=$2; mask=$3; split($5,b,"="); split($7,s,"="); ms=$9; v=(cfg ~ /_pf0$/)?"old":"new"
    base=cfg; sub(/_pf0$/,"",base); k=base " " mask " " b[2] "x" s[2]
    if (!(k in seen)) { seen[k]=1; order[n++]=k }
    t[k,v]=t[k,v] sprintf(" %.4f",ms); sm[k,v]+=ms }
  END { for (i=0;i<n;i++) { k=order[i]; printf "%-46s pf0%s | pf%s | %.3f\n",k,t[k,"old"],t[k,"new"],sm[k,"new"]/sm[k,"old"] } }' | tee $W/pf_table.txt
OUT=$W GPU_CHECK_ONLY='^(gpu_attention_mod|gpu_bench_attention|gpu_models_small|gpu_attention)$' timeout $(( 320 - ($(date +%s) - t0) )) bash scripts/gpu-check.sh > $W/check.txt 2>&1
echo "check rc=$? t=$(( $(date +%s) - t0 ))"; cat $W/check.txt
cd /tmp && tar czf $O/call4.tgz c4
