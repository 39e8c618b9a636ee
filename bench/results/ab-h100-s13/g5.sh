#!/bin/bash
# session 13, call 5: the long-context set (stof auto, then the peers, same run), the split
# rule at the grid's D 128 shape, the split test again with the final rule
set -u
t0=$(date +%s)
STOF_TEST_FILTER=split_rows_match_cpu timeout 120 build-gpu/tests/test_kernels_gpu 2>&1 | grep -E "split|PASSED|FAILED|ok " | tail -6
echo "split test $(( $(date +%s) - t0 )) s"
timeout 200 build-gpu/bench_attention --shapes 1x8192 --heads 32 --dim 128 --masks longformer,bigbird --splits auto,off \
  --out $OUT/d128-split.jsonl > /dev/null 2>$OUT/d128-split.err; echo "d128 rc $?"
timeout 120 build-gpu/bench_attention --shapes 16x2048,16x4096 --heads 12 --dim 64 --masks longformer --splits auto \
  --out $OUT/d64-split.jsonl > /dev/null 2>&1; echo "d64 rc $?"
echo "grid $(( $(date +%s) - t0 )) s"
timeout 240 build-gpu/bench_attention --shapes 1x32768,1x65536,1x131072 --heads 32 --dim 128 --reps 10 \
  --out $OUT/long-stof.jsonl > /dev/null 2>$OUT/long-stof.err; echo "long stof rc $?"
echo "long stof $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 330 python3 bench/peers_long.py --peers .peers/peers.py --shapes 1x32768,1x65536,1x131072 \
  --out $OUT/long-peers.jsonl > $OUT/long-peers.log 2>&1; echo "peers rc $?"
echo "all $(( $(date +%s) - t0 )) s"
