#!/bin/bash
# D 64 tile 64 with cp.async at four and five CTAs an SM (attn_dev g64_t64_s2_k_rm / _hs_rm and
# their _m5: STOF_MIN_BLOCKS=5, 96 registers, 20-40 bytes of spill) against the engine's TMA
# kernels (g64_t64_s2_k_m4_tma_rm / _hs_rm: four CTAs of 160 threads), on one Hopper GPU: more
# tile-rows in flight for the window masks' fixed cost per row, as a third CTA gave at D 128
# (session 21). First the check (every --odd case; each cp.async output bit for bit against
# its TMA twin), then alternations in one process at D 64, H 12 (the window masks, bigbird,
# document at 8 x 1024 .. 16 x 4096) and a table of mean ms. Run from the repository root on
# the GPU machine; logs to $OUT (/tmp/attn_out elsewhere).
#
#   bash bench/attn_ab_d64_m5.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_d64_m5.sh     reuse build-attn/attn_dev
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 150 # OUT, BIN, T, t0; attn_dev built
R=g64_t64_s2_k_m4_tma_rm; H=g64_t64_s2_k_m4_tma_hs_rm
CR=g64_t64_s2_k_rm; CH=g64_t64_s2_k_hs_rm
timeout "$T" "$BIN" --odd --cfg $R,$CR,$R,${CR}_m5,$H,$CH,$H,${CH}_m5 --bitcmp --kernels block --quiet \
  >"$OUT/m5_odd.log" 2>&1
echo "odd check: exit $? after $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS|BITCMP|differ" "$OUT/m5_odd.log" | head
grep -E "^cfg ($R|$H|$CR|$CH)(_m5)? " "$OUT/m5_odd.log" | head -6 # registers, local, CTAs an SM
L=$R,$CR,${CR}_m5,$H,$CH,${CH}_m5
timeout "$T" "$BIN" --cfg $L,$L --masks sliding,causal_sliding,longformer,bigbird,document \
  --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json "$OUT/m5.jsonl" \
  >"$OUT/m5.log" 2>&1
echo "timing: exit $? after $(( $(date +%s) - t0 )) s"
grep '^TIME' "$OUT/m5.log" | awk '
  { k = $2 " " $3 " " $5 " " $6 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-48s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' |
  sort -k2,2 -k3,5 | tee "$OUT/m5_table.txt"
echo "attn_ab_d64_m5: done in $(( $(date +%s) - t0 )) s"
