#!/bin/bash
# session 13: calibrate ROWMASK / HALFSKIP for the selector on the engine's configurations
set -o pipefail
O=$OUT; mkdir -p $O; t0=$(date +%s)
BIN=build-attn/attn_dev
ATTN_DEV_NONVRTC=1 OUT=/tmp/ab bash bench/attn_dev.sh >/tmp/ab_build.txt 2>&1 || { tail -30 /tmp/ab_build.txt; exit 1; }
grep -E "spill|C75|built" /tmp/ab_build.txt | tail -12
echo "build done $(( $(date +%s) - t0 )) s"
P="g64_t64_s2_k_m4_tma_hs,g64_t64_s2_k_m4_tma_hs_rm,g128_t64_s2,g128_t64_s2_rm,g128_t128_s3_pp_tma,g128_t128_s3_pp_tma_rm"
timeout 200 $BIN --odd --quiet --bitcmp --cfg "$P" --kernels block \
  --masks causal,sliding,longformer,bigbird,document,hole,perhead,dilated > /tmp/chk1.log 2>&1
echo "check1 rc $? $(( $(date +%s) - t0 )) s"; grep -E "^cfg |FAIL|DIFFER|ALL PASS|BITCMP|rror" /tmp/chk1.log | head -30
timeout 200 $BIN --odd --quiet --cfg g128_t64_s2_hs_rm,g64_t64_s2_k_m4_tma_hs_rm --kernels block > /tmp/chk2.log 2>&1
echo "check2 rc $? $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS|rror" /tmp/chk2.log | head -10
M=dense,causal,sliding,causal_sliding,longformer,bigbird,document
A=g64_t64_s2_k_m4_tma; C="$A,${A}_rm,${A}_hs_rm,$A,${A}_rm,${A}_hs_rm"
timeout 240 $BIN --cfg "$C" --masks $M --shapes 8x1024,8x2048,16x2048,16x4096 --kernels block --nocheck --quiet --json $O/t64.jsonl > /tmp/t1.log 2>&1
echo "time d64 rc $? $(( $(date +%s) - t0 )) s"
A=g128_t64_s2; C="$A,${A}_rm,${A}_hs_rm,$A,${A}_rm,${A}_hs_rm,g128_t128_s3_pp_tma,g128_t128_s3_pp_tma_rm,g128_t128_s3_pp_tma,g128_t128_s3_pp_tma_rm"
timeout 240 $BIN --cfg "$C" --masks $M --shapes 8x2048,16x4096 --kernels block --nocheck --quiet --json $O/t128.jsonl > /tmp/t2.log 2>&1
echo "time d128 rc $? $(( $(date +%s) - t0 )) s"
timeout 200 $BIN --cfg "$C" --masks $M --shapes 1x8192 --heads 32 --kernels block --nocheck --quiet --json $O/t128b.jsonl > /tmp/t3.log 2>&1
echo "time d128 1x8192 rc $? $(( $(date +%s) - t0 )) s"
grep -hE "rror|FAIL" /tmp/t1.log /tmp/t2.log /tmp/t3.log | head
cat /tmp/chk1.log /tmp/chk2.log > $O/check.log
