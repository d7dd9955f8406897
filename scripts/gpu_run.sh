#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, what
# scripts/gpu_bundle.sh packed into .gpu:
#
#   bash .gpu/run.sh suite [go test flags]   the GPU suite (runtime/cuda)
#   bash .gpu/run.sh bench [flags]           bench's TestGPU against PyTorch on the GPU
#   bash .gpu/run.sh sanitize TOOL [flags]   the suite under compute-sanitizer
#                                            (memcheck, racecheck, synccheck)
set -uo pipefail
g=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$g/cuda.test" ]; then
  xz -d -T0 "$g"/*.xz "$g"/lib/*.xz && chmod +x "$g"/*.test
  for l in libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
    f=$(find / -xdev \( -name "$l" -o -name "$l.*" \) 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" "$g/lib/$l"
  done
  mkdir -p /usr/share/datasets/fashion-mnist && cp "$g"/fmnist/* /usr/share/datasets/fashion-mnist/
fi
export LD_LIBRARY_PATH="$g/lib:${LD_LIBRARY_PATH:-}"
export NGEN_PYTHON=${NGEN_PYTHON:-$(command -v python3)}
what=$1; shift
case $what in
  suite) cd "$g" && exec "$g/cuda.test" -test.v "$@" ;;
  bench) cd "$g" && exec "$g/bench.test" -test.run 'TestGPU$' -test.v "$@" ;;
  sanitize) tool=$1; shift; cd "$g" && exec compute-sanitizer --tool "$tool" --error-exitcode 9 "$g/cuda.test" -test.v "$@" ;;
  *) echo "usage: run.sh suite|bench|sanitize TOOL ..."; exit 2 ;;
esac
