#!/bin/bash
# session 23 call 3: the grouped launch order (stof_attn_opts.order_group; the other
# tile-rows longest first over groups of (b, h) pairs whose K/V fit 24 MB). GPU tests first
# (grouped_order_matches_cpu, launch_order_matches_cpu, qshift, split rows), then A/B in one
# process: --kernels auto,nogroup,auto,nogroup (nogroup = order_group 1, the rule before) on
# causal, document and bigbird (tile 64 at 8 x 1024; tile 32 above, not affected), D 64 and 128.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs $OUT/ab
b=build-gpu/tests/test_kernels_gpu
for pat in '*grouped_order*' '*launch_order*' '*split_rows*'; do
  STOF_TEST_FILTER="$pat" timeout 200 $b > "$OUT/logs/kgpu_$(echo $pat | tr -d '*').log" 2>&1
  echo "kgpu $pat rc=$? $(( $(date +%s) - t0 )) s"
done
grep -ahE "^\[  (PASSED|FAILED)|^\[  FAILED|ERROR|FAIL|mismatch" $OUT/logs/kgpu_*.log | head -20
grep -ah "longest first" $OUT/logs/kgpu_grouped_order.log | head -3
for D in 64 128; do
  timeout 170 build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks causal,document --heads 12 --dim $D \
    --kernels auto,nogroup,auto,nogroup --reps 30 --out $OUT/ab/d$D.jsonl > $OUT/ab/d$D.log 2>&1
  echo "ab D $D rc=$? $(( $(date +%s) - t0 )) s"
done
timeout $(( 570 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 8x1024 --masks bigbird --heads 12 --dim 64 \
  --kernels auto,nogroup,auto,nogroup --reps 30 --out $OUT/ab/bb.jsonl > $OUT/ab/bb.log 2>&1
timeout $(( 580 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 8x1024 --masks bigbird --heads 12 --dim 128 \
  --kernels auto,nogroup,auto,nogroup --reps 30 --out $OUT/ab/bb128.jsonl >> $OUT/ab/bb.log 2>&1
echo "bigbird $(( $(date +%s) - t0 )) s"
python3 - $OUT/ab/d64.jsonl $OUT/ab/d128.jsonl $OUT/ab/bb.jsonl $OUT/ab/bb128.jsonl <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for f in sys.argv[1:]:
    try: lines = open(f).read().split("\n")
    except OSError: continue
    for l in lines:
        if not l.strip(): continue
        r = json.loads(l)
        t[(r["mask"], r["D"], r["B"], r["S"], r["asked"])].append((r["ms"], r["roofline"], r.get("order_group", 1), r["tile"], r["rel_err"]))
for k in sorted(t):
    if k[4] != "auto": continue
    a, n = t[k], t[k[:4] + ("nogroup",)]
    ma, mn = sum(x[0] for x in a) / len(a), sum(x[0] for x in n) / max(1, len(n))
    print("%-9s D%-3d %2dx%-5d t%-3d group %3d  %8.4f ms (%4.1f%%)  nogroup %8.4f ms (%4.1f%%)  ratio %.3f  err %.1e" % (
        k[0], k[1], k[2], k[3], a[0][3], a[0][2], ma, 100 * a[0][1], mn, 100 * n[0][1], ma / mn, a[0][4]))
PY
cd $OUT && tar czf r.tgz logs ab && rm -rf logs ab
