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
# links, travel beside them, as do the cmd/train binary and Fashion-MNIST.
# The binaries are stripped (-s -w) and packed, with the libraries, into
# one xz archive. A device call carries the working tree (about 20 MB of
# tracked files) and at most 64 MiB in all, so the bundle comes in two
# parts, each checked to fit beside the tree: .gpu (the binaries, the
# peers' scripts, the test set and the first 1024 training samples) and
# .gpudata (the whole training set, for the 5-epoch run). On the GPU
# machine, a first call carrying .gpu and a second, while the machine is
# still warm (the first's unpacked .gpu stays there), carrying .gpudata:
#
#   bash .gpu/run.sh all|suite|bench|compile|train ...
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu}
# A worktree's .git is a file: ask git where its exclude file is.
excl=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$excl")"
grep -qx '/.gpu/' "$excl" 2>/dev/null || echo '/.gpu/' >> "$excl"
rm -rf "$out" && mkdir -p "$out/fmnist"
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
bins=$(mktemp -d)
mv "$out/cuda.test" "$out/bench.test" "$out/train" "$bins/"
mkdir -p "$bins/lib"
for l in libopenblas.so.0 libdnnl.so.2 libgfortran.so.5 libquadmath.so.0 libOpenCL.so.1 libgomp.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$bins/lib/"
done
# One solid archive: the three binaries share most of their bytes (the Go
# runtime, every generated package), which xz finds only across files.
tar -C "$bins" -cf - . | xz -T2 -9e > "$out/bin.tar.xz"
rm -rf "$bins" "$out/lib"
# Fashion-MNIST as raw IDX, xz-compressed (smaller than the .gz files);
# run.sh turns them back into the .gz files the loaders read. The first
# part holds the test set and the first 1024 training samples (what the
# benchmark's image cases step on); the whole training set, which the
# 5-epoch run needs, is the second part (.gpudata), since both would not
# fit one call beside the working tree.
data=${out%/}data
rm -rf "$data" && mkdir -p "$data"
grep -qx "/$(basename "$data")/" "$excl" || echo "/$(basename "$data")/" >> "$excl"
src=/usr/share/datasets/fashion-mnist
for f in t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do gzip -dc "$src/$f.gz" > "$out/fmnist/$f"; done
for f in train-images-idx3-ubyte train-labels-idx1-ubyte; do gzip -dc "$src/$f.gz" > "$data/$f"; done
# IDX: 4-byte magic, then big-endian dimensions; the first is the count.
head1024() { # file, bytes per sample, header bytes
  { head -c 4 "$1"; printf '\x00\x00\x04\x00'; dd if="$1" iflag=skip_bytes,count_bytes skip=8 count=$(($3 - 8 + 1024 * $2)) status=none; } > "$out/fmnist/$(basename "$1")"
}
head1024 "$data/train-images-idx3-ubyte" 784 16
head1024 "$data/train-labels-idx1-ubyte" 1 8
xz -T2 -9 "$out"/fmnist/* "$data"/*
cp scripts/gpu_run.sh "$out/run.sh"
# What one call carries is the working tree (tracked files) and the
# carried folder: each part must fit beside the tree.
tree=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
for d in "$out" "$data"; do
  size=$(du -sb "$d" | cut -f1)
  echo "bundle part: $d, $size bytes; with the working tree ($tree bytes) $((size + tree))"
  if [ $((size + tree)) -gt $((64 << 20)) ]; then echo "$d and the working tree exceed 64 MiB"; exit 1; fi
done
