#!/usr/bin/env bash
# End to end on the GPU machine, stof and its peers in the same call (DESIGN.md section 9),
# one model at a time so that a call fits the device's time limit:
#   bash bench/e2e-gpu.sh MODELS [SHAPES [MASK [PEER_MODES [PEER_ATTN]]]]
#   bash bench/e2e-gpu.sh bert-base,gpt2 1x128,8x512,16x2048 bigbird eager,default,reduce-overhead sdpa,flex
# Needs build-gpu/ (make gpu-build) and .peers/peers.py (a copy of shared/bench/peers.py).
# TUNE_S=30 also searches each case for 30 s (stof.tune; records in $OUT/e2e-tune.jsonl) and
# times the tuned plan beside the default one (bench/e2e.lua).
# Writes $OUT/e2e-stof.jsonl and $OUT/e2e-peers.jsonl (OUT defaults to /tmp/e2e), then the
# table of docs/PERFORMANCE.md (bench/e2e_report.py) on what it measured.
set -u
models=${1:?models, e.g. bert-base,gpt2}
shapes=${2:-1x128,8x512,16x2048}
mask=${3:-bigbird}
modes=${4:-eager,default,reduce-overhead}
attn=${5:-sdpa,flex}
out=${OUT:-/tmp/e2e}
mkdir -p "$out"
export STOF_CACHE_DIR=${STOF_CACHE_DIR:-/tmp/stof-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
IFS=, read -ra list <<< "$models"
for m in "${list[@]}"; do
  build-gpu/stof run bench/e2e.lua "$m" "$shapes" "$mask" 30 "${TUNE_S:-0}" "$out/e2e-tune.jsonl" | tee -a "$out/e2e-stof.jsonl"
  python3 .peers/peers.py e2e --models "$m" --shapes "$shapes" --masks "$mask" --attn "$attn" \
    --modes "$modes" --out "$out/e2e-peers.jsonl" > /dev/null 2>&1 || echo "peers.py e2e failed for $m"
done
python3 bench/e2e_report.py "$out/e2e-stof.jsonl" "$out/e2e-peers.jsonl"
