#!/bin/bash
# session 17 call 5: launch order experiment (_h0: every head's tile-row 0 first) on longformer
cd "$(dirname "$0")/.."
W=$OUT/ab; mkdir -p $W
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
BIN=build-attn/attn_dev
R=g64_t64_s2_k_m4_tma_rm; H=g64_t64_s2_k_m4_tma_hs_rm
timeout 90 $BIN --cfg ${R}_h0,${H}_h0 --masks longformer,document,causal,sliding,bigbird,hole,perhead --shapes 1x1000,2x2048,1x64 --heads 4 \
  --kernels block --notime > $W/h0_check.log 2>&1
echo "h0 check: exit $? t=$(( $(date +%s) - t0 ))"; grep -E "FAIL|ALL PASS|rror" $W/h0_check.log | head -5
timeout 150 $BIN --cfg "$R,${R}_h0,$H,${H}_h0,$R,${R}_h0,$H,${H}_h0,$R,${R}_h0,$H,${H}_h0,$R,${R}_h0,$H,${H}_h0" --masks longformer \
  --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json $W/h0.jsonl > $W/h0.log 2>&1
echo "h0 A/B: exit $? t=$(( $(date +%s) - t0 ))"
timeout 60 $BIN --cfg "$R,${R}_h0,$R,${R}_h0,$R,${R}_h0" --masks document,sliding --shapes 16x4096 --heads 12 --kernels block \
  --nocheck --quiet --json $W/h0c.jsonl > $W/h0c.log 2>&1
echo "h0 control: exit $? t=$(( $(date +%s) - t0 ))"
cat $W/h0.log $W/h0c.log | grep '^TIME' | awk '{split($5,bb,"=");split($7,ss,"="); k=$3" "bb[2]"x"ss[2]" "$2; t[k]+=$9; c[k]++; a[k]=a[k]" "$9; f[k]=$0} END{for(k in t) printf "%-50s %.4f %s\n", k, t[k]/c[k], a[k]}' | sort
grep '^TIME' $W/h0.log | grep "S=4096" | head -2
cd $OUT && tar czf ab.tgz ab && rm -rf ab
