#!/usr/bin/env bash
# The attention benchmark on the GPU machine, stof and its peers in one run. From the
# repository root, with build-gpu/ (make gpu-build) and .peers/peers.py carried along:
#   bash bench/run-gpu.sh [shapes] [masks]
# Writes $OUT/stof.jsonl and $OUT/peers.jsonl; bench/report.py turns them into the table
# and chart of docs/PERFORMANCE.md. Both sides are timed after 5 warm-up launches (peers.py's
# protocol). WARMUP_MS=3000: the sustained state instead (3 s of back-to-back launches first:
# bench_attention --warmup-ms, and bench/peers_sustained.py for the peers, which time dense and
# causal only: the default masks are then those two).
set -u
out=${OUT:-/tmp/bench}
mkdir -p "$out"
shapes=${1:-1x128,8x512,8x1024,16x2048,16x4096}
heads=${HEADS:-12} dim=${DIM:-64} warm=${WARMUP_MS:-0}
if [ "$warm" != 0 ]; then masks=${2:-dense,causal}; else masks=${2:-dense,causal,sliding,causal_sliding,longformer,bigbird,document}; fi
sizes=$(echo "$shapes" | tr ',' '\n' | cut -dx -f2 | sort -un | tr '\n' ' ')
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 bench/dump_peer_masks.py .peers/peers.py "$out/masks" $sizes
if [ "${SKIP_STOF:-0}" != 1 ]; then
  build-gpu/bench_attention --shapes "$shapes" --masks "$masks" --heads "$heads" --dim "$dim" \
    --kernels ${KERNELS:-auto} --tiles ${TILES:-0} --warmup-ms "$warm" --peer-masks "$out/masks" \
    --out "$out/stof.jsonl" > /dev/null
fi
if [ "${SKIP_PEERS:-0}" != 1 ] && [ "$warm" != 0 ]; then
  python3 bench/peers_sustained.py .peers/peers.py --shapes "$shapes" --masks "$masks" --heads "$heads" \
    --dim "$dim" --warmup-ms "$warm" --out "$out/peers.jsonl" > /dev/null
elif [ "${SKIP_PEERS:-0}" != 1 ]; then
  PYTHONUNBUFFERED=1 python3 .peers/peers.py attn --shapes "$shapes" --masks "$masks" --heads "$heads" \
    --dim "$dim" --out "$out/peers.jsonl" > /dev/null
fi
rm -rf "$out/masks"
