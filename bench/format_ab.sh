#!/bin/bash
# The mask format built on the GPU (issue 14 item 3: every suite mask at least as fast as
# FlexAttention's create_block_mask), on one GPU in one call, from the repository root with
# build-gpu/ built from this tree (make gpu-build) and, for the peer, .peers/peers.py carried:
#   1. the GPU format tests (test_kernels_gpu, its *format* tests: every GPU-built format, on
#      the host and kept on the device, identical to the CPU builder's);
#   2. bench_format_ab: the chunked kernels against the row-per-block ones (each forced with
#      STOF_FORMAT_GPU_KERNELS) at 1 x 32 x {32k, 64k, 128k}, tile 64, every suite mask but
#      dense: alternating rounds, each a median of warm on-device builds (format_ms as
#      bench_attention reports it), and both formats compared array by array;
#   3. bench_attention --reps 0 at the same shapes: each case checked (rows against float64,
#      no NaN) on the format the builder picks, and its format_ms as the long-context table
#      reports it (the plan's tile);
#   4. create_block_mask for the same masks (bench/peers_long.py --block-mask-only);
# then one table. Logs and JSON lines go to $OUT (/tmp/format_out elsewhere).
#
#   bash bench/format_ab.sh
#   FORMAT_AB_SHAPES=32768 bash bench/format_ab.sh       other lengths (batch 1)
#   FORMAT_AB_SKIP_TESTS=1 / _SKIP_ATTN=1 / _SKIP_PEERS=1  leave a step out
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/format_out}
mkdir -p "$OUT"
SHAPES=${FORMAT_AB_SHAPES:-32768,65536,131072}
MASKS=causal,sliding,causal_sliding,longformer,bigbird,document
t0=$(date +%s)
rm -f "$OUT/format_ab.jsonl" "$OUT/attn_check.jsonl" "$OUT/peers_bm.jsonl" # --out files append
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc_all=0

if [ "${FORMAT_AB_SKIP_TESTS:-0}" != 1 ]; then
  STOF_TEST_FILTER='*format*' timeout 400 build-gpu/tests/test_kernels_gpu >"$OUT/format_tests.log" 2>&1
  rc=$?
  echo "format tests: exit $rc after $(( $(date +%s) - t0 )) s"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAIL|differ from the CPU" "$OUT/format_tests.log" | head -20
  [ "$rc" != 0 ] && rc_all=1
fi

timeout 300 build-gpu/bench_format_ab --masks "$MASKS" --shapes "$SHAPES" --heads 32 --reps 5 \
  --rounds 2 --out "$OUT/format_ab.jsonl" | tee "$OUT/format_ab.log"
rc=$?
echo "A/B: exit $rc after $(( $(date +%s) - t0 )) s"
[ "$rc" != 0 ] && rc_all=1

ashapes=$(echo "$SHAPES" | sed 's/\([0-9]*\)/1x\1/g')
if [ "${FORMAT_AB_SKIP_ATTN:-0}" != 1 ]; then
  timeout 400 build-gpu/bench_attention --shapes "$ashapes" --heads 32 --dim 128 --reps 0 \
    --masks "$MASKS" --out "$OUT/attn_check.jsonl" >/dev/null 2>"$OUT/attn_check.log"
  rc=$?
  echo "attention check: exit $rc after $(( $(date +%s) - t0 )) s"
  [ "$rc" != 0 ] && { rc_all=1; tail -n 5 "$OUT/attn_check.log"; }
fi

if [ "${FORMAT_AB_SKIP_PEERS:-0}" != 1 ] && [ -f .peers/peers.py ]; then
  PYTHONUNBUFFERED=1 timeout 500 python3 bench/peers_long.py --peers .peers/peers.py --shapes "$ashapes" \
    --masks "$MASKS" --block-mask-only --out "$OUT/peers_bm.jsonl" >/dev/null 2>"$OUT/peers_bm.log"
  echo "create_block_mask: exit $? after $(( $(date +%s) - t0 )) s"
fi

# mask, S, chunked kernels (best round), row kernels (best), rows / chunks, bench_attention's
# format_ms (the builder's pick, at the plan's tile: 128 for causal and document) with its
# check, create_block_mask, create_block_mask / stof (bench_attention's, else the faster kernels)
python3 - "$OUT" <<'EOF' | tee "$OUT/format_table.txt"
import json, os, sys
out = sys.argv[1]
def lines(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
attn = {(r["mask"], r["S"]): r for r in lines("attn_check.jsonl")}
peer = {(r["mask"], r["S"]): r.get("block_mask_ms") for r in lines("peers_bm.jsonl")}
print("| mask | S | chunks ms | rows ms | rows/chunks | bench_attention format_ms (check) | create_block_mask ms | cbm/stof | identical |")
print("|---|---|---|---|---|---|---|---|---|")
for r in lines("format_ab.jsonl"):
    name = r["mask"].split("(")[0]
    # chunks_ms / rows_ms (new_ms / legacy_ms before session 14's rename)
    new, old = min(r.get("chunks_ms", r.get("new_ms"))), min(r.get("rows_ms", r.get("legacy_ms")))
    a = attn.get((name, r["S"]), {})
    fm = a.get("format_ms")
    chk = "" if not a else " (tile %d, err %.1e%s)" % (a.get("tile", 0), a.get("rel_err") or 0, ", NaN" if a.get("nan") else "")
    cbm = peer.get((name, r["S"]))
    print("| %s | %d | %.3f | %.3f | %.2fx | %s%s | %s | %s | %s |" % (
        name, r["S"], new, old, old / new, "%.3f" % fm if fm is not None else "-", chk,
        "%.3f" % cbm if cbm else "-", "%.2fx" % (cbm / (fm or min(new, old))) if cbm else "-", r["identical"]))
EOF
echo "format_ab: done in $(( $(date +%s) - t0 )) s, exit $rc_all"
exit $rc_all
