#!/usr/bin/env bash
# Installs what ngen needs on a fresh Debian machine. Idempotent: a second
# run installs nothing and takes a second or two.
#
#   bash scripts/setup.sh train   what cmd/train needs (the README's main job):
#                                 CA certificates (for go's module downloads),
#                                 the C++ compiler and pkg-config, OpenBLAS,
#                                 oneDNN, OpenMPI,
#                                 Fashion-MNIST and the text corpora
#   bash scripts/setup.sh         all of that, and what the test suite needs
#                                 besides: PyTorch (the oracle), the CUDA
#                                 toolkit (nvcc, NVRTC, cuBLAS) and graphviz
set -euo pipefail

train=(ca-certificates build-essential pkg-config libopenblas-dev libopenblas0-pthread libdnnl-dev dataset-fashion-mnist
  libopenmpi-dev openmpi-bin wamerican wngerman wfrench wspanish witalian fortunes)
case "${1:-all}" in
train) want=("${train[@]}") ;;
all) want=("${train[@]}" python3-torch python3-numpy nvidia-cuda-toolkit graphviz) ;;
*)
  echo "usage: $0 [train|all]" >&2
  exit 2
  ;;
esac

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
for p in "${want[@]}"; do
  have "$p" || need+=("$p")
done
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

# The CUDA toolkit lives in Debian's non-free component: add it to the existing
# sources file (no mirror address is written anywhere).
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ] && ! grep -q '^Components:.*non-free' "$src"; then
  sed -i -E '/^Components:/{/non-free/!s/$/ contrib non-free/}' "$src"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
