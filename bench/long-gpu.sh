#!/usr/bin/env bash
# Attention at long context on the GPU machine (docs/PERFORMANCE.md, "Attention at long
# context"): stof's benchmark and the peers at batch 1, 32 heads, D 128, in one run. From the
# repository root with build-gpu/ (make gpu-build) and .peers/peers.py carried along:
#   bash bench/long-gpu.sh [shapes]        (default 1x32768,1x65536,1x131072)
# Writes $OUT/long-stof.jsonl and $OUT/long-peers.jsonl.
set -u
out=${OUT:-/tmp/bench}
mkdir -p "$out"
shapes=${1:-1x32768,1x65536,1x131072}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
build-gpu/bench_attention --shapes "$shapes" --heads 32 --dim 128 --reps 10 --out "$out/long-stof.jsonl" > /dev/null
PYTHONUNBUFFERED=1 python3 bench/peers_long.py --peers .peers/peers.py --shapes "$shapes" --out "$out/long-peers.jsonl" > /dev/null
