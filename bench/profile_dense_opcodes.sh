#!/bin/bash
# Issue 14 item 1, the next step after session 15's profile (bench/NOTES-attention.md): the
# engine's D 64 dense kernel issues 24% more instructions than cuDNN's at 16 x 12 x 4096
# (1,030 M against 829 M), and not in FP32 math. This counts the executed instructions of
# both kernels per SASS opcode, so the extra ones are named: ncu's instanced metric
# sass__inst_executed_per_opcode (the InstructionStats section's instruction mix), printed
# with its instance values, and a per-SASS-line source page of stof's kernel (which lines
# issue them). Text reports to $OUT/opc-*.txt; a side-by-side table of the largest opcodes
# last. Written in session 15 without a GPU (no ncu here): not yet run; if an ncu option is
# refused, the raw report says which.
#
#   bash bench/profile_dense_opcodes.sh [CFG [BxS [H [D]]]]      (defaults as
#   bench/profile_dense_cudnn.sh: g64_t64_s2_k_m4_tma 16x4096 12 64)
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/profile_common.sh
profile_need_ncu profile_dense_opcodes
T=${ATTN_PROFILE_TIMEOUT:-240}
ATTN_DEV_NONVRTC=1 bash bench/attn_dev.sh >/dev/null || exit 1
met="--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances values"

# stof: attn_dev's configuration, the third launch (two warm-ups), at H heads
timeout "$T" "$NCU" --clock-control none -k "regex:^${cfg}_block" --launch-skip 2 --launch-count 1 $met \
  build-attn/attn_dev --cfg "$cfg" --masks dense --shapes "$shape" --heads "$H" --kernels block --nocheck --reps 4 \
  > "$OUT/opc-$cfg.txt" 2>&1
echo "stof opcodes: rc=$?"
# the same launch with the source counters, exported, then its SASS page as CSV (executed
# instructions per line)
timeout "$T" "$NCU" --clock-control none -k "regex:^${cfg}_block" --launch-skip 2 --launch-count 1 \
  --section SourceCounters --import-source yes -f -o "$OUT/src-$cfg" \
  build-attn/attn_dev --cfg "$cfg" --masks dense --shapes "$shape" --heads "$H" --kernels block --nocheck --reps 4 \
  > "$OUT/src-$cfg.log" 2>&1
echo "stof source counters: rc=$?"
"$NCU" -i "$OUT/src-$cfg.ncu-rep" --page source --csv --print-source sass > "$OUT/src-$cfg-sass.csv" 2>&1
echo "stof SASS page: rc=$? ($(wc -l < "$OUT/src-$cfg-sass.csv") lines)"

# cuDNN: its SDPA kernel at the same shape, the third matching launch
timeout "$T" "$NCU" --clock-control none --target-processes all -k "regex:(cudnn|fmha|sdpa|flash)" \
  --launch-skip 2 --launch-count 1 $met python3 bench/sdpa_cudnn_launch.py "$B" "$H" "$S" "$D" > "$OUT/opc-cudnn.txt" 2>&1
echo "cuDNN opcodes: rc=$?"

# side by side: "OPCODE count" pairs from the instance values (ncu prints them as
# "(OPCODE: value; ...)" or one per line, by version: both are read)
python3 - "$OUT/opc-$cfg.txt" "$OUT/opc-cudnn.txt" <<'PY'
import re, sys
def opcodes(path):
    txt = open(path, errors="replace").read()
    m = re.search(r"sass__inst_executed_per_opcode.*", txt, re.S)
    pairs = re.findall(r"\b([A-Z][A-Z0-9_.]+)\b\s*[:=]?\s*([0-9][0-9,]*)", m.group(0) if m else "")
    d = {}
    for op, v in pairs:
        if op in ("SM", "GPU", "CUDA"):
            continue
        d[op] = d.get(op, 0) + int(v.replace(",", ""))
    return d
a, b = opcodes(sys.argv[1]), opcodes(sys.argv[2])
if not a or not b:
    print("no opcode counts parsed: read the raw reports"); sys.exit(0)
print("%-12s %14s %14s %14s" % ("opcode", "stof", "cuDNN", "stof - cuDNN"))
for op in sorted(set(a) | set(b), key=lambda o: -abs(a.get(o, 0) - b.get(o, 0)))[:30]:
    print("%-12s %14d %14d %14d" % (op, a.get(op, 0), b.get(op, 0), a.get(op, 0) - b.get(op, 0)))
print("%-12s %14d %14d" % ("total", sum(a.values()), sum(b.values())))
PY
