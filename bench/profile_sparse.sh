#!/bin/bash
# Issue 14 item 2 (every sparse mask at half the roofline): where the engine's own attention
# kernel spends its time, mask by mask, in Nsight Compute's counters. Unlike
# bench/attn_profile.sh (attn_dev's configurations), this profiles what the selector really
# runs: build-gpu/bench_attention at one shape, the fourth launch of the attention kernel
# (after the checked run and two warm-ups; the mask-format kernels are not matched). Two ncu
# passes per mask, so that a metric this ncu lacks cannot cost the sections' report:
#   1. sections: speed of light, compute, memory, occupancy, launch, warp states;
#   2. metrics: DRAM bytes, the tensor pipes' activity, and every warp-stall reason
#      (smsp__average_warps_issue_stalled_*_per_issue_active: stalled warps per issued
#      instruction, by reason; they add up to "Warp Cycles Per Issued Instruction").
# Then one table, a row per mask: the kernel and its launch, duration, DRAM bytes and
# bandwidth, SM and memory throughput, the busiest tensor pipe, issue slots, occupancy, and
# the three largest stall reasons. Text reports in $OUT/ncu-sparse-*.txt, the table in
# $OUT/sparse_table.md. Firecracker machines only (KINDS.md: ncu reads no counters under
# gVisor); clocks left alone (--clock-control none, METHOD.md).
#
#   bash bench/profile_sparse.sh [BxS [MASKS [D [H]]]]
#   bash bench/profile_sparse.sh 16x4096 sliding,longformer,bigbird,document,causal_sliding 128 12
# Needs build-gpu/ (make gpu-build) carried along. About 7 s a mask at 16 x 4096 and 5 s at 8 x
# 1024 on an H200 (session 21, bench/results/s21/call1/prof128, prof64).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/attn_out}
shape=${1:-16x4096}
masks=${2:-dense,sliding,causal_sliding,longformer,bigbird,document}
D=${3:-128}
H=${4:-12}
mkdir -p "$OUT"
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
[ -x "$NCU" ] || { echo "profile_sparse: no ncu"; exit 1; }
[ -x build-gpu/bench_attention ] || { echo "profile_sparse: no build-gpu/bench_attention (make gpu-build)"; exit 1; }
export STOF_CACHE_DIR=${STOF_CACHE_DIR:-/tmp/stof-cache}
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section WarpStateStats"
metrics="regex:^(dram__bytes_(read|write)\.sum|sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
metrics+="|smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio)$"
kernels="regex:^stof_attn_(block|row)_fwd"
IFS=, read -ra ms <<< "$masks"
for m in "${ms[@]}"; do
  f="$OUT/ncu-sparse-$m-$shape-d$D"
  run=(build-gpu/bench_attention --shapes "$shape" --masks "$m" --heads "$H" --dim "$D" --reps 3 --check-rows 6)
  # the bench's checked run is launch 0, the warm-ups 1-5: profile launch 3
  timeout "${PROFILE_TIMEOUT:-240}" "$NCU" --clock-control none --target-processes all -k "$kernels" \
    --launch-skip 3 --launch-count 1 $sections "${run[@]}" > "$f.txt" 2>&1
  a=$?
  timeout "${PROFILE_TIMEOUT:-240}" "$NCU" --clock-control none --target-processes all -k "$kernels" \
    --launch-skip 3 --launch-count 1 --metrics "$metrics" "${run[@]}" > "$f.metrics.txt" 2>&1
  echo "profile_sparse: $m $shape D $D: sections rc=$a, metrics rc=$? -> $f.txt, $f.metrics.txt"
done
python3 - "$OUT" "$shape" "$D" "${ms[@]}" <<'PY' | tee "$OUT/sparse_table.md"
import re, sys
out, shape, D, masks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def values(path):
    """Metric name -> (unit, value) of an ncu text report (its first profiled kernel)."""
    got, kernel = {}, None
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return got, kernel
    for line in lines:
        k = re.match(r"^  (stof_attn_\w+) \((\d+), (\d+), (\d+)\)x\((\d+), \d+, \d+\)", line)
        if k and kernel is None:
            kernel = f"{k.group(1)} grid {int(k.group(2)) * int(k.group(3)) * int(k.group(4))} x {k.group(5)}"
        r = re.match(r"^\s{4}(\S.*?\S)\s{2,}(\S+)?\s+([-\d,.]+)$", line)
        if r and not r.group(1).startswith("-"):
            got.setdefault(r.group(1), (r.group(2) or "", float(r.group(3).replace(",", ""))))
    return got, kernel

def num(v, name, scale=1.0, fmt="%.1f"):
    return fmt % (v[name][1] * scale) if name in v else "-"

def dur_us(v):
    if "Duration" not in v: return None
    unit, x = v["Duration"]
    return x * {"ms": 1e3, "us": 1.0, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "nsecond": 1e-3}.get(unit, 1.0)

def gbytes(v, name):
    if name not in v: return None
    unit, x = v[name]
    return x * {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0, "Tbyte": 1e3}.get(unit, float("nan"))

print(f"Engine kernels at {shape}, D {D} (bench/profile_sparse.sh; one launch each, ncu, clocks left alone)\n")
print("| mask | kernel, grid x threads | us | DRAM GB | DRAM TB/s | SM % | mem % | tensor pipe % | issue % "
      "| occupancy % | stalls per issue (top 3) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for m in masks:
    base = f"{out}/ncu-sparse-{m}-{shape}-d{D}"
    s, kernel = values(base + ".txt")
    x, kernel2 = values(base + ".metrics.txt")
    us = dur_us(s)
    gb = [g for g in (gbytes(x, "dram__bytes_read.sum"), gbytes(x, "dram__bytes_write.sum")) if g is not None]
    gb = sum(gb) if gb else None
    tensor = [(v[1], k) for k, v in x.items() if k.startswith("sm__pipe_tensor_op_")]
    stalls = sorted(((v[1], k) for k, v in x.items() if k.startswith("smsp__average_warps_issue_stalled_")),
                    reverse=True)
    top = ", ".join("%s %.2f" % (re.sub(r"^smsp__average_warps_issue_stalled_|_per_issue_active\.ratio$", "", k), val)
                    for val, k in stalls[:3])
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        m, kernel or kernel2 or "(no report)", "%.1f" % us if us else "-", "%.3f" % gb if gb is not None else "-",
        "%.2f" % (gb / us * 1e3) if gb is not None and us else "-",
        num(s, "Compute (SM) Throughput"), num(s, "Memory Throughput"),
        "%.1f" % max(tensor)[0] if tensor else "-", num(s, "Issue Slots Busy"), num(s, "Achieved Occupancy"),
        top or "-"))
PY
