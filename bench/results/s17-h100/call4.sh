#!/bin/bash
# session 17 call 4 (main 4eee759, the kernel without mask code in the engine): 3 stages at
# 4 CTAs against 2 (attn_dev from wip/pair), then dense/causal and the sparse masks with the peers
cd "$(dirname "$0")/.."
W=/tmp/c4; mkdir -p $W/ab
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
BIN=build-attn/attn_dev
timeout 60 $BIN --cfg g64_t64_s3_k_m4_tma_np --masks dense --shapes 1x128,2x512,1x1024,2x2048 --heads 4 --kernels block --notime > $W/ab/s3_check.log 2>&1
echo "s3 check: exit $?"; grep -E "FAIL|ALL PASS|rror" $W/ab/s3_check.log | head -3
B=g64_t64_s2_k_m4_tma_np; C=g64_t64_s3_k_m4_tma_np
timeout 100 $BIN --cfg "$B,$C,$B,$C,$B,$C,$B,$C" --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 \
  --kernels block --nocheck --quiet --json $W/ab/s3.jsonl > $W/ab/s3.log 2>&1
echo "s3 A/B: exit $? t=$(( $(date +%s) - t0 ))"
grep '^TIME' $W/ab/s3.log | awk '{split($5,bb,"=");split($7,ss,"="); k=$2" "bb[2]"x"ss[2]; t[k]+=$9; c[k]++; a[k]=a[k]" "$9} END{for(k in t) printf "%-34s %.4f %s\n", k, t[k]/c[k], a[k]}' | sort -k2
export STOF_CACHE_DIR=/tmp/stof-cache
OUT=$W/d64 timeout 120 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "dense d64 t=$(( $(date +%s) - t0 ))"
HEADS=32 DIM=128 OUT=$W/d128 timeout 100 bash bench/run-gpu.sh 1x8192 dense,causal 2>&1 | grep -v Deprec | tail -1
echo "dense d128 t=$(( $(date +%s) - t0 ))"
left=$(( 500 - ($(date +%s) - t0) ))
[ $left -gt 30 ] && OUT=$W/s64 timeout $left bash bench/run-gpu.sh 16x4096 sliding,causal_sliding,longformer,document,bigbird 2>&1 | grep -v Deprec | tail -1
echo "sparse d64 t=$(( $(date +%s) - t0 ))"
cd /tmp && tar czf $OUT/call4.tgz c4
