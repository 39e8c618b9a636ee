#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with build-gpu/ carried along (built
# here by `make gpu-build`): the GPU tests, then every CPU test and Lua script with the
# same binaries. One line per suite is printed; the logs, one after another, go to
# $OUT/gpu-check.log (or /tmp/gpu-check.log).
#   bash scripts/gpu-check.sh              # every test
#   bash scripts/gpu-check.sh --sanitize   # the GPU code under compute-sanitizer instead
#                                          # (scripts/gpu-sanitize.sh says what and how)
#   GPU_CHECK_ONLY='^(gemm_wgmma|lua_)' bash scripts/gpu-check.sh
#                                          # only the suites whose names match (extended regex)
set -u
if [ "${1:-}" = --sanitize ]; then
  shift
  exec bash "$(dirname "$0")/gpu-sanitize.sh" "$@"
fi
out=/tmp/gpu-check
mkdir -p "$out"
b=build-gpu
pass=0 fail=0
only=${GPU_CHECK_ONLY:-}
run() { # name, command...
  local name=$1; shift
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then return 0; fi
  if "$@" >"$out/$name.log" 2>&1; then pass=$((pass + 1)); echo "PASS $name"
  else fail=$((fail + 1)); echo "FAIL $name"; tail -20 "$out/$name.log"; fi
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
run core_gpu $b/tests/test_core_gpu
grep -E "PASSED|SKIPPED|FAILED" "$out/core_gpu.log" 2>/dev/null | head -3
run core $b/tests/test_core
[ -x $b/tests/test_kernels ] && run kernels $b/tests/test_kernels
[ -x $b/tests/test_kernels_gpu ] && run kernels_gpu $b/tests/test_kernels_gpu
[ -x $b/tests/test_schedule ] && STOF_CACHE_DIR=/tmp/stof-cache run schedule $b/tests/test_schedule
if [ -x $b/tests/test_schedule_gpu ]; then
  STOF_CACHE_DIR=/tmp/stof-cache run schedule_gpu $b/tests/test_schedule_gpu
  grep -E "^\[  (PASSED|SKIPPED|FAILED)  \]" "$out/schedule_gpu.log" 2>/dev/null | head -6
fi
for f in tests/gpu/*.lua; do run "gpu_$(basename "$f" .lua)" $b/stof run "$f"; done
# the tensor-core GEMM through wgmma (Hopper) as well as mma.sync (the example's default)
run gemm_wgmma env STOF_GEMM_INTRIN=wgmma $b/stof run examples/schedule_gemm_tensorcore.lua
# as ctest runs them (tests/lua/CMakeLists.txt): no arguments (the demo's first is a model)
for f in tests/lua/test_*.lua examples/*.lua; do
  run "lua_$(basename "$f" .lua)" $b/stof run "$f"
done
for f in "$out"/*.log; do echo "=== $(basename "$f")"; cat "$f"; done > "${OUT:-/tmp}/gpu-check.log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
