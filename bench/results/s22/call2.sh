#!/bin/bash
# session 22 call 2: the query shift (58923cb). First correctness: test_kernels_gpu's
# qshift_matches_cpu, then every other GPU test in two halves beside the Lua GPU suites
# (gpu_attention_mod forces qshift under T5 / ALiBi / soft cap). Then the A/B in one process:
# bench_attention --kernels auto,noqshift (x2) on sliding and longformer, D 64 and D 128.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs $OUT/ab
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='qshift*' timeout 200 $b > $OUT/logs/kgpu_qshift.log 2>&1
echo "qshift rc=$? $(( $(date +%s) - t0 )) s"
grep -aE "^\[  (PASSED|FAILED)|FAIL|ERROR|mismatch|rel" $OUT/logs/kgpu_qshift.log | head -20
STOF_TEST_FILTER='*match*' STOF_TEST_SKIP='qshift*' timeout 330 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 330 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention)$' OUT=$OUT/logs timeout 330 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -ahE "^\[  (PASSED|FAILED)|FAIL" $OUT/logs/kgpu_*.log | head -20
grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -6
for D in 64 128; do
  [ $(( $(date +%s) - t0 )) -gt 540 ] && break
  timeout $(( 590 - ($(date +%s) - t0) )) build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks sliding,longformer \
    --heads 12 --dim $D --kernels auto,noqshift,auto,noqshift --out $OUT/ab/ab_d$D.jsonl > $OUT/ab/ab_d$D.log 2>&1
done
echo "ab $(( $(date +%s) - t0 )) s"
python3 - $OUT/ab/ab_d64.jsonl $OUT/ab/ab_d128.jsonl <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for fn in sys.argv[1:]:
    try:
        for l in open(fn):
            r = json.loads(l); t[(r["mask"], r["D"], r["B"], r["S"], r["asked"])].append((r["ms"], r["roofline"], r.get("qshift"), r["rel_err"]))
    except FileNotFoundError: pass
for k in sorted(t):
    if k[4] != "auto": continue
    a, n = t[k], t[k[:4] + ("noqshift",)]
    ma, mn = sum(x[0] for x in a) / len(a), sum(x[0] for x in n) / max(1, len(n))
    print("%-11s D%-3d %2dx%-5d auto %.4f ms (%4.1f%%, qshift %s, err %.1e)  noqshift %.4f ms  ratio %.3f" % (k[0], k[1], k[2], k[3], ma, 100 * a[0][1], a[0][2], a[0][3], mn, ma / mn if mn else 0))
PY
cd $OUT && tar czf r.tgz logs ab && rm -rf logs ab
