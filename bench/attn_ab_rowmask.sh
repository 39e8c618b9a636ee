#!/bin/bash
# STOF_SM90_ROWMASK on one Hopper GPU in one call (about 2 minutes): build attn_dev, check every
# _rm configuration on the odd shapes (with its twin without the option, outputs compared bit
# for bit), then time each pair A / A_rm twice in one process and print a table. Run from the
# repository root on the GPU machine; logs go to $OUT (/tmp/attn_out elsewhere).
#
#   bash bench/attn_ab_rowmask.sh
#   ATTN_DEV_NOBUILD=1 bash bench/attn_ab_rowmask.sh     reuse build-attn/attn_dev
#   ATTN_DEV_TIMEOUT=S                                    seconds per attn_dev run (default 150)
#   RM_SKIP_CHECK=1 / RM_SKIP_TIME=1                      one half only
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/attn_ab_common.sh 150 # OUT, BIN, T, t0; attn_dev built

# correctness: every _rm configuration after its twin (--bitcmp compares each pair's outputs)
PAIRS="g64_t64_s2_tma,g64_t64_s2_tma_rm,g64_t64_s2_k_m4_tma,g64_t64_s2_k_m4_tma_rm"
PAIRS="$PAIRS,g128_t64_s2_tma,g128_t64_s2_tma_rm,g64_t64_s2_tma_hs,g64_t64_s2_tma_hs_rm"
PAIRS="$PAIRS,g64_t64_s3_o_tma,g64_t64_s3_o_tma_rm,g64_t128_s3_pp_tma,g64_t128_s3_pp_tma_rm"
PAIRS="$PAIRS,g64_t64_s2,g64_t64_s2_rm,g64_t64_s2_hs,g64_t64_s2_hs_rm"
if [ "${RM_SKIP_CHECK:-0}" != 1 ]; then
  timeout "$T" "$BIN" --odd --quiet --bitcmp --cfg "$PAIRS" --kernels block \
    --masks causal,sliding,longformer,bigbird,hole,perhead,dilated >"$OUT/rm_check.log" 2>&1
  rc=$?
  echo "check: exit $rc after $(( $(date +%s) - t0 )) s"
  for c in ${PAIRS//,/ }; do grep -E "^cfg $c +block" "$OUT/rm_check.log"; done
  grep -E "FAIL|DIFFERENT|ALL PASS|FAILED|BITCMP:|rror" "$OUT/rm_check.log" | head -40
  # a hang (timeout) would hang the timing too
  [ "$rc" = 124 ] && { echo "check timed out after $T s (the last lines of its log follow); no timing"; tail -n 5 "$OUT/rm_check.log"; exit 1; }
fi

# time: A, A_rm, A, A_rm per pair (the engine's D 64 default is g64_t64_s2_k_m4_tma)
if [ "${RM_SKIP_TIME:-0}" != 1 ]; then
  CFGS=""
  for a in g64_t64_s2_tma g64_t64_s2_k_m4_tma g128_t64_s2_tma g64_t64_s2_tma_hs; do
    CFGS="$CFGS,$a,${a}_rm,$a,${a}_rm"
  done
  timeout "$T" "$BIN" --cfg "${CFGS#,}" --masks bigbird,longformer,sliding,dense --shapes 8x2048,16x4096 \
    --kernels block --nocheck --quiet --json "$OUT/rm_time.jsonl" >"$OUT/rm_time.log" 2>&1
  echo "time: exit $? after $(( $(date +%s) - t0 )) s"
  grep -E "rror|FAIL" "$OUT/rm_time.log" | head -5
  # one line per (A, mask, shape): A's two times, A_rm's two, and A_rm / A of the sums
  grep '^TIME' "$OUT/rm_time.log" | awk '
    { cfg = $2; mask = $3; split($5, b, "="); split($7, s, "="); ms = $9
      base = cfg; sub(/_rm$/, "", base); k = base " " mask " " b[2] "x" s[2]
      if (!(k in seen)) { seen[k] = 1; order[n++] = k }
      if (cfg ~ /_rm$/) { r[k] = r[k] sprintf(" %.4f", ms); rs[k] += ms } else { a[k] = a[k] sprintf(" %.4f", ms); as[k] += ms } }
    END { printf "%-44s %-17s %-17s %s\n", "A mask BxS", "A (ms)", "A_rm (ms)", "A_rm/A"
          for (i = 0; i < n; i++) { k = order[i]; printf "%-44s %-17s %-17s %.3f\n", k, a[k], r[k], (as[k] > 0 ? rs[k] / as[k] : 0) } }' |
    tee "$OUT/rm_table.txt"
fi
echo "attn_ab_rowmask: done in $(( $(date +%s) - t0 )) s"
