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
# links, travel beside them, as does a 1000-image cut of Fashion-MNIST for
# the benchmarks that step on real images. On the GPU machine:
#
#   bash .gpu/run.sh suite|bench ...
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
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
go test -tags cuda -c -ldflags="-extld=$stub/cc" -o "$out/cuda.test" ./runtime/cuda
go test -tags cuda -c -ldflags="-extld=$stub/cc" -o "$out/bench.test" ./bench
for b in cuda.test bench.test; do
  if readelf -d "$out/$b" | grep -q 'libcublas.so.11\|libnvrtc.so.11'; then echo "$b still needs CUDA 11 libraries"; exit 1; fi
done
cp bench/*.py "$out/"
for l in libopenblas.so.0 libdnnl.so.2 libgfortran.so.5 libquadmath.so.0 libOpenCL.so.1 libgomp.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$out/lib/"
done
# The first 1000 training and test images (IDX header count rewritten).
python3 - "$out/fmnist" <<'PY'
import gzip, struct, sys, os
src = "/usr/share/datasets/fashion-mnist"
for name in os.listdir(src):
    raw = gzip.open(os.path.join(src, name)).read()
    magic, n = struct.unpack(">II", raw[:8])
    dims = magic & 0xff
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    per = 1
    for d in shape[1:]:
        per *= d
    k = min(n, 1000)
    hdr = raw[:4] + struct.pack(">I", k) + raw[8:4 + 4 * dims]
    body = raw[4 + 4 * dims:4 + 4 * dims + k * per]
    with gzip.open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(hdr + body)
PY
xz -T2 -6 "$out/cuda.test" "$out/bench.test" "$out"/lib/*
cp scripts/gpu_run.sh "$out/run.sh"
du -sh "$out"
