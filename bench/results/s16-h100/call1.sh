#!/bin/bash
# session 16 call 1: item 1 opcode profile; row kernel at T=32; GPU format tests + attention_mod
cd "$(dirname "$0")/../.." || exit 1
export ATTN_DEV_NOBUILD=1
O=$OUT
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/opc /tmp/c1
ATTN_PROFILE_TIMEOUT=110 OUT=/tmp/opc timeout 260 bash bench/profile_dense_opcodes.sh > /tmp/opc/summary.txt 2>&1
echo "opcodes rc=$? t=$(( $(date +%s) - t0 ))"
cat /tmp/opc/summary.txt
timeout 90 build-attn/attn_dev --odd --kernels row --cfg h64_t32_w2_s2,h128_t32_w2_s2 > /tmp/c1/row32.log 2>&1
echo "row32 rc=$? t=$(( $(date +%s) - t0 ))"; tail -5 /tmp/c1/row32.log
STOF_TEST_FILTER='*format*' timeout 120 build-gpu/tests/test_kernels_gpu > /tmp/c1/format.log 2>&1
echo "format rc=$? t=$(( $(date +%s) - t0 ))"; grep -E "PASSED|FAILED|differ" /tmp/c1/format.log | tail -5
OUT=/tmp/c1 GPU_CHECK_ONLY='^(gpu_attention_mod|lua_test_half.*|lua_test_m.*|lua_test_n.*|lua_test_p.*|lua_test_r.*|lua_test_s.*)$' timeout $(( 585 - ($(date +%s) - t0) )) bash scripts/gpu-check.sh > /tmp/c1/check.txt 2>&1
echo "check rc=$? t=$(( $(date +%s) - t0 ))"; cat /tmp/c1/check.txt
cd /tmp && tar czf $O/call1.tgz opc c1 2>/dev/null
