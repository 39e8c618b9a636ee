#!/bin/bash
# session 16 call 2: descriptor add + lazy rescale, correctness then A/B (attn_dev)
cd "$(dirname "$0")/../.." || exit 1
O=$OUT; W=/tmp/c2; mkdir -p $W
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
B=build-attn/attn_dev
M=causal,sliding,longformer,bigbird,hole,perhead,dilated,dense,document
timeout 150 $B --odd --quiet --bitcmp --kernels block --masks $M \
  --cfg g64_t64_s2_k_m4_tma_d0,g64_t64_s2_k_m4_tma,g128_t128_s3_pp_tma_d0,g128_t128_s3_pp_tma,g64_t64_s2_k_m4_tma_hs_rm_d0,g64_t64_s2_k_m4_tma_hs_rm,g128_t64_s2_hs_rm_d0,g128_t64_s2_hs_rm > $W/bit.log 2>&1
echo "bitcmp rc=$? t=$(( $(date +%s) - t0 ))"; grep -E "FAIL|DIFFER|ALL PASS|BITCMP|rror" $W/bit.log | head -20
timeout 120 $B --odd --quiet --kernels block --masks $M \
  --cfg g64_t64_s2_k_m4_tma_lz0,g64_t64_s2_k_m4_tma_lz8,g128_t128_s3_pp_tma_lz0,g128_t128_s3_pp_tma_lz8,g64_t64_s2_k_m4_tma_hs_rm_lz8,g128_t64_s2_hs_rm_lz8 > $W/lz.log 2>&1
echo "lazy check rc=$? t=$(( $(date +%s) - t0 ))"; grep -E "FAIL|ALL PASS|rror" $W/lz.log | head -20
A=g64_t64_s2_k_m4_tma
C="$A"_d0,$A,"$A"_lz0,"$A"_lz8,"$A"_d0,$A,"$A"_lz0,"$A"_lz8
timeout 150 $B --cfg $C --masks dense,causal,document --shapes 16x4096,16x2048,8x1024 --heads 12 --kernels block --nocheck --quiet --json $W/t64.jsonl > $W/t64.log 2>&1
echo "t64 rc=$? t=$(( $(date +%s) - t0 ))"
A=g128_t128_s3_pp_tma
C="$A"_d0,$A,"$A"_lz0,"$A"_lz8,"$A"_d0,$A,"$A"_lz0,"$A"_lz8
timeout 100 $B --cfg $C --masks dense,causal --shapes 1x8192 --heads 32 --kernels block --nocheck --quiet --json $W/t128.jsonl > $W/t128.log 2>&1
echo "t128 rc=$? t=$(( $(date +%s) - t0 ))"
A=g64_t64_s2_k_m4_tma_hs_rm
C="$A"_d0,$A,"$A"_lz8,"$A"_d0,$A,"$A"_lz8
timeout $(( 570 - ($(date +%s) - t0) )) $B --cfg $C --masks longformer,sliding,bigbird --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet --json $W/ths.jsonl > $W/ths.log 2>&1
echo "ths rc=$? t=$(( $(date +%s) - t0 ))"
grep -h '^TIME' $W/t64.log $W/t128.log $W/ths.log | awk '
  { cfg=$2; mask=$3; split($5,b,"="); split($7,s,"="); ms=$9; v="base"
    if (cfg ~ /_d0$/) v="d0"; else if (cfg ~ /_lz0$/) v="lz0"; else if (cfg ~ /_lz8$/) v="lz8"
    base=cfg; sub(/_(d0|lz0|lz8)$/,"",base); k=base " " mask " " b[2] "x" s[2]
    if (!(k in seen)) { seen[k]=1; order[n++]=k }
    t[k,v]+=ms; c[k,v]++ }
  END { printf "%-44s %9s %9s %9s %9s %7s %7s %7s\n","cfg mask BxS","d0","base","lz0","lz8","b/d0","lz0/d0","lz8/d0"
    for (i=0;i<n;i++) { k=order[i]; d=c[k,"d0"]?t[k,"d0"]/c[k,"d0"]:0; bb=c[k,"base"]?t[k,"base"]/c[k,"base"]:0
      z=c[k,"lz0"]?t[k,"lz0"]/c[k,"lz0"]:0; e=c[k,"lz8"]?t[k,"lz8"]/c[k,"lz8"]:0
      printf "%-44s %9.4f %9.4f %9.4f %9.4f %7.3f %7.3f %7.3f\n",k,d,bb,z,e,(d?bb/d:0),(d?z/d:0),(d?e/d:0) } }' | tee $W/table.txt
cd /tmp && tar czf $O/call2.tgz c2
