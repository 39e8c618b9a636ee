#!/bin/bash
# session 21 call 6: test_kernels_gpu's plan tests again (plan_time_times_and_rejects_bad_counts
# mended after call 5), then longformer's launch order against none at D 128 and D 64 (three
# CTAs an SM at D 128 now; the global rows read their head's whole K and V: without the order
# they run after the head's window rows, whose K and V may still be in L2)
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
STOF_TEST_FILTER='*plan_*' timeout 200 build-gpu/tests/test_kernels_gpu > $OUT/logs/kgpu_plan.log 2>&1
echo "kgpu plan_* rc=$? $(( $(date +%s) - t0 )) s"; grep -aE "^\[ *(OK|FAILED|PASSED|ERROR)|8 runs|ERROR" $OUT/logs/kgpu_plan.log | head -20
for D in 128 64; do
  timeout 200 build-gpu/bench_attention --shapes 8x1024,16x2048,16x4096 --masks longformer --heads 12 --dim $D \
    --kernels auto,noorder,auto,noorder --reps 30 --out $OUT/logs/order_d$D.jsonl 2>&1 | grep -vE "^\{" | tail -14
  echo "order D $D $(( $(date +%s) - t0 )) s"
done
cd $OUT && tar czf r.tgz logs && rm -rf logs
