#!/usr/bin/env bash
# Installs the Debian packages stof builds with, when missing. Needs root (or sudo).
# The CUDA toolkit (nvcc, NVRTC) is expected to be installed already. clang with its runtime
# libraries (libclang-rt-14-dev: libFuzzer, ASan, UBSan; only recommended by clang, which
# --no-install-recommends skips) builds the fuzz targets (make fuzz).
set -euo pipefail
pkgs=(build-essential cmake pkg-config liblua5.4-dev lua5.4 libffi-dev libcmocka-dev libjansson-dev clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: nvcc is not on PATH; the Makefile adds /usr/local/cuda/bin"
fi
