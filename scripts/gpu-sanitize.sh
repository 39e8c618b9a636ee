#!/usr/bin/env bash
# The GPU code under NVIDIA's compute-sanitizer (issue 12; docs/RELIABILITY.md). Runs on the
# GPU machine from the repository root with build-gpu/ carried along (`make gpu-build`
# here); also `bash scripts/gpu-check.sh --sanitize`.
#
# Each target runs once alone first ("plain": the program must pass by itself, so that a FAIL
# under a tool is the tool's finding; it also fills the cubin cache), then under memcheck
# (--leak-check full), racecheck (--racecheck-report all), synccheck and initcheck, each with
# --error-exitcode: one line PASS / FAIL per (tool, target) with the time, the tool's SUMMARY
# lines and the device functions its report names. Nothing is filtered or suppressed: a
# hazard believed harmless still fails its line; read the report. The tool's report goes to
# $OUT/sanitize/<tool>-<target>.log (or /tmp/sanitize/), the program's own output to
# <tool>-<target>.out, the table to summary.txt. Exit status: 0 when every line passed.
#
# Targets, at small shapes (the tools slow kernels down 10-100x):
#   attention   every hand-written attention kernel variant, forced one by one: block-wise
#               portable (mma.sync), Hopper wgmma with K/V by cp.async and by TMA, row-wise;
#               tiles 64 / 128, D 64 / 128, f16 / bf16, odd and unequal lengths, a per-head
#               mask with GQA, rows with no key (test_kernels_gpu,
#               every_kernel_variant_at_small_shapes)
#   format      the GPU mask-format builder, kernels/mask_format.cu (test_kernels_gpu,
#               gpu_format_matches_cpu_at_small_sizes)
#   schedule    generated kernels, a sample of test_schedule_gpu's cases ($schedule_cases):
#               shared-memory staging, mma.sync and wgmma GEMMs behind cp.async pipelines,
#               all-reduces, vectorized and misaligned accesses, guards, auto-scheduled ones
#   models      tests/gpu/models_small.lua: BERT (BigBird), LLaMA, T5 through CUDA plans
#               (cuBLASLt, the attention intrinsic, generated kernels, CUDA-graph replay)
# and, when named in SANITIZE_TARGETS only:
#   schedule_all  every case of test_schedule_gpu
#   gemm_mma    examples/schedule_gemm_tensorcore.lua: mma.sync with a cp.async pipeline
#   gemm_wgmma  the same example through wgmma (Hopper)
#
# Environment: SANITIZE_TOOLS and SANITIZE_TARGETS (space-separated subsets of the above;
# SANITIZE_TOOLS="" runs the targets alone only), SANITIZE_TIMEOUT (seconds per step,
# default 300), RACECHECK_REPORT (racecheck's --racecheck-report: all (default), hazard, or
# analysis: one line per pair of source locations, every kernel's), COMPUTE_SANITIZER (default
# /usr/local/cuda/bin/compute-sanitizer), STOF_BUILD (default build-gpu). Kernels are
# compiled with -lineinfo (STOF_NVRTC_LINEINFO=1, a cubin cache of their own in
# /tmp/stof-sanitize-cache) so that reports name .cu lines.
#   bash scripts/gpu-sanitize.sh
#   SANITIZE_TOOLS=racecheck SANITIZE_TARGETS="attention" bash scripts/gpu-sanitize.sh
set -u
cd "$(dirname "$0")/.." || exit 2
b=${STOF_BUILD:-build-gpu}
cs=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
tools=${SANITIZE_TOOLS-memcheck racecheck synccheck initcheck}
targets=${SANITIZE_TARGETS-attention format schedule models}
limit=${SANITIZE_TIMEOUT:-300}
out=${OUT:-/tmp}/sanitize
export STOF_CACHE_DIR=/tmp/stof-sanitize-cache STOF_NVRTC_LINEINFO=1

