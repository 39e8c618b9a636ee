#!/bin/bash
# session 24 call 3 (main 737c226 + tests, the lazy rescale in the engine): the D 128 grid with
# the peers (bench/run-gpu.sh, peers.py's protocol; D 64's kernels are unchanged), then the
# lazy rescale against none in one process (--kernels auto,nolazy,auto,nolazy) on the masks
# the rule takes it for, at the grid's shapes and at 1 x 32 x 32768.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/d128 $OUT/ab
DIM=128 OUT=$OUT/d128 timeout 280 bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -2
echo "d128 $(( $(date +%s) - t0 )) s"
/usr/bin/python3 bench/report.py $OUT/d128 2>/dev/null | grep -E "^\| [a-z]|Geometric|slower" | cut -d'|' -f2-4,6,8,9,10,16
timeout 170 build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks sliding,causal_sliding,longformer,document,bigbird \
  --heads 12 --dim 128 --kernels auto,nolazy,auto,nolazy --reps 30 --out $OUT/ab/grid.jsonl > $OUT/ab/grid.log 2>&1
echo "ab grid rc=$? $(( $(date +%s) - t0 )) s"
timeout $(( 585 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 1x32768 --masks bigbird,longformer,sliding \
  --heads 32 --dim 128 --kernels auto,nolazy,auto,nolazy --reps 10 --out $OUT/ab/long.jsonl > $OUT/ab/long.log 2>&1
echo "ab long rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/ab/grid.jsonl $OUT/ab/long.jsonl <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for f in sys.argv[1:]:
    try: lines = open(f).read().split("\n")
    except OSError: continue
    for l in lines:
        if not l.strip(): continue
        r = json.loads(l)
        t[(r["mask"], r["D"], r["B"], r["S"], r["asked"])].append((r["ms"], r["roofline"], r.get("lazy", 0), r["tile"], r["rel_err"]))
for k in sorted(t):
    if k[4] != "auto": continue
    a, n = t[k], t[k[:4] + ("nolazy",)]
    ma, mn = sum(x[0] for x in a) / len(a), sum(x[0] for x in n) / max(1, len(n))
    print("%-15s D%-3d %2dx%-6d t%-3d lazy %d  %8.4f ms (%4.1f%%)  nolazy %8.4f ms (%4.1f%%)  ratio %.3f  err %.1e" % (
        k[0], k[1], k[2], k[3], a[0][3], a[0][2], ma, 100 * a[0][1], mn, 100 * n[0][1], ma / mn, a[0][4]))
PY
cd $OUT && tar czf r.tgz d128 ab && rm -rf d128 ab
