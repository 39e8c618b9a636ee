# Sourced by bench/attn_ab_*.sh from the repository root, with the default seconds per
# attn_dev run as $1: OUT made (/tmp/attn_out unless set), BIN (build-attn/attn_dev), T
# (ATTN_DEV_TIMEOUT, else $1), t0 (the start, for elapsed times), and attn_dev built by
# bench/attn_dev.sh without its NVRTC pass (ATTN_DEV_NOBUILD=1 reuses the binary); exits 1
# if the build fails.
OUT=${OUT:-/tmp/attn_out}
mkdir -p "$OUT"
BIN=build-attn/attn_dev
T=${ATTN_DEV_TIMEOUT:-$1}
t0=$(date +%s)
ATTN_DEV_NONVRTC=1 OUT="$OUT" bash bench/attn_dev.sh || exit 1
