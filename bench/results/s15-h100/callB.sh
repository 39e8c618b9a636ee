#!/bin/bash
# session 15 call B: GPU format tests on main (review's changes) and on wip/format-round; their
# format build times side by side
cd "$(dirname "$0")/../.." || exit 1
t0=$(date +%s)
mkdir -p /tmp/b
STOF_TEST_FILTER='*format*' timeout 200 build-gpu/tests/test_kernels_gpu > /tmp/b/format_tests_main.log 2>&1
echo "main format tests rc=$? t=$(( $(date +%s) - t0 ))"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAIL|differ" /tmp/b/format_tests_main.log | head
STOF_TEST_FILTER='*format*' timeout 200 .ab/frb/test_kernels_gpu > /tmp/b/format_tests_fr.log 2>&1
echo "fr format tests rc=$? t=$(( $(date +%s) - t0 ))"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAIL|differ" /tmp/b/format_tests_fr.log | head
for r in 1 2; do
for v in main fr; do
  b=build-gpu/bench_format_ab; [ $v = fr ] && b=.ab/frb/bench_format_ab
  timeout 120 $b --masks causal,sliding,longformer,bigbird,document --shapes 32768,131072 --heads 32 --reps 5 --rounds 1 --out /tmp/b/ab_$v.jsonl > /tmp/b/ab_${v}_$r.log 2>&1
  echo "ab $v round $r rc=$? t=$(( $(date +%s) - t0 ))"
done; done
for v in main fr; do echo "== $v"; cat /tmp/b/ab_${v}_1.log /tmp/b/ab_${v}_2.log | grep -v "^#" | head -30; done
tar czf $OUT/callB.tgz /tmp/b