rm -rf "$out"
mkdir -p "$out" "$STOF_CACHE_DIR" || { echo "cannot create $out"; exit 2; }
if [ ! -x "$cs" ]; then
  echo "FAIL: no compute-sanitizer at $cs (set COMPUTE_SANITIZER)"
  exit 2
fi
if [ ! -x "$b/stof" ] || [ ! -x "$b/tests/test_kernels_gpu" ]; then
  echo "FAIL: no $b/stof or $b/tests/test_kernels_gpu (make gpu-build, and carry $b along)"
  exit 2
fi
case $limit in '' | *[!0-9]*) echo "SANITIZE_TIMEOUT must be a number of seconds"; exit 2 ;; esac

schedule_cases="matmul_caches_unbound,shared_staging_no_tensorize,gemm_*,grouped_gemm_bias_relu,*allreduce*"
schedule_cases+=,vec_f16_vec8,stencil_vec2_misaligned,elem2_vec8_not_dividing,rfactor_bound_to_threads
schedule_cases+=,non_divisible_split_bound,tiled_matmul_bound,auto_softmax_rows_of_3_f16
schedule_cases+=,auto_layernorm_residual_7x1000_f32,auto_rotary_f16,auto_embedding_128x768_f16

# Sets envs (VAR=value ...) and cmd (the program and its arguments) for target $1, and
# cmocka to 1 for the cmocka executables.
target_cmd() {
  envs=() cmd=() cmocka=0
  case $1 in
    attention) envs=(STOF_TEST_FILTER=every_kernel_variant_at_small_shapes) cmd=("$b/tests/test_kernels_gpu") cmocka=1 ;;
    format) envs=(STOF_TEST_FILTER=gpu_format_matches_cpu_at_small_sizes) cmd=("$b/tests/test_kernels_gpu") cmocka=1 ;;
    schedule) envs=("STOF_TEST_CASES=$schedule_cases") cmd=("$b/tests/test_schedule_gpu") cmocka=1 ;;
    schedule_all) cmd=("$b/tests/test_schedule_gpu") cmocka=1 ;;
    gemm_mma) cmd=("$b/stof" run examples/schedule_gemm_tensorcore.lua) ;;
    gemm_wgmma) envs=(STOF_GEMM_INTRIN=wgmma) cmd=("$b/stof" run examples/schedule_gemm_tensorcore.lua) ;;
    models) cmd=("$b/stof" run tests/gpu/models_small.lua) ;;
    *) return 1 ;;
  esac
}

# Sets topts, the options of tool $1 beyond the common ones.
tool_opts() {
  case $1 in
    memcheck) topts=(--leak-check full) ;;
    racecheck) topts=(--racecheck-report "${RACECHECK_REPORT:-all}") ;;
    synccheck | initcheck) topts=() ;;
    *) return 1 ;;
  esac
}

# Every tool: a finding sets the exit status to 86; the report names up to 200 findings, with
# host backtraces of 12 frames; only the program itself is tracked (not the C compiler the C
# backend starts); up to 120 s for the program to reach CUDA.
common=(--error-exitcode 86 --print-limit 200 --num-callers-host 12 --target-processes application-only
        --launch-timeout 120)

for target in $targets; do
  target_cmd "$target" || { echo "unknown target $target (SANITIZE_TARGETS)"; exit 2; }
done
for tool in $tools; do
  tool_opts "$tool" || { echo "unknown tool $tool (SANITIZE_TOOLS: memcheck racecheck synccheck initcheck)"; exit 2; }
done

pass=0 fail=0
declare -A result

