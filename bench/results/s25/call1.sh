#!/bin/bash
# session 25 call 1: the plan's TMA map cache tested; the ceilings of BigBird's two kernel
# shapes (dense forced onto the tile-32 mma.sync kernel and onto the Hopper kernel at tile 64,
# BigBird on both); the host's share with one input set against three (bench/host_overhead.lua);
# dense against cuDNN alternated in one call (bench/interleave.sh, PEER=sdpa_cudnn); then the
# Lua GPU attention suites (gpu_attention: the new lazy block; gpu_attention_mod: the
# restructured tile-32 lazy softmax under the modifiers, not run on it in session 24).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/x
b=build-gpu/tests/test_kernels_gpu
for t in tma_map_cache plan_time plan_runs_again strided_layouts; do
  STOF_TEST_FILTER="*${t}*" timeout 200 $b > $OUT/x/kgpu_$t.log 2>&1
  echo "kgpu $t rc=$? $(( $(date +%s) - t0 )) s"; grep -aE "^\[  (PASSED|FAILED)|FAIL|runs failed" $OUT/x/kgpu_$t.log | head -4
done
grep -a "rel\|skipping" $OUT/x/kgpu_tma_map_cache.log | head -12
# the ceilings: BxS 16x2048, 16x4096, D 64 and 128
for D in 64 128; do
  build-gpu/bench_attention --shapes 16x2048,16x4096 --masks dense,bigbird --kernels portable --tiles 32 --dim $D \
    --out $OUT/x/ceil.jsonl 2>&1 | grep -v "^#" | tail -5
  build-gpu/bench_attention --shapes 16x2048,16x4096 --masks dense,bigbird --kernels block,halfskip --tiles 64 --dim $D \
    --out $OUT/x/ceil.jsonl 2>&1 | grep -v "^#" | tail -9
  echo "ceil D $D $(( $(date +%s) - t0 )) s"
done
timeout 120 build-gpu/stof run bench/host_overhead.lua 2>&1 | tail -9
echo "host $(( $(date +%s) - t0 )) s"
PEER=sdpa_cudnn DIM=128 OUT=$OUT/x/il128 timeout 150 bash bench/interleave.sh 16x4096 dense 5 2>&1 | tail -7
echo "il128 $(( $(date +%s) - t0 )) s"
PEER=sdpa_cudnn DIM=64 OUT=$OUT/x/il64 timeout 100 bash bench/interleave.sh 16x2048 dense 5 2>&1 | tail -7
echo "il64 $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod)$' OUT=$OUT/x timeout $left bash scripts/gpu-check.sh > $OUT/x/lua.log 2>&1
echo "lua rc=$? $(( $(date +%s) - t0 )) s"
grep -aE 'PASS|FAIL|passed' $OUT/x/lua.log | tail -4
cp /tmp/gpu-check/*.log $OUT/x/ 2>/dev/null
grep -a "lazy" $OUT/x/gpu_attention.log | tail -4
tail -2 $OUT/x/gpu_attention_mod.log
cd $OUT && tar czf r.tgz x && rm -rf x
