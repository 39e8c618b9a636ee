#!/bin/bash
# Issue 14 item 1 (dense against cuDNN): Nsight Compute on stof's dense kernel and on cuDNN's
# (PyTorch SDPA with the cuDNN backend) at the same shape, in one call, so that the gap is
# seen in the same counters: duration, tensor-pipe activity, issue activity, the stall
# reasons. stof's side is bench/attn_profile.sh (attn_dev, one configuration); cuDNN's is a
# small PyTorch script whose third SDPA launch is profiled (two warm-ups). Text reports in
# $OUT/ncu-*.txt, then the lines that matter side by side.
#
#   bash bench/profile_dense_cudnn.sh [CFG [BxS [H [D]]]]
#   bash bench/profile_dense_cudnn.sh g64_t64_s2_k_m4_tma 16x4096 12 64      (the defaults)
#   bash bench/profile_dense_cudnn.sh g128_t128_s3_pp_tma 1x8192 32 128
# CFG must be an attn_dev configuration of head dimension D. Firecracker machines only
# (KINDS.md: ncu reads no counters under gVisor). Leaves the clocks alone (METHOD.md).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/profile_common.sh
profile_need_ncu profile_dense_cudnn
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats"

# stof: attn_dev's configuration (builds attn_dev)
# (at H heads: session 15's run profiled stof at attn_dev's default 12 against cuDNN at 32)
ATTN_PROFILE_TIMEOUT=${ATTN_PROFILE_TIMEOUT:-240} ATTN_PROFILE_HEADS=$H OUT="$OUT" \
  bash bench/attn_profile.sh "$cfg" dense "$shape" >/dev/null 2>&1
echo "stof ($cfg): $(ls "$OUT"/ncu-"$cfg"-dense-"$shape".txt 2>/dev/null || echo 'no report')"

# cuDNN: the SDPA launch of the same shape (layout [B, H, S, D], f16), the third one
f="$OUT/ncu-cudnn-dense-$shape.txt"
# cuDNN's attention kernel names vary by version: the first kernel whose name matches the
# pattern after two matching launches (the warm-ups, if each SDPA call is one kernel; the
# report's kernel-name line says which ran)
timeout "${ATTN_PROFILE_TIMEOUT:-240}" "$NCU" --clock-control none --target-processes all \
  -k "regex:(cudnn|fmha|sdpa|attention|flash|sm90)" --launch-skip 2 --launch-count 1 $sections \
  python3 bench/sdpa_cudnn_launch.py "$B" "$H" "$S" "$D" > "$f" 2>&1
echo "cuDNN: rc=$? -> $f"
grep -E "^  [a-zA-Z_].*\(([0-9]+, )*[0-9]+\)x\(" "$f" | head -2

# the lines that matter, side by side
for r in "$OUT/ncu-$cfg-dense-$shape.txt" "$f"; do
  echo "== ${r##*/}"
  grep -E "^ +(Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Executed Ipc Active|Achieved Occupancy|Registers Per Thread|Block Size|Grid Size|Dynamic Shared Memory Per Block|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|No Eligible|Executed Instructions) " "$r" |
    sed -e 's/  */ /g'
  grep -iE "pipe|stall" "$r" | grep -E "^ +(OPT|INF|WRN)" | head -6 | cut -c1-240
done
