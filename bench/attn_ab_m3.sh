#!/bin/bash
# A third CTA an SM for the D 128 tile-64 kernel (STOF_MIN_BLOCKS=3: 168 registers instead of
# 184-195, attn_dev's _m3 configurations) against the engine's two, on one Hopper GPU. Session
# 20's grid puts ~2 us per tile-row and SM of fixed cost (prologue, epilogue) on the window
# masks at D 128 (sliding, causal_sliding, longformer: 2-5 tiles a row), 60-68% of their time
# (bench/NOTES-attention.md, "Session 20"); a third resident CTA would hide more of it. First
# the check (every --odd case, each _m3 output bit for bit against its two-CTA twin), then
# alternations in one process at D 128, H 12: the window masks, bigbird and document at 8 x
# 1024 .. 16 x 4096, and dense at tile 64 (the cost of the spills on full tiles), and a table
# of mean ms; then BigBird's D 128 tile-32 kernel (mma.sync, four CTAs an SM) against five
# (h128_t32_w2_s2_m5, STOF_MIN_BLOCKS=5) at 16 x 2048 and 16 x 4096. Run from the repository
# root on the GPU machine; logs to $OUT (/tmp/attn_out elsewhere). Run in session 21
# (bench/results/s21/call1/m3/): _m3 0.89-0.98x the time, bit-identical; _m5 0.99x. So the
# engine compiles that kernel with -DSTOF_MIN_BLOCKS=3 at 2 stages without a score modifier
# (kernels/attention.c, hopper_min_blocks), and the split rule counts 3 there.
#
#   bash bench/attn_ab_m3.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_m3.sh     reuse build-attn/attn_dev
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 150 # OUT, BIN, T, t0; attn_dev built
A=g128_t64_s2_rm; H=g128_t64_s2_hs_rm
P=h128_t32_w2_s2
timeout "$T" "$BIN" --odd --cfg $A,${A}_m3,$H,${H}_m3,$P,${P}_m5 --bitcmp --kernels block --quiet >"$OUT/m3_odd.log" 2>&1
echo "odd check: exit $? after $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS|BITCMP|differ" "$OUT/m3_odd.log" | head
grep -E "^cfg (g128_t64_s2_(hs_)?rm(_m3)?|h128_t32_w2_s2(_m5)?) " "$OUT/m3_odd.log" | head -6 # registers, local, CTAs an SM
L=$A,${A}_m3,$H,${H}_m3
timeout "$T" "$BIN" --cfg $L,$L --masks sliding,causal_sliding,longformer,bigbird,document,dense \
  --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json "$OUT/m3.jsonl" \
  >"$OUT/m3.log" 2>&1
echo "timing: exit $? after $(( $(date +%s) - t0 )) s"
timeout "$T" "$BIN" --cfg $P,${P}_m5,$P,${P}_m5 --masks bigbird --shapes 16x2048,16x4096 --heads 12 --kernels block \
  --nocheck --quiet --json "$OUT/m5.jsonl" >"$OUT/m5.log" 2>&1
echo "timing, tile 32: exit $? after $(( $(date +%s) - t0 )) s"
cat "$OUT/m3.log" "$OUT/m5.log" | grep '^TIME' | awk '
  { k = $2 " " $3 " " $5 " " $6 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-48s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' |
  sort -k2,2 -k3,5 | tee "$OUT/m3_table.txt"
echo "attn_ab_m3: done in $(( $(date +%s) - t0 )) s"
