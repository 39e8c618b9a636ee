#!/bin/bash
# The size in SASS instructions (16 bytes each) of the Hopper attention kernel for one set of
# macros, without a GPU or a disassembler: nvcc -cubin for sm_90a, then the .text section's
# size from readelf. A static count (each instruction once, loops not unrolled by it), so a
# proxy for what a change removes from the tile loop, not a timing; with -v, ptxas's
# registers and spills too. Session 16 used it on the branch wip/nopartial.
#
#   bash bench/sass_size.sh [-v] [REV] -- MACROS...
#   bash bench/sass_size.sh -- -DSTOF_HEAD_DIM=64 -DSTOF_TILE_M=64 -DSTOF_STAGES=2 \
#        -DSTOF_MIN_BLOCKS=4 -DSTOF_SM90_QREG=0 -DSTOF_SM90_TMA=1      (the engine's D 64 dense)
#   bash bench/sass_size.sh 58efe67 -- ...                             (the kernel at a commit)
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
verbose=0
[ "${1:-}" = -v ] && { verbose=1; shift; }
rev=
[ "${1:-}" != -- ] && [ -n "${1:-}" ] && { rev=$1; shift; }
[ "${1:-}" = -- ] && shift
d=$(mktemp -d) || exit 1
trap 'rm -rf "$d"' EXIT
for f in attention_block_sm90.cu attention_common.cuh; do
  if [ -n "$rev" ]; then git show "$rev:kernels/$f" > "$d/$f" || exit 1; else cp "kernels/$f" "$d/$f"; fi
done
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -cubin -arch=sm_90a -O3 -std=c++17 -Xptxas -v "$@" -o "$d/k.cubin" "$d/attention_block_sm90.cu" \
  > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
[ "$verbose" = 1 ] && grep -E "registers|spill" "$d/log"
readelf -S -W "$d/k.cubin" 2>/dev/null | python3 -c '
import re, sys
for line in sys.stdin:
    m = re.search(r"\.text\.(\S+)\s+PROGBITS\s+\S+\s+\S+\s+(\S+)", line)
    if m:
        print("%s %d instructions" % (m.group(1), int(m.group(2), 16) // 16))'
