#!/bin/bash
# session 18 call 5: key64 in the engine (D 64 dense/causal at tile 128 in 64-key steps):
# the GPU tests, then the engine with and without it, and the peers, in one call
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs $OUT/r
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*match*' timeout 420 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 420 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small|gpu_models)$' OUT=$OUT/logs timeout 420 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -hE "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|FAIL |^FAIL" $OUT/logs/kgpu_*.log | head -20
grep -h -A12 'RUN      \] key64' $OUT/logs/kgpu_a.log | cut -c1-230 | head -16
grep -E 'PASS|FAIL|passed' $OUT/logs/lua.log
for i in 1 2; do
  build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks dense,causal --heads 12 --dim 64 --kernels auto,nokey64 --out $OUT/r/eng$i.jsonl > $OUT/r/eng$i.log 2>&1
  echo "engine $i rc=$? $(( $(date +%s) - t0 )) s"
done
timeout 150 python3 .peers/peers.py attn --shapes 8x1024,16x2048,16x4096 --masks dense,causal --heads 12 --dim 64 > $OUT/r/peers64.jsonl 2>$OUT/r/peers.err
echo "peers: $(( $(date +%s) - t0 )) s"
python3 - $OUT/r <<'PY'
import json, sys, glob, collections
d = sys.argv[1]; t = collections.defaultdict(list); peers = {}
for f in sorted(glob.glob(d + "/eng*.jsonl")):
    for l in open(f):
        j = json.loads(l)
        if "ms" in j: t[(j["mask"], j["B"], j["S"], j["asked"])].append((j["ms"], j.get("key64"), j["tile"], j["rel_err"], j["roofline"]))
for l in open(d + "/peers64.jsonl"):
    j = json.loads(l)
    if "ms" in j: peers.setdefault((j["mask"], j["B"], j["S"]), {})[j["impl"]] = j["ms"]
for (m, B, S, a), v in sorted(t.items()):
    p = peers.get((m, B, S), {}); best = min(p.values()) if p else 0
    print(m, B, S, a, " ".join("%.4f(k%s,t%d,e%.1e,r%.0f%%)" % (x[0], x[1], x[2], x[3], 100 * x[4]) for x in v),
          " peers:", " ".join("%s=%.4f" % kv for kv in sorted(p.items())), " best/stof=%.3f" % (best / min(x[0] for x in v) if best else 0))
PY
cd $OUT && tar czf logs.tgz logs && rm -rf logs
