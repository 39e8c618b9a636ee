# Sourced by bench/profile_dense_cudnn.sh and bench/profile_dense_opcodes.sh (from the
# repository root) with their arguments: CFG [BxS [H [D]]] (defaults g64_t64_s2_k_m4_tma,
# 16x4096, 12, 64) into cfg, shape, B, S, H, D; OUT made; NCU found (else exit 1, naming
# the caller, $1 of profile_need_ncu). cuDNN's side runs bench/sdpa_cudnn_launch.py B H S D.
OUT=${OUT:-/tmp/attn_out}
cfg=${1:-g64_t64_s2_k_m4_tma}
shape=${2:-16x4096}
H=${3:-12}
D=${4:-64}
B=${shape%x*}
S=${shape#*x}
mkdir -p "$OUT"
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
profile_need_ncu() { [ -x "$NCU" ] || { echo "$1: no ncu"; exit 1; }; }
