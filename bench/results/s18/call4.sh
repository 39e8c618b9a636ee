#!/bin/bash
# session 18 call 4: STOF_SM90_SELFLOAD (no producer warp, 2 CTAs of 256 threads at up to 128 registers) with KEY64 modes 1-3
# engine's D 64 dense kernel, cuDNN in the same call
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
B=build-attn/attn_dev
mkdir -p $OUT/r
timeout 150 $B --odd --cfg g64_t128_s2_k_m2_tma_k64o_sl,g64_t128_s2_k_m2_tma_k64f_sl,g64_t128_s2_k_m2_tma_k64_sl --kernels block --quiet > $OUT/r/odd.log 2>&1
echo "odd: rc=$? $(( $(date +%s) - t0 )) s"; grep -E 'k64|ALL|FAIL' $OUT/r/odd.log | head
timeout 60 $B --cfg g64_t128_s2_k_m2_tma_k64_sl_np,g64_t128_s2_k_m2_tma_k64o_sl_np,g64_t128_s2_k_m2_tma_k64f_sl_np --masks dense --shapes 1x128,2x512,1x1024,2x2048 --heads 4 --kernels block --notime --quiet > $OUT/r/np.log 2>&1
echo "np: rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/r/np.log
A=g64_t64_s2_k_m4_tma_np; K1=g64_t128_s2_k_m2_tma_k64_np; K1r=g64_t128_s2_k_m2_tma_k64_sl_np; K2=g64_t128_s2_k_m2_tma_k64o_sl_np; K3=g64_t128_s2_k_m2_tma_k64f_sl_np
L=$A,$K1,$K1r,$K2,$K3
timeout 200 $B --cfg $L,$L,$L --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/r/d64.jsonl > $OUT/r/d64.log 2>&1
echo "d64: rc=$? $(( $(date +%s) - t0 )) s"
A=g64_t64_s2_k_m4_tma; K1=g64_t128_s2_k_m2_tma_k64; K3=g64_t128_s2_k_m2_tma_k64f_sl; K2=g64_t128_s2_k_m2_tma_k64o_sl
timeout 120 $B --cfg $A,$K1,$K2,$K3,$A,$K1,$K2,$K3 --masks causal,document --shapes 16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/r/s64.jsonl > $OUT/r/s64.log 2>&1
echo "s64: rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 python3 .peers/peers.py attn --shapes 8x1024,16x2048,16x4096 --masks dense --heads 12 --dim 64 > $OUT/r/peers64.jsonl 2>$OUT/r/peers.err
echo "peers: $(( $(date +%s) - t0 )) s"
grep -h cudnn $OUT/r/peers*.jsonl | cut -c1-160
grep -h 'CTA/SM' $OUT/r/d64.log | sort -u | grep -E 'k64|t64_s2_k_m4'
cat $OUT/r/d64.log $OUT/r/s64.log | grep '^TIME' | awk '{k=$2" "$3" "$5" "$7; s[k]+=$9; c[k]++; if(!(k in o)){o[k]=n++; ks[n-1]=k}} END{for(i=0;i<n;i++){k=ks[i]; printf "%-48s %8.4f (%d)\n", k, s[k]/c[k], c[k]}}' | sort -k2,2 -k3,4
cd $OUT && tar czf r.tgz r && rm -rf r
