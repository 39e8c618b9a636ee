#!/bin/bash
# session 18 call 2: STOF_SM90_KEY64 (T = 128, two warpgroups sharing K/V, 64-key steps,
# 2 CTAs an SM) against the engine's D 64 dense kernel, cuDNN in the same call
cd "$(dirname "$0")/.."
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
B=build-attn/attn_dev
mkdir -p $OUT/r
# correctness first: the k64 kernel with mask code on the odd shapes (every suite mask,
# holes, per-head); the _np ones on dense at multiples of 128
timeout 150 $B --odd --cfg g64_t128_s2_k_m2_tma_k64 --kernels block --quiet > $OUT/r/odd.log 2>&1
echo "odd: rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/r/odd.log
timeout 60 $B --cfg g64_t128_s2_k_m2_tma_k64_np,g128_t128_s2_k_tma_k64_np --masks dense --shapes 1x128,2x512,1x1024,2x2048 --heads 4 --kernels block --notime --quiet > $OUT/r/np.log 2>&1
echo "np: rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/r/np.log
A=g64_t64_s2_k_m4_tma_np; K=g64_t128_s2_k_m2_tma_k64_np
timeout 150 $B --cfg $A,$K,$A,$K,$A,$K,$A,$K --masks dense --shapes 8x1024,16x2048,16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/r/d64.jsonl > $OUT/r/d64.log 2>&1
echo "d64: rc=$? $(( $(date +%s) - t0 )) s"
A=g64_t64_s2_k_m4_tma; K=g64_t128_s2_k_m2_tma_k64
timeout 120 $B --cfg $A,$K,$A,$K --masks causal,document,sliding --shapes 16x4096 --heads 12 --kernels block --nocheck --quiet --json $OUT/r/s64.jsonl > $OUT/r/s64.log 2>&1
echo "s64: rc=$? $(( $(date +%s) - t0 )) s"
A=g128_t128_s3_pp_tma_np; K=g128_t128_s2_k_tma_k64_np
timeout 100 $B --cfg $A,$K,$A,$K --masks dense --shapes 1x8192 --heads 32 --kernels block --nocheck --quiet --json $OUT/r/d128.jsonl > $OUT/r/d128.log 2>&1
echo "d128: rc=$? $(( $(date +%s) - t0 )) s"
timeout 120 python3 .peers/peers.py attn --shapes 8x1024,16x2048,16x4096 --masks dense --heads 12 --dim 64 > $OUT/r/peers64.jsonl 2>$OUT/r/peers.err
timeout 60 python3 .peers/peers.py attn --shapes 1x8192 --masks dense --heads 32 --dim 128 > $OUT/r/peers128.jsonl 2>>$OUT/r/peers.err
echo "peers: $(( $(date +%s) - t0 )) s"
grep -h cudnn $OUT/r/peers*.jsonl
cat $OUT/r/d64.log $OUT/r/s64.log $OUT/r/d128.log | grep '^TIME' | awk '{print $2, $3, $5, $7, $9}' | sort -k2,2 -k3,4 -k1,1 
cd $OUT && tar czf r.tgz r && rm -rf r
