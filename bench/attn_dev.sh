#!/bin/bash
# Builds bench/attn_dev.cu with nvcc and runs it on the GPU machine; logs and JSON lines go
# to $OUT (the device tool's output folder; /tmp/attn_out elsewhere). Built for sm_90a (the
# g* configurations are the wgmma kernel, kernels/attention_block_sm90.cu): Hopper only.
#
#   bench/attn_dev.sh [attn_dev arguments]     build, NVRTC check, then one attn_dev run
#   ATTN_DEV_NOBUILD=1 bench/attn_dev.sh ...   reuse build-attn/attn_dev
#   ATTN_DEV_NONVRTC=1 bench/attn_dev.sh ...   skip the NVRTC compile check
# Examples:
#   bench/attn_dev.sh --odd                                   correctness, every configuration
#   bench/attn_dev.sh --suite --kernels block,row             the protocol grid
#   bench/attn_dev.sh --cfg h64_t64_w4_s2,h64_t128_w8_s2 --masks dense,causal --shapes 16x4096 --kernels block
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/attn_out}
mkdir -p "$OUT" build-attn
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
BIN=build-attn/attn_dev

if [ "${ATTN_DEV_NOBUILD:-0}" != 1 ] || [ ! -x "$BIN" ]; then
  t0=$(date +%s)
  "$NVCC" -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v -o "$BIN" bench/attn_dev.cu -lnvrtc -lcuda \
    >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; echo "attn_dev: build failed"; exit 1; }
  echo "attn_dev: built in $(( $(date +%s) - t0 )) s"
  # each function's spill line under its own name (fill_kernel's lines are skipped whole), and
  # ptxas's C75xx notes (wgmma serialised)
  awk '/Compiling entry function/ { f = $0; sub(/.*function \047/, "", f); sub(/\047.*/, "", f) }
       /bytes spill stores/ && f != "" && f !~ /fill_kernel/ && ($5 > 0 || $9 > 0) { print "spill: " f ": " $0; n++ }
       END { if (!n) print "attn_dev: no spills" }' "$OUT/build.log"
  grep -E "C75[0-9][0-9]" "$OUT/build.log" | sed -e 's/ptxas info *: //'
fi

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv 2>&1 | tee -a "$OUT/gpu.txt"

if [ "${ATTN_DEV_NONVRTC:-0}" != 1 ]; then
  "$BIN" --nvrtc kernels >"$OUT/nvrtc.log" 2>&1
  tail -n 1 "$OUT/nvrtc.log"
fi

[ $# -eq 0 ] && exit 0
# A hung kernel must not eat the whole lease: ATTN_DEV_TIMEOUT seconds per run (default 300).
timeout "${ATTN_DEV_TIMEOUT:-300}" "$BIN" "$@" --json "$OUT/attn.jsonl" 2>&1 | tee -a "$OUT/attn.log"

# ATTN_DEV_PIVOT=1: after the run, one line per (kernel, mask, shape) with each
# configuration's median ms from all of $OUT/attn.jsonl (the last measurement wins).
if [ "${ATTN_DEV_PIVOT:-0}" = 1 ] && command -v python3 >/dev/null; then
  python3 - "$OUT/attn.jsonl" <<'PY'
import json, sys, collections
t = collections.OrderedDict(); cfgs = []
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["ms"] <= 0: continue
    k = (d["kernel"], d["mask"], d["B"], d["H"], d["Sq"], d["D"])
    t.setdefault(k, {})[d["cfg"]] = d["ms"]
    if d["cfg"] not in cfgs: cfgs.append(d["cfg"])
print("pivot (ms):", " | ".join("%d=%s" % (i, c) for i, c in enumerate(cfgs)))
for k, v in t.items():
    best = min(v.values())
    cells = " ".join(("%8.4f%s" % (v[c], "*" if v[c] == best else " ")) if c in v else "       - " for c in cfgs)
    print("%-5s %-14s %2dx%-5d H%-2d D%-3d %s" % (k[0], k[1], k[2], k[4], k[3], k[5], cells))
PY
fi
