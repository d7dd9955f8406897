#!/usr/bin/env bash
# Measures what the build costs on this machine (docs/PERF.md, "Build and
# test cost"):
#
#   bash scripts/build_cost.sh host     g++ on every generated package's host
#                                       glue, one at a time, as cgo compiles it
#   bash scripts/build_cost.sh train    go build ./cmd/train with an empty Go
#                                       build cache (the main job's build)
#   bash scripts/build_cost.sh all      both
#
# Prints wall and CPU seconds per item and the totals, and the load average
# before and after: timings taken under load are not the machine's.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
what=${1:-all}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(grep -o -m1 'avx512[a-z]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"

# timed LABEL CMD...: runs CMD, prints wall, user+sys seconds.
timed() {
  local label=$1
  shift
  local t0 t1 c0 c1
  t0=$(date +%s.%N)
  c0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  "$@"
  t1=$(date +%s.%N)
  c1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  local hz
  hz=$(getconf CLK_TCK)
  printf '%-28s wall %7.1f s   cpu %7.1f s\n' "$label" "$(echo "$t1 - $t0" | bc)" "$(echo "($c1 - $c0) / $hz" | bc -l)"
}

if [ "$what" = host ] || [ "$what" = all ]; then
  echo "== g++ -std=c++17 -O3 on each generated/*/host/host.cc (cgo's flags)"
  start=$(date +%s.%N)
  for d in generated/*/host; do
    pkg=$(basename "$(dirname "$d")")
    timed "$pkg" g++ -std=c++17 -O3 -Igenerated -c "$d/host.cc" -o "$tmp/host.o"
  done
  printf '%-28s wall %7.1f s\n' "all packages, one at a time" "$(echo "$(date +%s.%N) - $start" | bc)"
fi

if [ "$what" = train ] || [ "$what" = all ]; then
  echo "== go build ./cmd/train with an empty build cache (GOCACHE=$tmp/gocache)"
  timed "go build ./cmd/train" env GOCACHE="$tmp/gocache" go build -o "$tmp/train" ./cmd/train
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
