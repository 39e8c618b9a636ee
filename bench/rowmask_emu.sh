#!/bin/bash
# Checks STOF_SM90_ROWMASK's bit gathering on the CPU (bench/rowmask_emu.cpp): every (row, key)
# of random tiles, T = 64 and 128, with and without the TMA producer. No GPU; g++ with C++20.
#   bash bench/rowmask_emu.sh
set -e
cd "$(dirname "$0")/.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# the helpers: from "#if STOF_SM90_ROWMASK" before their comment to the #endif after rm_apply
awk '/^#if STOF_SM90_ROWMASK$/ { getline nx; if (nx ~ /^\/\* STOF_SM90_ROWMASK: a partial tile/) { on = 1; print nx; next } }
     on && /^#endif/ { exit } on { print }' kernels/attention_block_sm90.cu >"$W/rowmask_block.inc"
grep -q "rm_apply" "$W/rowmask_block.inc" || { echo "rowmask_emu: helpers not found in the kernel"; exit 1; }
rc=0
for t in 64 128; do
  for tma in 1 0; do
    g++ -std=c++20 -O1 -pthread -I"$W" -DTILE=$t -DEMU_TMA=$tma -o "$W/emu" bench/rowmask_emu.cpp
    "$W/emu" || rc=1
  done
done
exit $rc
