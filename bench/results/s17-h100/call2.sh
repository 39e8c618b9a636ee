#!/bin/bash
# session 17 call 2: STOF_SM90_PAIR check + A/B (attn_dev from wip/pair), then the rest of
# scripts/gpu-check.sh on build-gpu (main 4eee759)
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
A=$OUT/ab; mkdir -p $A
BIN=build-attn/attn_dev
timeout 120 $BIN --cfg g64_t64_s2_k_m3_tma_np_pair,g64_t64_s3_k_m2_tma_np_pair,g64_t64_s2_k_m4_tma_np --masks dense \
  --shapes 1x64,1x128,1x192,2x576,1x1024,2x2048,1x4096 --heads 4 --kernels block --notime > $A/pair_check.log 2>&1
echo "pair check: exit $? after $(( $(date +%s) - t0 )) s"
grep -E "FAIL|ALL PASS|rror" $A/pair_check.log | head -10
B=g64_t64_s2_k_m4_tma_np; P=g64_t64_s2_k_m3_tma_np_pair; R=g64_t64_s3_k_m2_tma_np_pair
timeout 200 $BIN --cfg "$B,$P,$R,$B,$P,$R,$B,$P,$R,$B,$P,$R" --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 \
  --kernels block --nocheck --quiet --json $A/pair.jsonl > $A/pair.log 2>&1
echo "pair A/B: exit $? after $(( $(date +%s) - t0 )) s"
grep '^TIME' $A/pair.log | awk '{split($5,bb,"=");split($7,ss,"="); k=$2" "bb[2]"x"ss[2]; t[k]+=$9; c[k]++} END{for(k in t) printf "%-40s %.4f\n", k, t[k]/c[k]}' | sort -k2
GPU_CHECK_ONLY='^(core_gpu|core|kernels|schedule|schedule_gpu|gpu_models|gpu_schedule_time|gpu_tune|gemm_wgmma|lua_.*)$' OUT=$OUT \
  timeout $((570 - ($(date +%s) - t0))) bash scripts/gpu-check.sh 2>&1 | grep -v "^\[ " | tail -60
echo "check done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf ab.tgz ab && rm -rf ab; ls /tmp/gpu-check | wc -l
