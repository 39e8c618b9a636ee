#!/bin/bash
# session 21 call 4: bench/attn_ab_d64_m5.sh (D 64 tile 64 with cp.async at four and five CTAs an
# SM against the engine's TMA kernels)
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
mkdir -p $OUT/m5
ATTN_DEV_NOBUILD=1 OUT=$OUT/m5 timeout 400 bash bench/attn_ab_d64_m5.sh 2>&1 | tail -100
echo "done $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf r.tgz m5 && rm -rf m5
