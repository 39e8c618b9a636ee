#!/bin/bash
# session 23 call 4: the launch order on the block kernel at tile 32 (STOF_ORDER: BigBird's
# global rows first, the others longest first over groups of (b, h) pairs). GPU tests
# (grouped_order_matches_cpu with BigBird at tile 32, every tile-32 test), then A/B in one
# process: --kernels auto,noorder,auto,noorder (noorder: order -1, the tile-32 kernel's only
# order before), and nogroup (the global rows first only) on BigBird at 16 x 2048 / 16 x 4096,
# D 64 and 128, and at long context (B 1, H 32, D 128, S 32k).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs $OUT/ab
b=build-gpu/tests/test_kernels_gpu
for pat in '*grouped_order*' '*tile_32*' '*launch_order*'; do
  STOF_TEST_FILTER="$pat" timeout 200 $b > "$OUT/logs/kgpu_$(echo $pat | tr -d '*').log" 2>&1
  echo "kgpu $pat rc=$? $(( $(date +%s) - t0 )) s"
done
grep -ahE "^\[  (PASSED|FAILED)|^\[  FAILED|ERROR|FAIL|mismatch" $OUT/logs/kgpu_*.log | head -20
grep -ah "tile 32:" $OUT/logs/kgpu_grouped_order.log | head -2
for D in 64 128; do
  timeout 170 build-gpu/bench_attention --shapes 16x2048,16x4096 --masks bigbird --heads 12 --dim $D \
    --kernels auto,noorder,nogroup,auto,noorder,nogroup --reps 30 --out $OUT/ab/d$D.jsonl > $OUT/ab/d$D.log 2>&1
  echo "ab D $D rc=$? $(( $(date +%s) - t0 )) s"
done
timeout $(( 570 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 1x32768 --masks bigbird --heads 32 --dim 128 \
  --kernels auto,noorder,auto,noorder --reps 10 --out $OUT/ab/long.jsonl > $OUT/ab/long.log 2>&1
echo "long rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/ab/d64.jsonl $OUT/ab/d128.jsonl $OUT/ab/long.jsonl <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for f in sys.argv[1:]:
    try: lines = open(f).read().split("\n")
    except OSError: continue
    for l in lines:
        if not l.strip(): continue
        r = json.loads(l)
        t[(r["mask"], r["D"], r["B"], r["S"], r["asked"])].append((r["ms"], r["roofline"], r.get("order_group", 1), r["tile"], r["rel_err"], r["heavy_rows"]))
for k in sorted(t):
    if k[4] != "auto": continue
    a = t[k]
    ma = sum(x[0] for x in a) / len(a)
    out = "%-8s D%-3d %2dx%-6d t%-3d heavy %d group %3d %8.4f ms (%4.1f%%)" % (k[0], k[1], k[2], k[3], a[0][3], a[0][5], a[0][2], ma, 100 * a[0][1])
    for other in ("noorder", "nogroup"):
        n = t.get(k[:4] + (other,))
        if n:
            mn = sum(x[0] for x in n) / len(n)
            out += "  %s %8.4f ms (%4.1f%%) ratio %.3f" % (other, mn, 100 * n[0][1], ma / mn)
    print(out + "  err %.1e" % a[0][4])
PY
cd $OUT && tar czf r.tgz logs ab && rm -rf logs ab
