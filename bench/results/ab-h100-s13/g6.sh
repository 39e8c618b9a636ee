#!/bin/bash
# session 13, call 6: Hugging Face parity after this session's engine changes (the selector's
# ROWMASK/HALFSKIP variants run inside the models' BigBird attention), then where longformer's
# and bigbird's long-context time goes: the D 128 configurations of attn_dev at 1 x 32768
set -u
t0=$(date +%s)
timeout 300 python3 bench/hf_compare.py --ref32 --out /tmp/hf-out > $OUT/hf.log 2>&1; echo "hf rc=$? $(( $(date +%s) - t0 )) s"
grep -E '^\{' $OUT/hf.log | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get('kind')=='hf_parity': print(d['model'], d['mask'], d['max_rel_l2'])"
ATTN_DEV_NONVRTC=1 OUT=/tmp/ab bash bench/attn_dev.sh > /tmp/b.txt 2>&1 || tail -5 /tmp/b.txt
C=g128_t64_s2,g128_t64_s2_rm,g128_t64_s2_hs_rm,g128_t64_s2_tma,g128_t64_s2_tma_rm,g128_t64_s3_o,g128_t128_s3_pp_tma,g128_t128_s3_pp_tma_rm
timeout 200 build-attn/attn_dev --cfg $C --masks longformer,bigbird,sliding --shapes 1x32768 --heads 32 --kernels block --nocheck --quiet --json $OUT/d128-long.jsonl > /tmp/t.log 2>&1
echo "attn_dev rc $? $(( $(date +%s) - t0 )) s"
grep -E "rror|FAIL" /tmp/t.log | head -3
