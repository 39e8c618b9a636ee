#!/bin/bash
# STOF_SM90_PEEL (the TMA ping-pong's first tile of a row on its own, without the loop's P V of
# P = 0: half a warpgroup's MMA work of a tile saved once a row; the default since session 20)
# against the kernel without it (attn_dev's _nopeel configurations), D 128 tile 128, on one
# Hopper GPU: the check (the masked kernel on the odd shapes bit for bit against _nopeel, the
# NOPARTIAL one on dense at multiples of 128), then alternations in one process at dense 8 x
# 1024 .. 1 x 8192 (the saving is largest where rows are short) and causal / document 16 x 4096,
# and a table of mean ms. Run from the repository root on the GPU machine; logs to $OUT
# (/tmp/attn_out elsewhere). Session 20 (before the names swapped): PEEL / without 0.988
# document, 0.997 causal, 0.997-1.000 dense (bench/results/s20/call2).
#
#   bash bench/attn_ab_peel.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_peel.sh     reuse build-attn/attn_dev
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 120 # OUT, BIN, T, t0; attn_dev built
timeout "$T" "$BIN" --odd --cfg g128_t128_s3_pp_tma_nopeel,g128_t128_s3_pp_tma --bitcmp --kernels block --quiet \
  >"$OUT/peel_odd.log" 2>&1
echo "odd check: exit $? after $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS|differ" "$OUT/peel_odd.log" | head
timeout "$T" "$BIN" --cfg g128_t128_s3_pp_tma_np --masks dense --shapes 1x128,2x512,1x1024,2x2048 --heads 4 \
  --kernels block --notime --quiet >"$OUT/peel_np.log" 2>&1
echo "np check: exit $?"; grep -E "FAIL|ALL PASS" "$OUT/peel_np.log" | head -3
A=g128_t128_s3_pp_tma_np; L=${A}_nopeel,$A
timeout "$T" "$BIN" --cfg $L,$L,$L --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block \
  --nocheck --quiet --json "$OUT/peel_d.jsonl" >"$OUT/peel_d.log" 2>&1
timeout "$T" "$BIN" --cfg $L,$L,$L --masks dense --shapes 1x8192 --heads 32 --kernels block \
  --nocheck --quiet --json "$OUT/peel_d32.jsonl" >"$OUT/peel_d32.log" 2>&1
echo "dense: exit $? after $(( $(date +%s) - t0 )) s"
A=g128_t128_s3_pp_tma; L=${A}_nopeel,$A
timeout "$T" "$BIN" --cfg $L,$L --masks causal,document --shapes 16x4096 --heads 12 --kernels block \
  --nocheck --quiet --json "$OUT/peel_s.jsonl" >"$OUT/peel_s.log" 2>&1
echo "causal/document: exit $? after $(( $(date +%s) - t0 )) s"
cat "$OUT"/peel_d.log "$OUT"/peel_d32.log "$OUT"/peel_s.log | grep '^TIME' | awk '
  { k = $2 " " $3 " " $5 " " $6 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-52s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' |
  sort -k2,2 -k3,5 | tee "$OUT/peel_table.txt"
echo "attn_ab_peel: done in $(( $(date +%s) - t0 )) s"
