#!/bin/bash
# session 16 call 3: lazy rescale A/B (4 alternations), GPU tests of the final kernel source
# + the format-drop test, then dense/causal with the peers (item 1)
cd "$(dirname "$0")/../.." || exit 1
O=$OUT; W=/tmp/c3; mkdir -p $W
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
B=build-attn/attn_dev
ab() { # name cfgA masks shapes heads
  local A=$2; local C="$A,${A}_lz8,$A,${A}_lz8,$A,${A}_lz8,$A,${A}_lz8"
  timeout 120 $B --cfg $C --masks $3 --shapes $4 --heads $5 --kernels block --nocheck --quiet --json $W/$1.jsonl > $W/$1.log 2>&1
  echo "$1 rc=$? t=$(( $(date +%s) - t0 ))"
}
ab t128 g128_t128_s3_pp_tma dense,causal,document 1x8192,1x32768 32
ab t64 g64_t64_s2_k_m4_tma dense,causal,document 16x4096,16x2048 12
ab hs64 g64_t64_s2_k_m4_tma_hs_rm longformer,sliding 16x4096 12
ab hs128 g128_t64_s2_hs_rm longformer,sliding,bigbird 1x8192 32
grep -h '^TIME' $W/t128.log $W/t64.log $W/hs64.log $W/hs128.log | awk '
  { cfg=$2; mask=$3; split($5,b,"="); split($7,s,"="); ms=$9; v=(cfg ~ /_lz8$/)?"lz":"base"
    base=cfg; sub(/_lz8$/,"",base); k=base " " mask " " b[2] "x" s[2]
    if (!(k in seen)) { seen[k]=1; order[n++]=k }
    t[k,v]=t[k,v] sprintf(" %.4f",ms); sm[k,v]+=ms }
  END { for (i=0;i<n;i++) { k=order[i]; printf "%-46s base%s | lz8%s | %.3f\n",k,t[k,"base"],t[k,"lz"],sm[k,"lz"]/sm[k,"base"] } }' | tee $W/lz_table.txt
OUT=$W GPU_CHECK_ONLY='^(kernels_gpu|gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small)$' timeout 330 bash scripts/gpu-check.sh > $W/check.txt 2>&1
echo "check rc=$? t=$(( $(date +%s) - t0 ))"; cat $W/check.txt
grep -E "drops|tile-32|bytes" /tmp/gpu-check/kernels_gpu.log | head -12
left=$(( 585 - ($(date +%s) - t0) ))
[ $left -gt 60 ] && OUT=$W/d64 MASKS=x timeout $(( left - 40 )) bash bench/run-gpu.sh 8x1024,16x2048,16x4096 dense,causal 2>&1 | tail -2
echo "d64 t=$(( $(date +%s) - t0 ))"
left=$(( 590 - ($(date +%s) - t0) ))
[ $left -gt 25 ] && HEADS=32 DIM=128 OUT=$W/d128 timeout $left bash bench/run-gpu.sh 1x8192 dense,causal 2>&1 | tail -2
echo "d128 t=$(( $(date +%s) - t0 ))"
cp /tmp/gpu-check/kernels_gpu.log $W/ 2>/dev/null
cd /tmp && tar czf $O/call3.tgz c3
