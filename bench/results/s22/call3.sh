#!/bin/bash
# session 22 call 3: on main with the query shift (58923cb): the Lua GPU suites call 2's time
# limit cut (gpu_attention_mod forces qshift under T5 / ALiBi / soft cap, also split;
# gpu_bench_attention), then the D 128 grid with the peers (8x1024, 16x2048, 16x4096, every
# mask; bench/run-gpu.sh, peers.py's protocol).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs $OUT/d128
GPU_CHECK_ONLY='^(gpu_attention_mod|gpu_bench_attention)$' OUT=$OUT/logs timeout 220 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua $(( $(date +%s) - t0 )) s"; grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -4
DIM=128 OUT=$OUT/d128 timeout $(( 560 - ($(date +%s) - t0) )) bash bench/run-gpu.sh 8x1024,16x2048,16x4096 2>&1 | grep -v Deprec | tail -2
echo "d128 $(( $(date +%s) - t0 )) s"
/usr/bin/python3 bench/report.py $OUT/d128 2>/dev/null | grep -E "^\| " | cut -d'|' -f2-4,7-10,16
cd $OUT && tar czf r.tgz logs d128 && rm -rf logs d128
