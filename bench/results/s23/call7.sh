#!/bin/bash
# session 23 call 7 (main + the ORDER 1 / 2 split: ORDER 1 kernels byte-identical to 29dfbaf's,
# the groups in ORDER 2 only): GPU tests of the orders, then the masks the order touches
# (longformer: ORDER 1 again; causal, document, bigbird: ORDER 2) against call 1 / 2 / 6,
# then BigBird (and longformer) at long context, B 1, H 32, D 128.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs $OUT/ab
b=build-gpu/tests/test_kernels_gpu
for pat in '*grouped_order*' '*launch_order*' '*every_kernel_variant*'; do
  STOF_TEST_FILTER="$pat" timeout 200 $b > "$OUT/logs/kgpu_$(echo $pat | tr -d '*').log" 2>&1
  echo "kgpu $pat rc=$? $(( $(date +%s) - t0 )) s"
done
grep -ahE "^\[  (PASSED|FAILED)|^\[  FAILED|ERROR|FAIL|mismatch" $OUT/logs/kgpu_*.log | head -20
for D in 64 128; do
  timeout 120 build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks longformer,causal,bigbird,document --heads 12 \
    --dim $D --kernels auto,nogroup --reps 30 --out $OUT/ab/d$D.jsonl > $OUT/ab/d$D.log 2>&1
  echo "ab D $D rc=$? $(( $(date +%s) - t0 )) s"
done
timeout $(( 580 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 1x32768,1x65536,1x131072 --masks bigbird,longformer \
  --heads 32 --dim 128 --kernels auto,noorder --reps 10 --out $OUT/ab/long.jsonl > $OUT/ab/long.log 2>&1
echo "long rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/ab/d64.jsonl $OUT/ab/d128.jsonl $OUT/ab/long.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    try: lines = open(f).read().split("\n")
    except OSError: continue
    for l in lines:
        if not l.strip(): continue
        r = json.loads(l)
        print("%-10s D%-3d %2dx%-6d %-8s t%-3d h%d g%-3d %9.4f ms %5.1f%% err %.1e" % (r["mask"], r["D"], r["B"], r["S"], r["asked"], r["tile"],
              r["heavy_rows"], r.get("order_group", 1), r["ms"], 100 * r["roofline"], r["rel_err"]))
PY
cd $OUT && tar czf r.tgz logs ab && rm -rf logs ab
