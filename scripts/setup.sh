#!/usr/bin/env bash
# Installs what ngen's main job and test suite need on a fresh Debian machine.
# Idempotent: a second run installs nothing and takes a second or two.
set -euo pipefail

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
for p in build-essential libopenblas-dev libopenblas0-pthread libdnnl-dev dataset-fashion-mnist python3-torch python3-numpy nvidia-cuda-toolkit \
    libopenmpi-dev openmpi-bin graphviz \
    wamerican wngerman wfrench wspanish witalian fortunes; do
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
