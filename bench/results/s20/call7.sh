#!/bin/bash
# session 20 call 7: PEEL the default of the TMA ping-pong: the GPU suites, racecheck and
# synccheck on every kernel variant, attn_dev's bit-for-bit check against _nopeel
cd "$(dirname "$0")/.."
t0=$(date +%s)
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*match*' timeout 420 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 420 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
SANITIZE_TOOLS="racecheck synccheck" SANITIZE_TARGETS=attention SANITIZE_TIMEOUT=400 OUT=$OUT/logs \
  timeout 440 bash scripts/gpu-sanitize.sh > $OUT/logs/sanitize.log 2>&1 &
ps=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small|gpu_models)$' OUT=$OUT/logs timeout 420 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -hE "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|FAIL " $OUT/logs/kgpu_*.log | head -20
grep -E 'PASS|FAIL|passed' $OUT/logs/lua.log
B=build-attn/attn_dev
timeout 60 $B --odd --cfg g128_t128_s3_pp_tma_nopeel,g128_t128_s3_pp_tma --bitcmp --kernels block --quiet > $OUT/logs/peel_odd.log 2>&1
echo "peel odd rc=$?"; grep -E "FAIL|ALL PASS|differ" $OUT/logs/peel_odd.log | head -5
wait $ps; echo "sanitize rc=$? $(( $(date +%s) - t0 )) s"
cat $OUT/logs/sanitize/summary.txt 2>/dev/null || tail -20 $OUT/logs/sanitize.log
cd $OUT && tar czf logs.tgz logs && rm -rf logs
