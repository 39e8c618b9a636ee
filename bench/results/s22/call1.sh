#!/bin/bash
# session 22 call 1: the GPU suites for session 21's last commits (3c31b35 .. 4222cda, not
# GPU-run), then what a key step costs: masks of equal useful work and equal density whose
# rows take a different number of 64-key steps. window(32, 32) (= sliding(32)) needs keys
# [64i - 32, 64i + 96) of tile-row i: three steps (half, full, half); window(0, 64) needs
# [64i, 64i + 128): two steps. longformer(32, 32) = global(32) | window(32, 32): four steps a
# window row; global(32) | window(0, 64): three.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/logs $OUT/steps
b=build-gpu/tests/test_kernels_gpu
STOF_TEST_FILTER='*match*' timeout 400 $b > $OUT/logs/kgpu_a.log 2>&1 &
pa=$!
STOF_TEST_SKIP='*match*' timeout 400 $b > $OUT/logs/kgpu_b.log 2>&1 &
pb=$!
GPU_CHECK_ONLY='^(gpu_attention|gpu_attention_mod|gpu_bench_attention|gpu_models_small|gpu_models)$' OUT=$OUT/logs timeout 400 bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "lua done $(( $(date +%s) - t0 )) s: $(tail -1 $OUT/logs/lua.log)"
wait $pa; echo "kgpu a rc=$? $(( $(date +%s) - t0 )) s"
wait $pb; echo "kgpu b rc=$? $(( $(date +%s) - t0 )) s"
grep -ahE "^\[  (PASSED|FAILED)|FAIL" $OUT/logs/kgpu_*.log | head -20
grep -aE 'PASS|FAIL|passed' $OUT/logs/lua.log | tail -8
for rep in 1 2; do
  for D in 64 128; do
    for s in 8x1024 16x2048 16x4096; do
      B=${s%x*} S=${s#*x}
      for m in "window(32, 32)" "window(0, 64)" "longformer(32, 32)" "global(32) | window(0, 64)"; do
        [ $(( $(date +%s) - t0 )) -gt 560 ] && break 4
        echo "== rep $rep D $D $s [$m]" >> $OUT/steps/steps.log
        timeout 60 build-gpu/stof bench attention "$m" --seq $S --batch $B --heads 12 --dim $D \
          --json $OUT/steps/steps.jsonl >> $OUT/steps/steps.log 2>&1
      done
    done
  done
done
echo "steps $(( $(date +%s) - t0 )) s"
python3 - $OUT/steps/steps.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print("%-28s D%-3d %2dx%-5d %9.4f ms %5.1f%% tile %s %s" % (r.get("mask"), r.get("D"), r.get("B"), r.get("Sq", 0),
          r.get("ms", 0), 100 * r.get("roofline", 0), r.get("tile"), "hs" if "halves skipped" in r.get("why", "") else ""))
PY
cd $OUT && tar czf r.tgz logs steps && rm -rf logs steps
