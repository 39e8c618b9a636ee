#!/usr/bin/env bash
# Runs each libFuzzer target of build-fuzz for SECONDS on its seed corpus (tests/fuzz/corpus/
# <target>, read only) and its working corpus (BUILD/corpus/<target>, where new inputs go);
# logs in BUILD/logs/<target>.log, crashing inputs in BUILD/artifacts/. Fails when any target
# finds a crash (a sanitizer report, a failed check, a leak, a timeout, running out of memory).
#   tests/fuzz/run.sh BUILD SECONDS [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
seconds=${2:-30}
shift 2 || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_db fuzz_mask fuzz_safetensors fuzz_te)
mkdir -p "$build/logs" "$build/artifacts" "$build/stof-cache"
export STOF_CACHE_DIR="$PWD/$build/stof-cache"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/tests/fuzz/ubsan.supp"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  log="$build/logs/$t.log"
  echo "fuzz: $t for ${seconds}s (log $log)"
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec" "$log" | sed "s/^/  /"
  if [ $rc -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); the end of its log:"
    tail -40 "$log"
    failed=1
  fi
done
exit $failed
