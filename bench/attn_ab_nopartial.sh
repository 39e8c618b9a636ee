#!/bin/bash
# Session 16's branch (wip/nopartial) on one Hopper GPU in one call (about 2 minutes): the
# Hopper kernel without mask code where the plan's format has no partial tile
# (STOF_SM90_NOPARTIAL, _np) and Q's shared-memory slice kept uniform with one consumer
# warpgroup (STOF_SM90_QSLICE_UNIFORM, default now; _qu0 the old way). Correctness first,
# then each against its twin, alternating in one process; a table last. Run from the
# repository root on the GPU machine; logs go to $OUT (/tmp/attn_out elsewhere).
#
#   bash bench/attn_ab_nopartial.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_nopartial.sh     reuse build-attn/attn_dev
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 120 # OUT, BIN, T, t0; attn_dev built

# _np is wrong on a partial tile, so its check runs dense at multiples of the tile only
# (against the CPU reference); _qu0 against the default, bit for bit, on the odd shapes
timeout "$T" "$BIN" --cfg g64_t64_s2_k_m4_tma_np,g128_t128_s3_pp_tma_np --masks dense \
  --shapes 1x128,2x512,1x1024,2x2048,1x4096 --heads 4 --kernels block --notime >"$OUT/np_check.log" 2>&1
echo "np check: exit $? after $(( $(date +%s) - t0 )) s"
grep -E "FAIL|ALL PASS|rror" "$OUT/np_check.log" | head -10
timeout "$T" "$BIN" --odd --quiet --bitcmp --kernels block \
  --cfg g64_t64_s2_k_m4_tma_qu0,g64_t64_s2_k_m4_tma,g64_t64_s2_k_m4_tma_hs_rm_qu0,g64_t64_s2_k_m4_tma_hs_rm \
  --masks causal,sliding,longformer,bigbird,hole,perhead,dilated,dense,document >"$OUT/qu_check.log" 2>&1
echo "qu check: exit $? after $(( $(date +%s) - t0 )) s"
grep -E "FAIL|DIFFER|ALL PASS|BITCMP|rror" "$OUT/qu_check.log" | head -10

# time: four alternations of each group
run() { # name cfgs masks shapes heads
  timeout "$T" "$BIN" --cfg "$2" --masks "$3" --shapes "$4" --heads "$5" --kernels block --nocheck --quiet \
    --json "$OUT/$1.jsonl" >"$OUT/$1.log" 2>&1
  echo "$1: exit $? after $(( $(date +%s) - t0 )) s"
}
A=g64_t64_s2_k_m4_tma
run d64 "${A}_qu0,$A,${A}_np,${A}_qu0,$A,${A}_np,${A}_qu0,$A,${A}_np,${A}_qu0,$A,${A}_np" dense 8x1024,16x2048,16x4096 12
A=g128_t128_s3_pp_tma
run d128 "$A,${A}_np,$A,${A}_np,$A,${A}_np,$A,${A}_np" dense 1x8192 32
A=g64_t64_s2_k_m4_tma
run part64 "${A}_qu0,$A,${A}_qu0,$A,${A}_qu0,$A,${A}_qu0,$A" causal,document 16x4096 12
A=g64_t64_s2_k_m4_tma_hs_rm
run hs64 "${A}_qu0,$A,${A}_qu0,$A,${A}_qu0,$A,${A}_qu0,$A" longformer,sliding 16x4096 12
# one line per (configuration without suffix, mask, shape): the mean of each variant's times,
# and each variant's mean over the base's
cat "$OUT"/d64.log "$OUT"/d128.log "$OUT"/part64.log "$OUT"/hs64.log | grep '^TIME' | awk '
  { cfg = $2; mask = $3; split($5, b, "="); split($7, s, "="); ms = $9; v = "base"
    if (cfg ~ /_qu0$/) v = "qu0"; else if (cfg ~ /_np$/) v = "np"
    base = cfg; sub(/_(qu0|np)$/, "", base); k = base " " mask " " b[2] "x" s[2]
    if (!(k in seen)) { seen[k] = 1; order[n++] = k }
    t[k, v] += ms; c[k, v]++ }
  END { printf "%-46s %9s %9s %9s %8s %8s\n", "cfg mask BxS", "qu0", "base", "np", "base/qu0", "np/base"
    for (i = 0; i < n; i++) { k = order[i]
      q = c[k, "qu0"] ? t[k, "qu0"] / c[k, "qu0"] : 0; b = c[k, "base"] ? t[k, "base"] / c[k, "base"] : 0
      p = c[k, "np"] ? t[k, "np"] / c[k, "np"] : 0
      printf "%-46s %9.4f %9.4f %9.4f %8.3f %8.3f\n", k, q, b, p, (q ? b / q : 0), (b && p ? p / b : 0) } }' |
  tee "$OUT/np_table.txt"
echo "attn_ab_nopartial: done in $(( $(date +%s) - t0 )) s"
