#!/bin/bash
# STOF_SM90_KEY64 modes 2 and 3 (the softmax of one 64-key half under the other's P V) with the
# producer as a warpgroup and setmaxnreg 24 / 104, so that 2 CTAs of 384 threads fit an SM
# (the `_wg` configurations), against key64's mode 1 (the engine's) and the tile-64 kernel, on
# one Hopper GPU: the check (the mask-code kernels on the odd shapes, the `_np` ones on dense at
# multiples of 128), then four alternations in one process at dense 8 x 1024 .. 16 x 4096 and
# causal / document 16 x 4096 (H 12, D 64), and a table of mean ms. Run from the repository
# root on the GPU machine; logs to $OUT (/tmp/attn_out elsewhere).
#
#   bash bench/attn_ab_key64wg.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_key64wg.sh     reuse build-attn/attn_dev
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 150 # OUT, BIN, T, t0; attn_dev built
grep -A3 '_wg_' "$OUT/build.log" | grep -E "function|registers|spill" | head -12
timeout "$T" "$BIN" --odd --cfg g64_t128_s2_k_m2_tma_k64o_wg,g64_t128_s2_k_m2_tma_k64f_wg --kernels block --quiet \
  >"$OUT/wg_odd.log" 2>&1
echo "odd check: exit $? after $(( $(date +%s) - t0 )) s"; grep -E "CTA/SM|FAIL|ALL PASS" "$OUT/wg_odd.log" | grep -E "_wg|FAIL|ALL" | head
timeout "$T" "$BIN" --cfg g64_t128_s2_k_m2_tma_k64o_wg_np,g64_t128_s2_k_m2_tma_k64f_wg_np --masks dense \
  --shapes 1x128,2x512,1x1024,2x2048 --heads 4 --kernels block --notime --quiet >"$OUT/wg_np.log" 2>&1
echo "np check: exit $?"; grep -E "FAIL|ALL PASS" "$OUT/wg_np.log" | head -3
A=g64_t64_s2_k_m4_tma_np; K=g64_t128_s2_k_m2_tma_k64_np; O=g64_t128_s2_k_m2_tma_k64o_wg_np; F=g64_t128_s2_k_m2_tma_k64f_wg_np
L=$A,$K,$O,$F
timeout "$T" "$BIN" --cfg $L,$L,$L,$L --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block \
  --nocheck --quiet --json "$OUT/wg_d64.jsonl" >"$OUT/wg_d64.log" 2>&1
echo "dense: exit $? after $(( $(date +%s) - t0 )) s"
A=g64_t64_s2_k_m4_tma; K=g64_t128_s2_k_m2_tma_k64; O=g64_t128_s2_k_m2_tma_k64o_wg; F=g64_t128_s2_k_m2_tma_k64f_wg
L=$A,$K,$O,$F
timeout "$T" "$BIN" --cfg $L,$L --masks causal,document --shapes 16x4096 --heads 12 --kernels block \
  --nocheck --quiet --json "$OUT/wg_s64.jsonl" >"$OUT/wg_s64.log" 2>&1
echo "causal/document: exit $? after $(( $(date +%s) - t0 )) s"
cat "$OUT"/wg_d64.log "$OUT"/wg_s64.log | grep '^TIME' | awk '
  { k = $2 " " $3 " " $5 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-52s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' |
  sort -k2,2 -k3,4 | tee "$OUT/wg_table.txt"
echo "attn_ab_key64wg: done in $(( $(date +%s) - t0 )) s"
