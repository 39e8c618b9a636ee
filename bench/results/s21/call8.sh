#!/bin/bash
# session 21 call 8: interleaved split plans (stof_attn_opts.interleave, experimental): the GPU
# tests (interleaved, split, launch order, plan time), then longformer interleaved against the
# engine's default (the launch order) at D 128 and D 64 on the grid, and at long context (D 128)
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
b=build-gpu/tests/test_kernels_gpu
for pat in '*interleaved*' '*split_rows*' '*launch_order*' '*plan_time*' '*every_kernel_variant*'; do
  STOF_TEST_FILTER="$pat" timeout 200 $b > "$OUT/logs/kgpu_$(echo $pat | tr -d '*').log" 2>&1
  echo "kgpu $pat rc=$? $(( $(date +%s) - t0 )) s"
done
grep -ahE "^\[ *(OK|FAILED|ERROR)|ERROR|FAIL" $OUT/logs/kgpu_*.log | head -20
grep -ah "interleaved" $OUT/logs/kgpu_interleaved.log | head -3
for D in 128 64; do
  timeout 150 build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks longformer --heads 12 --dim $D \
    --kernels auto,interleave,auto,interleave --reps 30 --out $OUT/logs/il_d$D.jsonl 2>&1 | grep -E "^longformer" | head -14
  echo "il D $D $(( $(date +%s) - t0 )) s"
done
timeout 200 build-gpu/bench_attention --shapes 1x32768,1x131072 --masks longformer --heads 32 --dim 128 \
  --kernels auto,interleave,auto,interleave --reps 10 --out $OUT/logs/il_long.jsonl 2>&1 | grep -E "^longformer|split" | head -14
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz logs && rm -rf logs
