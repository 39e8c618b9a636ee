#!/bin/bash
# Tile 32 with mma.sync (attn_dev's h64_t32_* / h128_t32_*: 2 warps of 16 query rows, the
# sm_80 block kernel at STOF_TILE_M=32, which the engine runs for bigbird on Hopper since
# session 15) against the engine's Hopper configurations on the masks whose blocks are 32
# wide (bigbird's random and window blocks, longformer's window), on one Hopper GPU in one
# call: build attn_dev, check the tile-32 configurations on the odd shapes against float64,
# then time them beside the engine's tile-64 configurations in one process and print a table.
# Why: at tile 32 bigbird's useful share of the MMA work is 0.93-0.97, at tile 64 with the
# half skip 0.54-0.59 (bench/NOTES-attention.md, session 14); whether mma.sync at tile 32
# keeps enough of the rate to gain is what this measured (session 15:
# bench/results/s15-h100/t32_table.txt). From the repository root on the GPU machine; logs
# go to $OUT.
#
#   bash bench/attn_ab_tile32.sh
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 200 # OUT, BIN, T, t0; attn_dev built

C32="h64_t32_w2_s2,h64_t32_w2_s3,h64_t32_w2_s2_m8,h128_t32_w2_s2"
timeout "$T" "$BIN" --odd --quiet --cfg "$C32" --kernels block \
  --masks dense,causal,sliding,causal_sliding,longformer,bigbird,document,hole,perhead,dilated \
  >"$OUT/t32_check.log" 2>&1
echo "check: exit $? after $(( $(date +%s) - t0 )) s"
for c in ${C32//,/ }; do grep -E "^cfg $c +block" "$OUT/t32_check.log"; done | sort -u
grep -E "FAIL|ALL PASS|FAILED|rror" "$OUT/t32_check.log" | head -8
grep -q "ALL PASS" "$OUT/t32_check.log" || { echo "tile 32 is not correct: no timing"; exit 1; }

M=bigbird,longformer,sliding,document,dense
E64=g64_t64_s2_k_m4_tma_hs_rm,g64_t64_s2_k_m4_tma_rm
timeout "$T" "$BIN" --cfg "$E64,h64_t32_w2_s2,h64_t32_w2_s3,h64_t32_w2_s2_m8,$E64,h64_t32_w2_s2,h64_t32_w2_s3,h64_t32_w2_s2_m8" \
  --masks "$M" --shapes 8x2048,16x4096 --heads 12 --kernels block --nocheck --quiet >"$OUT/t32_time.log" 2>&1
echo "time D 64: exit $? after $(( $(date +%s) - t0 )) s"
timeout "$T" "$BIN" --cfg "g128_t64_s2_hs_rm,h128_t32_w2_s2,g128_t64_s2_hs_rm,h128_t32_w2_s2" \
  --masks "$M" --shapes 1x8192 --heads 32 --kernels block --nocheck --quiet >>"$OUT/t32_time.log" 2>&1
echo "time D 128: exit $? after $(( $(date +%s) - t0 )) s"
# one line per (mask, shape, configuration): its times and its ratio to the first configuration
grep '^TIME' "$OUT/t32_time.log" | awk '
  { cfg = $2; split($5, b, "="); split($6, hh, "="); split($7, s, "=")
    k = $3 " " b[2] "x" s[2] "/" hh[2]
    if (!(k in seen)) { seen[k] = 1; order[m++] = k; first[k] = cfg }
    if (!((k, cfg) in n)) { cf[k] = cf[k] " " cfg }
    n[k, cfg]++; sum[k, cfg] += $9 }
  END { for (i = 0; i < m; i++) { k = order[i]; c0 = first[k]; printf "%s\n", k
          nc = split(substr(cf[k], 2), cs, " ")
          for (j = 1; j <= nc; j++) { c = cs[j]
            printf "  %-28s %8.4f ms  %5.3fx\n", c, sum[k, c] / n[k, c], (sum[k, c] / n[k, c]) / (sum[k, c0] / n[k, c0]) } } }' |
  tee "$OUT/t32_table.txt"
echo "attn_ab_tile32: done in $(( $(date +%s) - t0 )) s"
