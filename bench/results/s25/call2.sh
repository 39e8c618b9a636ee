#!/bin/bash
# session 25 call 2: the bfloat16 half of tests/gpu/attention_mod.lua (call 1's run reached the
# 503rd of 936 cases, all of float16 and the first bfloat16 ones, before the call's limit;
# STOF_MOD_DTYPES=bfloat16 runs that half alone), then an A/B of the window masks' options at
# D 64 in one process: the selector's choice, the half skip forced, the query shift off.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/x
for D in 64 128; do
  build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks longformer,sliding,causal_sliding,document \
    --kernels auto,halfskip,noqshift,auto --dim $D --out $OUT/x/ab$D.jsonl > $OUT/x/ab$D.log 2>&1
  echo "ab D $D rc=$? $(( $(date +%s) - t0 )) s"
done
STOF_MOD_DTYPES=bfloat16 GPU_CHECK_ONLY='^(gpu_attention_mod)$' OUT=$OUT/x timeout 420 bash scripts/gpu-check.sh > $OUT/x/lua.log 2>&1
echo "lua rc=$? $(( $(date +%s) - t0 )) s"
grep -aE 'PASS|FAIL' $OUT/x/lua.log | tail -3
cp /tmp/gpu-check/*.log $OUT/x/ 2>/dev/null
tail -2 $OUT/x/gpu_attention_mod.log
cd $OUT && tar czf r.tgz x && rm -rf x
