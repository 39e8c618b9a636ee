#!/bin/bash
# session 15 call F: item 1, whether the clock differs under sustained load: stof's dense
# kernel and cuDNN's SDPA each run ~6 s back to back while nvidia-smi samples SM clock and power
set -u
cd "$(dirname "$0")/../.." || exit 1
cat > /tmp/sdpa_loop.py <<'PY'
import sys, time, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
B, H, S, D, secs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
torch.manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(5): torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 0; t0 = time.time(); e0.record()
    while time.time() - t0 < secs:
        for _ in range(20): torch.nn.functional.scaled_dot_product_attention(q, k, v)
        n += 20
        torch.cuda.synchronize()
    e1.record(); torch.cuda.synchronize()
    print("cudnn %dx%dx%d D%d: %d calls, %.4f ms each" % (B, H, S, D, n, e0.elapsed_time(e1) / n))
PY
sample() { nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 200 > $OUT/smi-$1.csv & echo $!; }
for shape in "16 12 4096 64 4000" "1 32 8192 128 4000"; do
  set -- $shape
  p=$(sample stof-$3-$4); sleep 0.5
  timeout 60 build-gpu/bench_attention --shapes ${1}x$3 --heads $2 --dim $4 --masks dense --reps $5 --out $OUT/stof-$3-$4.jsonl 2>&1 | grep -E "^dense" 
  kill $p; sleep 1
  p=$(sample cudnn-$3-$4); sleep 0.5
  timeout 60 python3 /tmp/sdpa_loop.py $1 $2 $3 $4 7
  kill $p; sleep 1
done
for f in $OUT/smi-*.csv; do awk -F', ' -v n=$(basename $f) '$2+0 > 200 { c += $1; p += $2; k++ } END { printf "%-22s busy samples %d  mean SM clock %.0f MHz  mean power %.0f W\n", n, k, c / k, p / k }' $f; done
