#!/bin/bash
# session 20 call 3: does the timing protocol (GPU clocks under sustained load) explain stof's
# dense D 128 gap to cuDNN at 16 x 2048 (0.89x in bench/run-gpu.sh; 0.96x in ncu's cycles)?
cd "$(dirname "$0")/.."
t0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi -q -d POWER | grep -iE "limit|draw" | head -8
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 20 > $OUT/r/smi.csv &
ps=$!
mark() { echo "MARK $(date +%H:%M:%S.%N | cut -c1-12) $*" | tee -a $OUT/r/marks.txt; }
B=build-gpu/bench_attention
for w in 0 100 3000; do
  sleep 2; mark "stof warm-ms $w"
  $B --shapes 16x2048 --masks dense --heads 12 --dim 128 --warm-ms $w --check-rows 1 --out $OUT/r/stof_w$w.jsonl 2>&1 | grep -E "dense" | tail -1
  mark end
done
sleep 2; mark cudnn-probe
python3 bench/power_probe.py 16 12 2048 128 | tee $OUT/r/probe.txt
mark end
sleep 2; mark peers
python3 .peers/peers.py attn --shapes 16x2048 --masks dense --heads 12 --dim 128 --out $OUT/r/peers.jsonl > /dev/null 2>&1
mark end
sleep 2; mark attn_dev
timeout 60 build-attn/attn_dev --cfg g128_t128_s3_pp_tma_np --masks dense --shapes 16x2048 --heads 12 --kernels block --nocheck --quiet | grep TIME
mark end
kill $ps
python3 - $OUT/r/peers.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l); print({k:d[k] for k in d if k in ("impl","peer","mask","ms","time_ms","B","S")})
PY
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz r && rm -rf r
