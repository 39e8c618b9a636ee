#!/bin/bash
# session 24 call 1: the tile-32 kernel's software pipeline (STOF_PIPE: tile i + 1's
# S = Q K^T beside tile i's softmax and P V) and the lazy rescale (STOF_LAZY_RESCALE, both
# kernels), through attn_dev (carried, built with nvcc for sm_90a): correctness on the odd
# shapes against float64 first, then time in one process, each list run twice, interleaved.
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
mkdir -p $OUT/x
BIN=build-attn/attn_dev
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/x/gpu.txt 2>&1
T32="h64_t32_w2_s2,h64_t32_w2_s2_lz,h64_t32_w2_s3_pp,h64_t32_w2_s3_pp_lz,h64_t32_w2_s4_pp,h64_t32_w2_s3_pp_m7,h64_t32_w1_s2,h128_t32_w2_s2,h128_t32_w2_s2_lz,h128_t32_w2_s3_pp,h128_t32_w2_s3_pp_lz"
G="g64_t64_s2_k_m4_tma_rm,g64_t64_s2_k_m4_tma_rm_lz,g64_t64_s2_k_m4_tma_hs_rm_lz,g128_t64_s2_rm_m3,g128_t64_s2_rm_m3_lz,g128_t128_s3_pp_tma_rm,g128_t128_s3_pp_tma_rm_lz"
timeout 200 $BIN --odd --quiet --cfg "$T32,$G" --kernels block \
  --masks dense,causal,sliding,causal_sliding,longformer,bigbird,document,hole,perhead,dilated > $OUT/x/odd.log 2>&1
echo "odd rc=$? $(( $(date +%s) - t0 )) s"
grep -E "FAIL|ALL PASS|FAILED|rror" $OUT/x/odd.log | head -12
if grep -q "ALL PASS" $OUT/x/odd.log; then
  B64="h64_t32_w2_s2,h64_t32_w2_s2_lz,h64_t32_w2_s3_pp,h64_t32_w2_s3_pp_lz,h64_t32_w2_s4_pp,h64_t32_w2_s3_pp_m7,h64_t32_w1_s2"
  B128="h128_t32_w2_s2,h128_t32_w2_s2_lz,h128_t32_w2_s3_pp,h128_t32_w2_s3_pp_lz"
  timeout 120 $BIN --cfg "$B64,$B64" --masks bigbird --shapes 16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/x/t.jsonl > $OUT/x/t64.log 2>&1
  echo "t32 D64 rc=$? $(( $(date +%s) - t0 )) s"
  timeout 120 $BIN --cfg "$B128,$B128" --masks bigbird --shapes 16x2048,16x4096,1x32768 --heads 12 --kernels block --nocheck --quiet --json $OUT/x/t.jsonl > $OUT/x/t128.log 2>&1
  echo "t32 D128 rc=$? $(( $(date +%s) - t0 )) s"
  G64="g64_t64_s2_k_m4_tma_rm,g64_t64_s2_k_m4_tma_rm_lz"
  timeout 120 $BIN --cfg "$G64,$G64" --masks sliding,causal_sliding,longformer,document,causal --shapes 8x1024,16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/x/t.jsonl > $OUT/x/g64.log 2>&1
  echo "g64 rc=$? $(( $(date +%s) - t0 )) s"
  G128="g128_t64_s2_rm_m3,g128_t64_s2_rm_m3_lz"
  timeout 120 $BIN --cfg "$G128,$G128" --masks sliding,causal_sliding,longformer,document --shapes 8x1024,16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/x/t.jsonl > $OUT/x/g128.log 2>&1
  echo "g128 rc=$? $(( $(date +%s) - t0 )) s"
  GP="g128_t128_s3_pp_tma_rm,g128_t128_s3_pp_tma_rm_lz"
  timeout 100 $BIN --cfg "$GP,$GP" --masks dense,causal,document --shapes 8x1024,16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/x/t.jsonl > $OUT/x/gpp.log 2>&1
  echo "gpp rc=$? $(( $(date +%s) - t0 )) s"
  python3 - $OUT/x/t.jsonl <<'PY'
import json, sys, collections
t = collections.OrderedDict()
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["ms"] <= 0: continue
    k = (d["mask"], d["B"], d["H"], d["Sq"], d["D"])
    t.setdefault(k, collections.OrderedDict()).setdefault(d["cfg"], []).append(d["ms"])
for k, v in t.items():
    cs = list(v)
    base = sum(v[cs[0]]) / len(v[cs[0]])
    print("%-15s %dx%d/%d D%d" % (k[0], k[1], k[3], k[2], k[4]))
    for c in cs:
        m = sum(v[c]) / len(v[c])
        print("   %-30s %8.4f ms  %.3fx  (%s)" % (c, m, m / base, " ".join("%.4f" % x for x in v[c])))
PY
fi
cd $OUT && tar czf r.tgz x && rm -rf x