# One line for a step. $1 tool (or plain), $2 target, $3 exit status, $4 seconds.
report() {
  local tool=$1 target=$2 rc=$3 secs=$4 log=$out/$1-$2.log prog=$out/$1-$2.out why="" sums="" kern=""
  if [ "$tool" != plain ] && [ -f "$log" ]; then
    sums=$(grep -E "SUMMARY:" "$log" | sed -E 's/^=+ *//' | paste -sd ';' -)
    # the device functions of the findings ("at <function>+0x<offset> in <file>:<line>"),
    # lambdas and C++ names included, cut to 60 characters
    kern=$(sed -nE 's/^=+ .*[ (]at (.+)\+0x[0-9a-f]+( in .*)?$/\1/p' "$log" | cut -c1-60 | sort | uniq -c |
      sort -rn | head -4 | sed -E 's/^ *([0-9]+) (.*)$/\2 x\1/' | paste -sd ';' - | sed 's/;/; /g')
  fi
  case $rc in
    0) ;;
    86) why="the tool reported errors" ;;
    124 | 137) why="timed out after ${limit}s" ;;
    *) why="exit $rc" ;;
  esac
  if [ -z "$why" ] && grep -qE "SKIPPED|no GPU" "$prog"; then
    why="skipped (no GPU?)"
  elif [ -z "$why" ] && [ "$cmocka" = 1 ] && ! grep -qE "^\[  PASSED  \] [1-9]" "$prog"; then
    why="no test ran (a filter that matches nothing?)"
  fi
  if [ -z "$why" ]; then
    pass=$((pass + 1)) result[$tool,$target]=PASS
    echo "PASS $tool $target (${secs}s)${sums:+ $sums}"
  else
    fail=$((fail + 1)) result[$tool,$target]=FAIL
    echo "FAIL $tool $target (${secs}s): $why${sums:+; $sums}${kern:+; in $kern}"
    if [ "$tool" != plain ] && [ -f "$log" ]; then # the first findings, else the report's end
      { grep -m 4 -E "^=+ +(Error|Invalid|Race|Leaked|Uninitialized|Program hit|Barrier|Warning)" "$log" ||
        tail -3 "$log"; } | sed 's/^/     > /'
    fi
    tail -4 "$prog" | sed 's/^/     | /' # the program's last words
  fi
}

# Runs target $2 alone (tool plain) or under tool $1.
step() {
  local tool=$1 target=$2 t0 rc
  target_cmd "$target"
  t0=$(date +%s)
  if [ "$tool" = plain ]; then
    env "${envs[@]}" timeout -k 10 "$limit" "${cmd[@]}" >"$out/plain-$target.out" 2>&1
  else
    env "${envs[@]}" timeout -k 10 "$limit" "$cs" --tool "$tool" "${common[@]}" "${topts[@]}" \
      --log-file "$out/$tool-$target.log" "${cmd[@]}" >"$out/$tool-$target.out" 2>&1
  fi
  rc=$?
  report "$tool" "$target" "$rc" $(($(date +%s) - t0))
}

start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
"$cs" --version 2>&1 | grep -i version | sed 's/^/compute-sanitizer: /'
for target in $targets; do step plain "$target"; done
for tool in $tools; do
  tool_opts "$tool"
  # the options first, on a program without CUDA: a refused option fails once, not per target
  if ! "$cs" --tool "$tool" "${common[@]}" "${topts[@]}" --require-cuda-init no \
      --log-file "$out/$tool-options.log" /bin/true >"$out/$tool-options.out" 2>&1; then
    echo "FAIL $tool: compute-sanitizer refused the options (see $tool-options.out)"
    tail -3 "$out/$tool-options.out" | sed 's/^/     | /'
    fail=$((fail + 1))
    continue
  fi
  for target in $targets; do step "$tool" "$target"; done
done

{
  printf '%-10s' ""
  for target in $targets; do printf ' %-10s' "$target"; done
  echo
  for tool in plain $tools; do
    printf '%-10s' "$tool"
    for target in $targets; do printf ' %-10s' "${result[$tool,$target]:--}"; done
    echo
  done
} | tee "$out/summary.txt"
echo "$pass passed, $fail failed in $(($(date +%s) - start)) s; reports in $out"
[ "$fail" -eq 0 ]
