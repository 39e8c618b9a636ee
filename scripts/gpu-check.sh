#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with build-gpu/ carried along (built
# here by `make gpu-build`): the GPU tests, then every CPU test and Lua script with the
# same binaries. Logs go to $OUT (or /tmp) and a one-line summary per suite is printed.
set -u
out=${OUT:-/tmp}
b=build-gpu
pass=0 fail=0
run() { # name, command...
  local name=$1; shift
  if "$@" >"$out/$name.log" 2>&1; then pass=$((pass + 1)); echo "PASS $name"
  else fail=$((fail + 1)); echo "FAIL $name"; tail -20 "$out/$name.log"; fi
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
run core_gpu $b/tests/test_core_gpu
grep -E "PASSED|SKIPPED|FAILED" "$out/core_gpu.log" | head -5
run core $b/tests/test_core
[ -x $b/tests/test_kernels ] && run kernels $b/tests/test_kernels
for f in tests/lua/test_*.lua examples/*.lua; do
  run "lua_$(basename "$f" .lua)" $b/stof run "$f" "$out/ex"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
