#!/bin/bash
# Issue 14 item 1, the next step after session 15's profile (bench/NOTES-attention.md): the
# engine's D 64 dense kernel issues 24% more instructions than cuDNN's at 16 x 12 x 4096
# (1,030 M against 829 M), and not in FP32 math. This counts the executed instructions of
# both kernels per SASS opcode, so the extra ones are named: ncu's instanced metric
# sass__inst_executed_per_opcode (the InstructionStats section's instruction mix), printed
# with its instance values, and a per-SASS-line source page of stof's kernel (which lines
# issue them). Text reports to $OUT/opc-*.txt; per-opcode tables of both kernels last, from
# their SASS pages (bench/sass_lines.py). Session 16 ran it: the opcode metric printed its
# values without the opcode names, and stof's SASS page gave the analysis; cuDNN's SASS page
# was added after (not yet run).
#
#   bash bench/profile_dense_opcodes.sh [CFG [BxS [H [D]]]]      (defaults as
#   bench/profile_dense_cudnn.sh: g64_t64_s2_k_m4_tma 16x4096 12 64)
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/profile_common.sh
profile_need_ncu profile_dense_opcodes
T=${ATTN_PROFILE_TIMEOUT:-240}
ATTN_DEV_NONVRTC=1 bash bench/attn_dev.sh >/dev/null || exit 1
met="--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances values"

# stof: attn_dev's configuration, the third launch (two warm-ups), at H heads
timeout "$T" "$NCU" --clock-control none -k "regex:^${cfg}_block" --launch-skip 2 --launch-count 1 $met \
  build-attn/attn_dev --cfg "$cfg" --masks dense --shapes "$shape" --heads "$H" --kernels block --nocheck --reps 4 \
  > "$OUT/opc-$cfg.txt" 2>&1
echo "stof opcodes: rc=$?"
# the same launch with the source counters, exported, then its SASS page as CSV (executed
# instructions per line)
timeout "$T" "$NCU" --clock-control none -k "regex:^${cfg}_block" --launch-skip 2 --launch-count 1 \
  --section SourceCounters --import-source yes -f -o "$OUT/src-$cfg" \
  build-attn/attn_dev --cfg "$cfg" --masks dense --shapes "$shape" --heads "$H" --kernels block --nocheck --reps 4 \
  > "$OUT/src-$cfg.log" 2>&1
echo "stof source counters: rc=$?"
"$NCU" -i "$OUT/src-$cfg.ncu-rep" --page source --csv --print-source sass > "$OUT/src-$cfg-sass.csv" 2>&1
echo "stof SASS page: rc=$? ($(wc -l < "$OUT/src-$cfg-sass.csv") lines)"

# cuDNN: its SDPA kernel at the same shape, the third matching launch: the opcode metric, then
# its SASS page (no source, but the per-line counts are there as for stof's)
timeout "$T" "$NCU" --clock-control none --target-processes all -k "regex:(cudnn|fmha|sdpa|flash)" \
  --launch-skip 2 --launch-count 1 $met python3 bench/sdpa_cudnn_launch.py "$B" "$H" "$S" "$D" > "$OUT/opc-cudnn.txt" 2>&1
echo "cuDNN opcodes: rc=$?"
timeout "$T" "$NCU" --clock-control none --target-processes all -k "regex:(cudnn|fmha|sdpa|flash)" \
  --launch-skip 2 --launch-count 1 --section SourceCounters -f -o "$OUT/src-cudnn" \
  python3 bench/sdpa_cudnn_launch.py "$B" "$H" "$S" "$D" > "$OUT/src-cudnn.log" 2>&1
echo "cuDNN source counters: rc=$?"
"$NCU" -i "$OUT/src-cudnn.ncu-rep" --page source --csv --print-source sass > "$OUT/src-cudnn-sass.csv" 2>&1
echo "cuDNN SASS page: rc=$? ($(wc -l < "$OUT/src-cudnn-sass.csv") lines)"

# per opcode, each kernel (ncu's opcode metric prints its instance values without the opcode
# names in session 16; the SASS pages have them)
for k in "$cfg" cudnn; do
  echo "== $k"
  python3 bench/sass_lines.py "$OUT/src-$k-sass.csv" --top 30
done
