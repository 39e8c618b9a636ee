#!/bin/bash
# session 24 call 6: the tile-32 kernel's lazy softmax restructured after review (one loop
# for both forms, as in the Hopper kernel's online_softmax; .text without the macro unchanged):
# lazy_rescale_matches_cpu again, then BigBird D 128 lazy against not in one process.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
STOF_TEST_FILTER='*lazy_rescale*' timeout 300 build-gpu/tests/test_kernels_gpu > $OUT/logs/kgpu_lazy.log 2>&1
echo "lazy test rc=$? $(( $(date +%s) - t0 )) s"
grep -aE "runs failed|PASSED|FAILED" $OUT/logs/kgpu_lazy.log | head -4
timeout 150 build-gpu/bench_attention --shapes 16x2048,16x4096 --masks bigbird --heads 12 --dim 128 \
  --kernels auto,nolazy,auto,nolazy --reps 30 --out $OUT/logs/bb.jsonl > $OUT/logs/bb.log 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
python3 - $OUT/logs/bb.jsonl <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    if l.strip():
        r = json.loads(l); t[(r["mask"], r["B"], r["S"], r["asked"])].append(r["ms"])
for k in sorted(t):
    if k[3] == "auto":
        a, n = t[k], t[k[:3] + ("nolazy",)]
        print("%s %dx%d lazy %.4f nolazy %.4f ratio %.3f" % (k[0], k[1], k[2], sum(a) / len(a), sum(n) / len(n), (sum(a) / len(a)) / (sum(n) / len(n))))
PY
cd $OUT && tar czf r.tgz logs && rm -rf logs
