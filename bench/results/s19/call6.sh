#!/bin/bash
# session 19 call 6: the D 128 tile rule from S = 1024 with the peers (8 x 1024, H 12), and the
# long-context set for the masks at tile 128 (dense, causal, document; 1 x 32 x S, D 128)
cd "$(dirname "$0")/.."
t0=$(date +%s)
export STOF_CACHE_DIR=/tmp/stof-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $OUT/d128 $OUT/long
DIM=128 OUT=$OUT/d128 timeout 100 bash bench/run-gpu.sh 8x1024 dense,causal,document,causal_sliding 2>&1 | grep -v Deprec | tail -1
echo "d128 $(( $(date +%s) - t0 )) s"
timeout 60 build-gpu/bench_attention --shapes 1x32768,1x65536,1x131072 --masks dense,causal,document --heads 32 --dim 128 --reps 10 --out $OUT/long/long-stof.jsonl > $OUT/long/stof.log 2>&1
echo "long stof rc=$? $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers_long.py --peers .peers/peers.py --shapes 1x32768,1x65536,1x131072 --masks dense,causal,document --out $OUT/long/long-peers.jsonl > /dev/null 2>$OUT/long/peers.err
echo "long peers rc=$? $(( $(date +%s) - t0 )) s"
/usr/bin/python3 bench/report.py $OUT/d128 2>/dev/null | grep -E "^\| (dense|causal|document|causal_sliding) " 
python3 bench/long_report.py $OUT/long/long-stof.jsonl $OUT/long/long-peers.jsonl 2>&1 | tail -20
