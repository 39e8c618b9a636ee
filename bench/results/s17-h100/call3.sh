#!/bin/bash
# session 17 call 3: STOF_SM90_CLUSTER (_c2) check + A/B against _np (attn_dev from wip/pair)
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
A=$OUT/ab; mkdir -p $A
BIN=build-attn/attn_dev
timeout 90 $BIN --cfg g64_t64_s2_k_m4_tma_np_c2,g64_t64_s2_k_m4_tma_np --masks dense \
  --shapes 1x128,2x512,1x1024,2x2048,1x4096,3x640 --heads 4 --kernels block --notime > $A/c2_check.log 2>&1
echo "c2 check: exit $? after $(( $(date +%s) - t0 )) s"
grep -E "FAIL|ALL PASS|rror" $A/c2_check.log | head -10
B=g64_t64_s2_k_m4_tma_np; C=g64_t64_s2_k_m4_tma_np_c2
timeout 200 $BIN --cfg "$B,$C,$B,$C,$B,$C,$B,$C,$B,$C,$B,$C" --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 \
  --kernels block --nocheck --quiet --json $A/c2.jsonl > $A/c2.log 2>&1
echo "c2 A/B: exit $? after $(( $(date +%s) - t0 )) s"
grep '^TIME' $A/c2.log | awk '{split($5,bb,"=");split($7,ss,"="); k=$2" "bb[2]"x"ss[2]; t[k]+=$9; c[k]++; a[k]=a[k]" "$9} END{for(k in t) printf "%-40s %.4f  %s\n", k, t[k]/c[k], a[k]}' | sort -k2
if command -v ncu >/dev/null; then
  for x in $B $C; do
    timeout 100 ncu --kernel-name regex:block --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      $BIN --cfg $x --masks dense --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet --reps 20 > $A/ncu_$x.txt 2>&1
    echo "ncu $x: exit $?"; grep -E "L2 Cache Throughput|Duration|Elapsed Cycles|Memory Throughput" $A/ncu_$x.txt | head -6
  done
fi
cd $OUT && tar czf ab.tgz ab && rm -rf ab
