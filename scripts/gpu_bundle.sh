#!/usr/bin/env bash
# Packs the GPU test binaries for a lent GPU machine that has no Go and a
# newer CUDA (cuBLAS and NVRTC 13) than Debian's 11.8.
#
#   bash scripts/gpu_bundle.sh [dir]     (default .gpu, which git ignores)
#
# The binaries are linked against stub libcublas/libnvrtc that carry the
# 13 sonames and no symbol versions, so on the GPU machine they bind to its
# cuBLAS and NVRTC (the v2 BLAS and NVRTC calls ngen makes have the same C
# ABI in 11 and 13). Debian's OpenBLAS and oneDNN, which the CPU backend
# links, travel beside them, as do the cmd/train binary and Fashion-MNIST
# (all of it, xz-compressed: the 5-epoch training run needs every image).
# The binaries are stripped (-s -w) and xz-compressed; the bundle must
# stay within 64 MiB, what one device call can carry, and the script
# fails otherwise. On the GPU machine:
#
#   bash .gpu/run.sh all|suite|bench|compile|train ...
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu}
# A worktree's .git is a file: ask git where its exclude file is.
excl=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$excl")"
grep -qx '/.gpu/' "$excl" 2>/dev/null || echo '/.gpu/' >> "$excl"
rm -rf "$out" && mkdir -p "$out/lib" "$out/fmnist"
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT

# Stubs: every cuBLAS and NVRTC symbol the binaries reference, unversioned.
syms() { nm -D --undefined-only "$@" | awk '{print $2}' | sed 's/@.*//' | sort -u; }
go test -tags cuda -c -o "$stub/probe.test" ./runtime/cuda
go test -tags cuda -c -o "$stub/bench.test" ./bench
for lib in cublas:libcublas.so.13 nvrtc:libnvrtc.so.13; do
  pre=${lib%%:*} so=${lib#*:}
  syms "$stub/probe.test" "$stub/bench.test" | grep "^$pre" | sed 's/.*/void &(void) {}/' > "$stub/$pre.c"
  gcc -shared -fPIC -Wl,-soname,"$so" -o "$stub/lib$pre.so" "$stub/$pre.c"
done
# Only the final link sees the stubs, through a linker wrapper that swaps
# -lcublas and -lnvrtc for them (gorgonia.org/cu names the system library
# directory with -L itself, so a -L of ours would come too late). The cgo
# packages' build cache stays valid: CGO_LDFLAGS would rebuild every
# generated package's glue.
cat > "$stub/cc" <<SH
#!/bin/sh
for a in "\$@"; do
  case "\$a" in
    -lcublas) set -- "\$@" "$stub/libcublas.so" ;;
    -lnvrtc) set -- "\$@" "$stub/libnvrtc.so" ;;
    *) set -- "\$@" "\$a" ;;
  esac
  shift
done
exec g++ "\$@"
SH
chmod +x "$stub/cc"
go test -tags cuda -c -ldflags="-s -w -extld=$stub/cc" -o "$out/cuda.test" ./runtime/cuda
go test -tags cuda -c -ldflags="-s -w -extld=$stub/cc" -o "$out/bench.test" ./bench
go build -tags cuda -ldflags="-s -w -extld=$stub/cc" -o "$out/train" ./cmd/train
for b in cuda.test bench.test train; do
  if readelf -d "$out/$b" | grep -q 'libcublas.so.11\|libnvrtc.so.11'; then echo "$b still needs CUDA 11 libraries"; exit 1; fi
done
cp bench/*.py "$out/"
for l in libopenblas.so.0 libdnnl.so.2 libgfortran.so.5 libquadmath.so.0 libOpenCL.so.1 libgomp.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$out/lib/"
done
# Fashion-MNIST as raw IDX, xz-compressed (smaller than the .gz files);
# run.sh turns them back into the .gz files the loaders read.
for f in /usr/share/datasets/fashion-mnist/*.gz; do
  gzip -dc "$f" > "$out/fmnist/$(basename "$f" .gz)"
done
xz -T2 -9 "$out/cuda.test" "$out/bench.test" "$out/train" "$out"/lib/* "$out"/fmnist/*
cp scripts/gpu_run.sh "$out/run.sh"
size=$(du -sb "$out" | cut -f1)
echo "bundle: $out, $size bytes"
if [ "$size" -gt $((64 << 20)) ]; then echo "bundle exceeds 64 MiB"; exit 1; fi
