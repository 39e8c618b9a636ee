#!/bin/bash
# The persistent walk over tile-rows (STOF_SM90_PERSIST, attn_dev's _p configurations) against
# the engine's D 64 tile-64 kernels (TMA, Q in shared memory, 4 CTAs an SM: plain, per-lane
# masking, per-lane masking with the half skip), on one Hopper GPU. Session 20 put a fixed cost
# of ~2 us per tile-row and SM on the window masks (bench/NOTES-attention.md); the walk loads the
# next row's Q and first K/V tiles while the current row computes. First the check (every --odd
# case, each _p output bit for bit against its non-persistent twin), then alternations in one
# process at D 64, H 12 (the window masks, bigbird, document and dense at 8 x 1024 .. 16 x 4096)
# and a table of mean ms. Run from the repository root on the GPU machine; logs to $OUT
# (/tmp/attn_out elsewhere).
#
#   bash bench/attn_ab_persist.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_persist.sh     reuse build-attn/attn_dev
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 150 # OUT, BIN, T, t0; attn_dev built
A=g64_t64_s2_k_m4_tma; R=g64_t64_s2_k_m4_tma_rm; H=g64_t64_s2_k_m4_tma_hs_rm
timeout "$T" "$BIN" --odd --cfg $A,${A}_p,$R,${R}_p,$H,${H}_p --bitcmp --kernels block --quiet >"$OUT/p_odd.log" 2>&1
echo "odd check: exit $? after $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS|BITCMP|differ" "$OUT/p_odd.log" | head
grep -E "^cfg (${A}|${R}|${H})(_p)? " "$OUT/p_odd.log" | head -6 # registers, local, CTAs an SM
L=$R,${R}_p,$H,${H}_p
timeout "$T" "$BIN" --cfg $L,$L --masks sliding,causal_sliding,longformer,bigbird,document \
  --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json "$OUT/p.jsonl" \
  >"$OUT/p.log" 2>&1
echo "timing: exit $? after $(( $(date +%s) - t0 )) s"
timeout "$T" "$BIN" --cfg $A,${A}_p,$A,${A}_p --masks dense,causal --shapes 8x1024,16x4096 --heads 12 --kernels block \
  --nocheck --quiet --json "$OUT/pd.jsonl" >"$OUT/pd.log" 2>&1
echo "timing, dense and causal: exit $? after $(( $(date +%s) - t0 )) s"
cat "$OUT/p.log" "$OUT/pd.log" | grep '^TIME' | awk '
  { k = $2 " " $3 " " $5 " " $6 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-48s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' |
  sort -k2,2 -k3,5 | tee "$OUT/p_table.txt"
echo "attn_ab_persist: done in $(( $(date +%s) - t0 )) s"
