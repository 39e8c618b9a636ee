#!/bin/bash
# session 22 call 5: the query shift from formats the engine keeps on the device (S >= 8192:
# fetched, shifted). test_kernels_gpu's qshift, split and engine (format on the GPU) tests,
# then at long context (B 1, H 32, D 128) sliding and longformer with the shift and without
# (bench_attention --kernels auto,noqshift, one process).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs $OUT/long
b=build-gpu/tests/test_kernels_gpu
for t in 'qshift*' '*split*' 'engine*'; do
  STOF_TEST_FILTER="$t" timeout 150 $b >> $OUT/logs/kgpu.log 2>&1; echo "$t rc=$? $(( $(date +%s) - t0 )) s"
done
grep -aE "^\[  (PASSED|FAILED)|FAIL|qshift|shifted" $OUT/logs/kgpu.log | cut -c1-200 | head -20
timeout $(( 380 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 1x32768,1x131072 --masks sliding,longformer \
  --heads 32 --dim 128 --reps 10 --kernels auto,noqshift --out $OUT/long/long.jsonl > $OUT/long/long.log 2>&1
echo "long rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/long/long.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print("%-11s %dx%-6d %-8s %.4f ms %4.1f%% qshift %s err %.1e" % (r["mask"], r["B"], r["S"], r["asked"], r["ms"], 100 * r["roofline"], r.get("qshift"), r["rel_err"]))
PY
cd $OUT && tar czf r.tgz logs long && rm -rf logs long
