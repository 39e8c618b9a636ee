#!/bin/bash
# session 23 call 2 (main aab228f + this script): the GPU tests of the mends (the engine drops
# the unshifted format; plan_time's median; the Lua bench front end's limits), then whether
# splitting longformer's global tile-rows pays now (--splits auto,off,8,16,32; the rule splits
# none at the grid's shapes), D 64 and D 128, and at long context (D 128, H 32, S 32k).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs $OUT/ex
b=build-gpu/tests/test_kernels_gpu
for pat in '*engine_drops*' '*plan_time*' '*qshift*'; do
  STOF_TEST_FILTER="$pat" timeout 200 $b > "$OUT/logs/kgpu_$(echo $pat | tr -d '*').log" 2>&1
  echo "kgpu $pat rc=$? $(( $(date +%s) - t0 )) s"
done
grep -ahE "^\[  (PASSED|FAILED)|^\[  FAILED|ERROR|GPU cache" $OUT/logs/kgpu_*.log | head -20
GPU_CHECK_ONLY='^(gpu_bench_attention)$' OUT=$OUT/logs timeout 150 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua rc=$? $(( $(date +%s) - t0 )) s"; grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -3
for D in 64 128; do
  timeout 150 build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks longformer --heads 12 --dim $D \
    --splits auto,off,8,16,32 --reps 30 --out $OUT/ex/split_d$D.jsonl > $OUT/ex/split_d$D.log 2>&1
  echo "split D $D rc=$? $(( $(date +%s) - t0 )) s"
done
timeout $(( 560 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 1x32768 --masks longformer --heads 32 --dim 128 \
  --splits auto,8,16,off --reps 10 --out $OUT/ex/split_long.jsonl > $OUT/ex/split_long.log 2>&1
echo "long rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/ex/split_d64.jsonl $OUT/ex/split_d128.jsonl $OUT/ex/split_long.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    try: lines = open(f).read().split("\n")
    except OSError: continue
    for l in lines:
        if not l.strip(): continue
        r = json.loads(l)
        print("%-11s D%-3d %2dx%-6d split %-5s rows %4d chunks %5d q%-2d %8.4f ms %5.1f%% err %.1e" % (r["mask"], r["D"], r["B"], r["S"],
              r["split"], r["split_rows"], r["split_chunks"], r.get("qshift", 0), r["ms"], 100 * r["roofline"], r["rel_err"]))
PY
cd $OUT && tar czf r.tgz logs ex && rm -rf logs ex
