#!/usr/bin/env bash
# A close case measured fairly: stof and a peer (FlexAttention unless PEER names another
# implementation of peers.py's, e.g. PEER=sdpa_cudnn with mask dense) timed alternately, ROUNDS times each,
# in one device call, on the very same mask (the peers' own, dumped by dump_peer_masks.py),
# so that the GPU's clock drift over the call falls on both. Prints each round and the
# medians. From the repository root on the GPU machine, with build-gpu/ and .peers/peers.py:
#
#   bash bench/interleave.sh 16x4096 document [ROUNDS=5]
#   PEER=sdpa_cudnn DIM=128 bash bench/interleave.sh 16x4096 dense 5
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
python3 - "$out" "${PEER:-flex_attention}" <<'EOF'
import json, statistics, sys
out, peer = sys.argv[1], sys.argv[2]
stof = [json.loads(l)["ms"] for l in open(out + "/interleave-stof.jsonl") if '"ms"' in l]
pms = [json.loads(l)["ms"] for l in open(out + "/interleave-peers.jsonl")
        if json.loads(l).get("impl") == peer and "ms" in json.loads(l)]
for i, (a, b) in enumerate(zip(stof, pms)):
    print(f"round {i + 1}: stof {a:.4f} ms, {peer} {b:.4f} ms, ratio {b / a:.3f}")
if stof and pms:
    ms, mf = statistics.median(stof), statistics.median(pms)
    print(f"median: stof {ms:.4f} ms, {peer} {mf:.4f} ms, {peer} time / stof time {mf / ms:.3f}")
EOF
