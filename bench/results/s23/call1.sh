#!/bin/bash
# session 23 call 1 (main + bench_attention --kernels key64): gpu_models and gpu_models_small
# (not GPU-run since the query shift), then which kernel shape pays for the cases item 2 still
# misses: D 64 window masks and document with the selector's choice, tile 128 in 64-key steps
# (key64, forced) and the half skip (forced); D 128 at 8 x 1024, tiles 32 / 64 / 128.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs $OUT/ex
GPU_CHECK_ONLY='^(gpu_models_small|gpu_models)$' OUT=$OUT/logs timeout 260 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua rc=$? $(( $(date +%s) - t0 )) s"; grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -4
timeout 200 build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks sliding,causal_sliding,longformer,document \
  --heads 12 --dim 64 --kernels auto,key64,halfskip,auto --reps 30 --out $OUT/ex/d64.jsonl > $OUT/ex/d64.log 2>&1
echo "d64 rc=$? $(( $(date +%s) - t0 )) s"
timeout $(( 570 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 8x1024 --masks document,longformer,bigbird,sliding \
  --heads 12 --dim 128 --tiles 32,64,128 --kernels auto,halfskip --reps 30 --out $OUT/ex/d128.jsonl > $OUT/ex/d128.log 2>&1
echo "d128 rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/ex/d64.jsonl $OUT/ex/d128.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    try: lines = open(f).read().split("\n")
    except OSError: continue
    for l in lines:
        if not l.strip(): continue
        r = json.loads(l)
        k = "k64" if r["key64"] else "hs" if r["halfskip"] else "tma" if r["tma"] else "wg" if r["hopper"] else r["kernel"]
        print("%-15s D%-3d %2dx%-5d %-9s t%-3d %-4s q%-2d %8.4f ms %5.1f%% err %.1e" % (r["mask"], r["D"], r["B"], r["S"],
              r["asked"], r["tile"], k, r.get("qshift", 0), r["ms"], 100 * r["roofline"], r["rel_err"]))
PY
cd $OUT && tar czf r.tgz logs ex && rm -rf logs ex
