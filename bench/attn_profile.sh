#!/bin/bash
# Nsight Compute on the Hopper attention kernel, mask by mask (issue 14, item 2: where a
# partial tile's time goes before choosing a fix; bench/NOTES-attention.md, session 8).
# Builds bench/attn_dev.cu (bench/attn_dev.sh), then profiles one launch per (mask, shape)
# of one configuration with `ncu --clock-control none` (METHOD.md: leave the clocks alone)
# and the sections that split the time: speed of light, compute (pipes: tensor / XU = MUFU /
# FMA), warp states (stall reasons), occupancy, memory. Text reports to $OUT/ncu-*.txt, and a
# short table of the figures that matter last.
#
#   bench/attn_profile.sh [CFG [MASKS [SHAPES]]]
#   bench/attn_profile.sh g64_t64_s2_tma dense,bigbird,longformer,causal 8x2048
# ATTN_PROFILE_HEADS=H: H heads (attn_dev's default, 12, otherwise).
# CFG is an attn_dev configuration (`build-attn/attn_dev --list`; the kernel's entry point is
# CFG_block); dense is the baseline a partial tile is compared with. Firecracker machines
# only (KINDS.md: ncu reads no counters under gVisor).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/attn_out}
cfg=${1:-g64_t64_s2_tma}
masks=${2:-dense,bigbird,longformer,causal}
shapes=${3:-8x2048}
mkdir -p "$OUT"
ATTN_DEV_NONVRTC=1 bash bench/attn_dev.sh || exit 1
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
[ -x "$NCU" ] || { echo "attn_profile: no ncu"; exit 1; }
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats"
IFS=, read -ra ms <<< "$masks"
IFS=, read -ra ss <<< "$shapes"
for s in "${ss[@]}"; do
  for m in "${ms[@]}"; do
    f="$OUT/ncu-$cfg-$m-$s.txt"
    # the third launch of the kernel (two warm-ups), no CPU check: ncu replays the kernel
    # once per counter pass, so the run stays short
    timeout "${ATTN_PROFILE_TIMEOUT:-240}" "$NCU" --clock-control none --target-processes all \
      -k "regex:^${cfg}_block" --launch-skip 2 --launch-count 1 $sections \
      build-attn/attn_dev --cfg "$cfg" --masks "$m" --shapes "$s" ${ATTN_PROFILE_HEADS:+--heads "$ATTN_PROFILE_HEADS"} \
      --kernels block --nocheck --reps 20 \
      > "$f" 2>&1
    echo "attn_profile: $m $s rc=$? -> $f"
  done
done
# the lines that matter, one block per report
for f in "$OUT"/ncu-"$cfg"-*.txt; do
  echo "== ${f##*/}"
  grep -E "^ +(Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Executed Ipc Active|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler|No Eligible|Executed Instructions) " "$f" |
    sed -e 's/  */ /g'
  grep -iE "pipe|stall" "$f" | grep -E "^ +(OPT|INF|WRN)" | head -6 | cut -c1-240
done
