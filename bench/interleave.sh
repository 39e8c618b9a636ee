#!/usr/bin/env bash
# A close case measured fairly: stof and FlexAttention timed alternately, ROUNDS times each,
# in one device call, on the very same mask (the peers' own, dumped by dump_peer_masks.py),
# so that the GPU's clock drift over the call falls on both. Prints each round and the
# medians. From the repository root on the GPU machine, with build-gpu/ and .peers/peers.py:
#
#   bash bench/interleave.sh 16x4096 document [ROUNDS=5]
#
# Writes $OUT/interleave-stof.jsonl and $OUT/interleave-peers.jsonl (OUT defaults to /tmp).
set -u
shape=${1:?shape BxS} mask=${2:?mask} rounds=${3:-5}
out=${OUT:-/tmp}
mkdir -p "$out"
S=${shape#*x}
python3 bench/dump_peer_masks.py .peers/peers.py "$out/masks" "$S" > /dev/null
rm -f "$out/interleave-stof.jsonl" "$out/interleave-peers.jsonl"
for r in $(seq "$rounds"); do
  build-gpu/bench_attention --shapes "$shape" --masks "$mask" --heads "${HEADS:-12}" --dim "${DIM:-64}" \
    --peer-masks "$out/masks" --out "$out/interleave-stof.jsonl" > /dev/null 2>&1
  PYTHONUNBUFFERED=1 python3 .peers/peers.py attn --shapes "$shape" --masks "$mask" --heads "${HEADS:-12}" \
    --dim "${DIM:-64}" --out "$out/interleave-peers.jsonl" > /dev/null 2>&1
done
python3 - "$out" <<'EOF'
import json, statistics, sys
out = sys.argv[1]
stof = [json.loads(l)["ms"] for l in open(out + "/interleave-stof.jsonl") if '"ms"' in l]
flex = [json.loads(l)["ms"] for l in open(out + "/interleave-peers.jsonl")
        if json.loads(l).get("impl") == "flex_attention" and "ms" in json.loads(l)]
for i, (a, b) in enumerate(zip(stof, flex)):
    print(f"round {i + 1}: stof {a:.4f} ms, FlexAttention {b:.4f} ms, ratio {b / a:.3f}")
if stof and flex:
    ms, mf = statistics.median(stof), statistics.median(flex)
    print(f"median: stof {ms:.4f} ms, FlexAttention {mf:.4f} ms, Flex time / stof time {mf / ms:.3f}")
EOF
