#!/bin/bash
# session 17 call 6: the launch order (STOF_SM90_ORDER) in the engine: checked and timed by
# bench_attention (auto = ordered, noorder = before), then GPU tests of the launch paths
cd "$(dirname "$0")/.."
W=/tmp/c6; mkdir -p $W
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export STOF_CACHE_DIR=/tmp/stof-cache
B=build-gpu/bench_attention
timeout 150 $B --shapes 8x1024,16x2048,16x4096 --masks longformer --heads 12 --dim 64 --kernels auto,noorder,halfskip,auto,noorder,halfskip --out $W/lf64.jsonl > $W/lf64.log 2>&1
echo "lf64: exit $? t=$(( $(date +%s) - t0 ))"
timeout 60 $B --shapes 8x1024 --masks bigbird --heads 12 --dim 64 --kernels auto,noorder,auto,noorder --out $W/bb64.jsonl > $W/bb64.log 2>&1
echo "bb64: exit $? t=$(( $(date +%s) - t0 ))"
timeout 60 $B --shapes 1x8192 --masks longformer --heads 32 --dim 128 --kernels auto,noorder,auto,noorder --out $W/lf128.jsonl > $W/lf128.log 2>&1
echo "lf128: exit $? t=$(( $(date +%s) - t0 ))"
python3 - $W <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + '/*.jsonl')):
    for l in open(f):
        j = json.loads(l)
        print("%-10s %2dx%-5d D%-3d %-9s ms %.4f roof %.3f err %.1e nan %s heavy %s hs %s %s" % (j['mask'], j['B'], j['S'], j['D'], j['asked'], j['ms'], j['roofline'], j['rel_err'], j['nan'], j.get('heavy_rows'), j['halfskip'], j['why'][-80:]))
PY
grep -iE "error|fail" $W/*.log | head -5
for f in '*split*' '*strided*' 'suite_masks_at_1x3000' 'grouped_query_matches_cpu' '*longformer*' '*order*'; do
  STOF_TEST_FILTER="$f" timeout 60 build-gpu/tests/test_kernels_gpu > $W/kg.log 2>&1
  echo "kernels_gpu $f rc=$? t=$(( $(date +%s) - t0 ))"; grep -E "PASSED|FAILED|ERROR" $W/kg.log | tail -3; cat $W/kg.log >> $W/kernels_gpu.log
done
left=$(( 230 - ($(date +%s) - t0) ))
[ $left -gt 20 ] && { timeout $left build-gpu/stof run tests/gpu/attention.lua > $W/gpu_attention.log 2>&1; echo "gpu_attention rc=$? t=$(( $(date +%s) - t0 ))"; tail -3 $W/gpu_attention.log; }
cd /tmp && tar czf $OUT/call6.tgz c6
