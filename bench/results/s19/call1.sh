#!/bin/bash
# session 19 call 1: the GPU tests added after session 18's last call, KEY64 modes 2/3 with a
# producer warpgroup (attn_ab_key64wg.sh), and the per-CTA overhead of the D 128 dense kernel
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='key64*' timeout 300 $b > $OUT/logs/kgpu_key64.log 2>&1 &
pa=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod)$' OUT=$OUT/logs timeout 300 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu key64 rc=$? $(( $(date +%s) - t0 )) s"
grep -hE "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|FAIL" $OUT/logs/kgpu_key64.log | head -20
grep -E 'PASS|FAIL|passed|failed' $OUT/logs/lua.log | head
ATTN_DEV_NOBUILD=1 OUT=$OUT/wg timeout 200 bash bench/attn_ab_key64wg.sh 2>&1 | tail -30
echo "wg done $(( $(date +%s) - t0 )) s"
# per-CTA overhead of D 128 dense: equal work (B S^2 H), tiles per CTA 8..64
C=g128_t128_s3_pp_tma_np
timeout 120 build-attn/attn_dev --cfg $C,$C --masks dense --shapes 1x8192,4x4096,16x2048,64x1024,256x512 --heads 32 --kernels block --nocheck --quiet > $OUT/logs/ovh.log 2>&1
echo "ovh rc=$? $(( $(date +%s) - t0 )) s"
grep '^TIME' $OUT/logs/ovh.log
cd $OUT && tar czf logs.tgz logs wg && rm -rf logs wg
