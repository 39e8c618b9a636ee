#!/bin/bash
# The correctness checks run before the end-to-end timing, in the same run (bench/e2e-gpus.sh:
# VERIFY="bash bench/e2e-verify.sh"): the runtime's, the search's and the schedule language's GPU tests, Hugging
# Face parity (--ref32), bench/plan_order.lua (whether the order plans are built in changes
# their time: about a minute), and `stof bench attention --peers` on five masks (each checked against
# the CPU reference first; BENCH_PEERS=0 skips them: about 200 of the 340 s on an H100). Logs
# and JSON under $OUT/verify (default /tmp/e2e/verify); hf_compare's exported models (GBs) go
# to a scratch folder, removed after.
set -u
O=${OUT:-/tmp/e2e}/verify; mkdir -p $O
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
el test_exec
timeout 300 build-gpu/tests/test_exec > $O/exec.log 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|ERROR" $O/exec.log | tail -4
el test_search
timeout 300 build-gpu/tests/test_search > $O/search.log 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|ERROR" $O/search.log | tail -8
el test_schedule_gpu
timeout 300 build-gpu/tests/test_schedule_gpu > $O/schedule_gpu.log 2>&1; echo "rc=$?"; grep -E "PASSED|FAILED|ERROR" $O/schedule_gpu.log | tail -8
el hf_compare
timeout 500 python3 bench/hf_compare.py --ref32 --out /tmp/e2e-verify-hf > $O/hf.log 2>&1; echo "rc=$?"; grep -E '^\{' $O/hf.log | cut -c1-330
rm -rf /tmp/e2e-verify-hf
el plan_order
timeout 200 build-gpu/stof bench/plan_order.lua bert-base 16 2048 2>&1 | grep -v "^stof tune:" > $O/plan_order.txt; cat $O/plan_order.txt
[ "${BENCH_PEERS:-1}" = 0 ] && { el end; exit 0; }
el bench-peers
for c in "bigbird --batch 8 --heads 12 --seq 2048" "longformer --batch 8 --heads 12 --seq 4096" \
         "causal --batch 16 --heads 12 --seq 2048" "dense --batch 8 --heads 16 --seq 4096 --dim 128" \
         "causal() & sliding(256) --batch 8 --heads 12 --seq 4096"; do
  m=${c%% --*}; rest=${c#"$m"}
  timeout 200 build-gpu/stof bench attention "$m" $rest --peers --json $O/bench-peers.jsonl 2>&1 | tail -14; echo "rc=$?"
done
el end
