#!/bin/bash
# The Hopper kernel's TMA variant (STOF_SM90_TMA=1, stof_attn_opts.tma = 1) against its
# cp.async one, through the library (build-gpu/bench_attention, built by `make gpu-build`):
#
#   1. correctness: every suite mask and "holes" (fully masked rows; at 1x128 an empty
#      tile-row), shapes 1x128, 8x1000 (odd) and 16x4096 (H = 4), D 64 and 128, float16 and
#      bfloat16, tiles 64 and 128, both variants; output poisoned with NaN first, 32 rows of
#      two (b, h) checked against a float64 reference, the whole output scanned for NaN.
#      Four processes (one per D x dtype) share the GPU. Both variants compute the same
#      math in the same order, so their errors should also be identical.
#   2. timing, one process, same inputs: dense, causal, bigbird at 16x4096 H=12 D=64 and
#      1x8192 H=32 D=128, float16, the selector's tile, cp.async and TMA alternated twice.
#
#   bench/tma-check.sh            from the repository root on the GPU machine
#   OUT=/some/dir bench/tma-check.sh
# Writes $OUT/tma-check-*.log and .jsonl (OUT defaults to /tmp); prints a summary, then
# the timing table. Exit status 0 when every check passed. Budget: under 4 minutes.
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp}
BIN=${BIN:-build-gpu/bench_attention}
mkdir -p "$OUT" || exit 1
[ -x "$BIN" ] || { echo "tma-check: $BIN not found (make gpu-build)"; exit 1; }
rm -f "$OUT"/tma-check-*.log "$OUT"/tma-check-*.jsonl
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv,noheader 2>&1 | tee "$OUT/tma-check-gpu.txt"

MASKS=dense,causal,sliding,causal_sliding,longformer,bigbird,document,holes
pids=()
for D in 64 128; do
  for DT in float16 bfloat16; do
    timeout -s KILL 150 "$BIN" --shapes 1x128,8x1000,16x4096 --heads 4 --dim $D --dtype $DT \
      --masks $MASKS --kernels tma,cpasync --tiles 64,128 --reps 0 --check-rows 32 \
      --out "$OUT/tma-check-check-d${D}-${DT}.jsonl" >/dev/null 2>"$OUT/tma-check-check-d${D}-${DT}.log" &
    pids+=($!)
  done
done
bad=0 killed=0
for p in "${pids[@]}"; do
  wait "$p"
  rc=$?
  [ $rc = 0 ] && continue
  echo "tma-check: a check process failed (status $rc$( [ $rc = 137 ] && echo ': killed after 150 s, a hang?'))"
  bad=1
  [ $rc = 137 ] && killed=1
done
echo "tma-check: correctness done in $(( $(date +%s) - t0 )) s"

for f in "$OUT"/tma-check-check-d*.log; do
  if grep -E "skipped|NaN!|bench_attention:" "$f" >/dev/null; then
    echo "--- $f:"; grep -E "skipped|NaN!|bench_attention:" "$f" | head -20; bad=1
  fi
done

t1=$(date +%s)
if [ $killed = 1 ]; then
  echo "tma-check: no timing after a hang"
else
timeout -s KILL 80 "$BIN" --shapes 16x4096 --heads 12 --dim 64 --masks dense,causal,bigbird \
  --kernels cpasync,tma,cpasync,tma --reps 30 --out "$OUT/tma-check-time.jsonl" \
  >/dev/null 2>"$OUT/tma-check-time.log" || { echo "tma-check: timing (D=64) failed"; bad=1; }
timeout -s KILL 80 "$BIN" --shapes 1x8192 --heads 32 --dim 128 --masks dense,causal,bigbird \
  --kernels cpasync,tma,cpasync,tma --reps 30 --out "$OUT/tma-check-time.jsonl" \
  >/dev/null 2>>"$OUT/tma-check-time.log" || { echo "tma-check: timing (D=128) failed"; bad=1; }
echo "tma-check: timing done in $(( $(date +%s) - t1 )) s"
grep -E "skipped|NaN!|bench_attention:" "$OUT/tma-check-time.log" && bad=1
fi

if command -v python3 >/dev/null; then
  python3 - "$OUT" <<'PY' || bad=1
import json, sys, collections, glob
def load(pattern):
    return [json.loads(l) for p in sorted(glob.glob(pattern)) for l in open(p) if l.strip()]
chk, tim = load(sys.argv[1] + "/tma-check-check-d*.jsonl"), load(sys.argv[1] + "/tma-check-time.jsonl")
tol = {"float16": 5e-3, "bfloat16": 2e-2}
fail, pair = [], collections.defaultdict(dict)
for d in chk:
    key = (d["mask"], d["B"], d["S"], d["D"], d["dtype"], d["tile"])
    pair[key][d["asked"]] = d["rel_err"]
    if d["nan"] or not d["rel_err"] < tol[d["dtype"]] or (d["asked"] == "tma") != bool(d["tma"]):
        fail.append(d)
n_tma = sum(1 for d in chk if d["asked"] == "tma")
same = sum(1 for v in pair.values() if len(v) == 2 and v["tma"] == v["cpasync"])
both = sum(1 for v in pair.values() if len(v) == 2)
print("correctness: %d results (%d TMA), %d failed; TMA error identical to cp.async in %d of %d cases"
      % (len(chk), n_tma, len(fail), same, both))
expected = 8 * 3 * 2 * 2 * 2 * 2
if len(chk) != expected:
    print("correctness: %d results expected, %d came (skipped cases or a crash: see the logs)" % (expected, len(chk)))
for d in fail[:20]:
    print("  FAIL %-14s %dx%d D%d %s tile %d %s: rel_err %.3e nan %s"
          % (d["mask"], d["B"], d["S"], d["D"], d["dtype"], d["tile"], d["asked"], d["rel_err"], d["nan"]))
for k, v in pair.items():
    if len(v) == 2 and v["tma"] != v["cpasync"] and max(v.values()) > 0:
        print("  differs %-14s %dx%d D%d %s tile %d: tma %.3e cpasync %.3e" % (k + (v["tma"], v["cpasync"])))
t = collections.OrderedDict()
for d in tim:
    k = (d["mask"], d["B"], d["H"], d["S"], d["D"], d["tile"])
    t.setdefault(k, {"cpasync": [], "tma": []})[d["asked"]].append(d["ms"])
print("\ntiming (ms, median of 30, each variant run twice; float16)")
print("%-8s %-12s %4s %16s %16s %8s %8s" % ("mask", "shape", "tile", "cp.async", "TMA", "TMA/cp", "TFLOP/s"))
fl = {(d["mask"], d["B"], d["H"], d["S"], d["D"]): d["tflops"] * d["ms"] for d in tim}
for k, v in t.items():
    c, m = min(v["cpasync"] or [0]), min(v["tma"] or [0])
    tf = fl.get(k[:5], 0) / m if m else 0
    print("%-8s %-12s %4d %16s %16s %8s %8.1f" % (k[0], "%dx%d H%d D%d" % (k[1], k[3], k[2], k[4]), k[5],
          " / ".join("%.4f" % x for x in v["cpasync"]), " / ".join("%.4f" % x for x in v["tma"]),
          "%.3f" % (m / c) if c and m else "-", tf))
sys.exit(1 if fail or len(chk) != expected else 0)
PY
else
  echo "(no python3: the raw tables)"
  cat "$OUT/tma-check-time.log"
fi
echo "tma-check: $( [ $bad = 0 ] && echo PASS || echo FAIL ) in $(( $(date +%s) - t0 )) s; logs in $OUT/tma-check-*"
exit $bad
