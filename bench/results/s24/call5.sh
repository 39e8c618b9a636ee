#!/bin/bash
# session 24 call 5: the launch order's walk over grid z (new GPU test
# ordered_walk_over_grid_z_matches_cpu: B x H = 65600), then gpu_models and gpu_models_small
# (cut by call 2's time limit).
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
mkdir -p $OUT/logs
STOF_TEST_FILTER='*grid_z*' timeout 200 build-gpu/tests/test_kernels_gpu > $OUT/logs/kgpu_gridz.log 2>&1
echo "grid z rc=$? $(( $(date +%s) - t0 )) s"
grep -aE "^ok|FAIL|PASSED|FAILED|skipping|launched|longest" $OUT/logs/kgpu_gridz.log | cut -c1-220 | head -12
GPU_CHECK_ONLY='^(gpu_models|gpu_models_small)$' OUT=$OUT/logs timeout $(( 560 - ($(date +%s) - t0) )) bash scripts/gpu-check.sh > $OUT/logs/lua.log 2>&1
echo "models $(( $(date +%s) - t0 )) s"
cat $OUT/logs/lua.log | tail -4
cp /tmp/gpu-check/gpu_models*.log $OUT/logs/ 2>/dev/null
cd $OUT && tar czf r.tgz logs && rm -rf logs
