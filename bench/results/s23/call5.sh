#!/bin/bash
# session 23 call 5 (main ad99c61): is there more in the selector's constants now that rows
# are ordered? BigBird at tile 32 with 2, 3 and 4 stages; causal and document at D 128 on
# tile 64 (now grouped) against tile 128 (the ping-pong).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/ex
for st in 2 3 4; do
  for D in 64 128; do
    timeout 100 build-gpu/bench_attention --shapes 16x2048,16x4096 --masks bigbird --heads 12 --dim $D --tiles 32 \
      --stages $st --reps 30 --out $OUT/ex/bb.jsonl >> $OUT/ex/bb.log 2>&1
    echo "bigbird stages $st D $D rc=$? $(( $(date +%s) - t0 )) s"
  done
done
timeout $(( 560 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 8x1024,16x2048 --masks causal,document --heads 12 \
  --dim 128 --tiles 64,128,64,128 --reps 30 --out $OUT/ex/t.jsonl > $OUT/ex/t.log 2>&1
echo "tiles rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/ex/bb.jsonl $OUT/ex/t.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    try: lines = open(f).read().split("\n")
    except OSError: continue
    for l in lines:
        if not l.strip(): continue
        r = json.loads(l)
        print("%-9s D%-3d %2dx%-5d t%-3d s%d g%-3d %8.4f ms %5.1f%% err %.1e" % (r["mask"], r["D"], r["B"], r["S"], r["tile"], r["stages"],
              r.get("order_group", 1), r["ms"], 100 * r["roofline"], r["rel_err"]))
PY
cd $OUT && tar czf r.tgz ex && rm -rf ex
