#!/bin/bash
# The Hopper kernel without mask code (STOF_SM90_NOPARTIAL, the `_np` configurations), which
# the engine compiles where the plan's format has no partial tile, against the kernel with
# mask code on one Hopper GPU (about a minute): its check on dense at multiples of the tile
# (it is wrong on a partial tile), then the two alternating four times in one process, and
# a table. Run from the repository root on the GPU machine; logs go to $OUT (/tmp/attn_out
# elsewhere). Session 17 measured it (bench/results/s17-h100/).
#
#   bash bench/attn_ab_nopartial.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_nopartial.sh     reuse build-attn/attn_dev
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 120 # OUT, BIN, T, t0; attn_dev built

timeout "$T" "$BIN" --cfg g64_t64_s2_k_m4_tma_np,g128_t128_s3_pp_tma_np --masks dense \
  --shapes 1x128,2x512,1x1024,2x2048,1x4096 --heads 4 --kernels block --notime >"$OUT/np_check.log" 2>&1
echo "np check: exit $? after $(( $(date +%s) - t0 )) s"
grep -E "FAIL|ALL PASS|rror" "$OUT/np_check.log" | head -10

run() { # name cfgs masks shapes heads
  timeout "$T" "$BIN" --cfg "$2" --masks "$3" --shapes "$4" --heads "$5" --kernels block --nocheck --quiet \
    --json "$OUT/$1.jsonl" >"$OUT/$1.log" 2>&1
  echo "$1: exit $? after $(( $(date +%s) - t0 )) s"
}
A=g64_t64_s2_k_m4_tma
run d64 "$A,${A}_np,$A,${A}_np,$A,${A}_np,$A,${A}_np" dense 8x1024,16x2048,16x4096 12
A=g128_t128_s3_pp_tma
run d128 "$A,${A}_np,$A,${A}_np,$A,${A}_np,$A,${A}_np" dense 1x8192 32
# one line per (configuration without suffix, shape): each variant's mean time and the ratio
cat "$OUT"/d64.log "$OUT"/d128.log | grep '^TIME' | awk '
  { cfg = $2; split($5, bb, "="); split($7, ss, "="); v = cfg ~ /_np$/ ? "np" : "base"
    base = cfg; sub(/_np$/, "", base); k = base " " bb[2] "x" ss[2]
    if (!(k in seen)) { seen[k] = 1; order[n++] = k }
    t[k, v] += $9; c[k, v]++ }
  END { printf "%-34s %9s %9s %8s\n", "cfg BxS", "base", "np", "np/base"
    for (i = 0; i < n; i++) { k = order[i]
      b = c[k, "base"] ? t[k, "base"] / c[k, "base"] : 0; p = c[k, "np"] ? t[k, "np"] / c[k, "np"] : 0
      printf "%-34s %9.4f %9.4f %8.3f\n", k, b, p, (b && p ? p / b : 0) } }' | tee "$OUT/np_table.txt"
echo "attn_ab_nopartial: done in $(( $(date +%s) - t0 )) s"
