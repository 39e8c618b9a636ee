#!/bin/bash
# session 19 call 4: the alternating-turn ping-pong (TMA) in the engine: GPU tests; attn_dev
# checks of the persistent variant; persistent against not, D 128 and D 64 dense
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs $OUT/r
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*match*' timeout 400 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 400 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small|gpu_models)$' OUT=$OUT/logs timeout 400 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -hE "^\[  (PASSED|FAILED|SKIPPED)|^\[  FAILED|FAIL " $OUT/logs/kgpu_*.log | head -20
grep -E 'PASS|FAIL|passed' $OUT/logs/lua.log
B=build-attn/attn_dev
timeout 100 $B --cfg g128_t128_s3_pp_tma_np,g128_t128_s3_pp_tma_np_p,g64_t128_s3_pp_tma_np_p --masks dense \
  --shapes 1x128,2x512,1x1024,2x2048,3x4096,5x1024 --heads 4 --kernels block --notime --quiet > $OUT/r/np_check.log 2>&1
echo "np check rc=$?"; grep -E "FAIL|ALL PASS" $OUT/r/np_check.log | head -5
timeout 100 $B --odd --cfg g128_t128_s3_pp_tma,g64_t128_s3_pp_tma,g64_t128_s3_pp_tma_bf,g128_t128_s3_pp_tma_rm --kernels block --quiet > $OUT/r/odd.log 2>&1
echo "odd check rc=$? $(( $(date +%s) - t0 )) s"; grep -E "FAIL|ALL PASS" $OUT/r/odd.log | head -5
A=g128_t128_s3_pp_tma_np; L=$A,${A}_p
timeout 150 $B --cfg $L,$L,$L --masks dense --shapes 1x8192,16x2048,64x1024 --heads 32 --kernels block --nocheck --quiet > $OUT/r/d128.log 2>&1
timeout 100 $B --cfg $L,$L,$L --masks dense --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/d128h12.log 2>&1
echo "d128 $(( $(date +%s) - t0 )) s"
K=g64_t128_s2_k_m2_tma_k64_np; L3=$K,g64_t128_s3_pp_tma_np_p
timeout 100 $B --cfg $L3,$L3,$L3 --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet > $OUT/r/d64.log 2>&1
echo "d64 $(( $(date +%s) - t0 )) s"
cat $OUT/r/d128.log $OUT/r/d128h12.log $OUT/r/d64.log | grep '^TIME' | awk '
  { k = $2 " " $3 " " $5 " " $6 " " $7; s[k] += $9; c[k]++; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
  END { for (i = 0; i < n; i++) { k = order[i]; printf "%-56s %8.4f (%d)\n", k, s[k] / c[k], c[k] } }' | sort -k2,2 -k3,5 | tee $OUT/r/table.txt
cd $OUT && tar czf logs.tgz logs r && rm -rf logs r
