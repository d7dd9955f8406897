#!/usr/bin/env bash
# Runs on the lent GPU machine, from the repository root, what
# scripts/gpu_bundle.sh packed into .gpu:
#
#   bash .gpu/run.sh all [OUT]               everything below, in order, each
#                                            part's output appended to OUT
#                                            (default .gpu/results.txt), to
#                                            paste into docs/PERF.md
#   bash .gpu/run.sh suite [go test flags]   the GPU suite (runtime/cuda)
#   bash .gpu/run.sh bench [flags]           bench's TestGPU and TestGPUSeq:
#                                            ngen against PyTorch eager
#   bash .gpu/run.sh amp [flags]             bench's TestGPUAMP: bf16 and fp16
#                                            builds against ngen's f32 step and
#                                            PyTorch's autocast step
#   bash .gpu/run.sh compile                 PyTorch's step under torch.compile,
#                                            default and reduce-overhead modes,
#                                            compile and warm-up timed apart
#   bash .gpu/run.sh train [EPOCHS]          cmd/train -device cuda -model mlp,
#                                            then bench/torch_train.py --device cuda
#   bash .gpu/run.sh sanitize TOOL [flags]   the suite under compute-sanitizer
#                                            (memcheck, racecheck, synccheck)
set -uo pipefail
g=$(cd "$(dirname "$0")" && pwd)
data=${NGEN_FMNIST_DIR:-/usr/share/datasets/fashion-mnist} # where train and the PyTorch peers look by default
if [ ! -x "$g/cuda.test" ]; then
  xz -dc "$g/bin.tar.xz" | tar -C "$g" -xf - && chmod +x "$g"/*.test "$g/train" || exit 1
  for l in libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
    f=$(find / -xdev \( -name "$l" -o -name "$l.*" \) 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" "$g/lib/$l"
  done
fi
# Fashion-MNIST: the first part's files, then the whole training set from
# .gpudata when a call carried it (scripts/gpu_bundle.sh), each once.
mkdir -p "$data"
for d in "$g/fmnist" "$g/../.gpudata"; do
  [ -d "$d" ] && [ ! -e "$d/.unpacked" ] || continue
  for f in "$d"/*-ubyte.xz; do [ -e "$f" ] && xz -dc "$f" | gzip -1 > "$data/$(basename "$f" .xz).gz"; done
  touch "$d/.unpacked"
done
export LD_LIBRARY_PATH="$g/lib:${LD_LIBRARY_PATH:-}"
export NGEN_PYTHON=${NGEN_PYTHON:-$(command -v python3)}

# compile: PyTorch's training step of each benchmark model, eager and under
# torch.compile; warmup_s (in the JSON) is the compile and warm-up steps.
compile_peers() {
  cd "$g" || return 1
  # Most wanted first (issue 26's targets: the small models against
  # reduce-overhead, the Transformers against the default mode), each run
  # capped at 75 s, compile included. NGEN_COMPILE_FROM=N starts at the
  # list's Nth line (a later call going on where an earlier one stopped).
  local n=0
  while read -r mode m; do
    n=$((n + 1)); [ "$n" -lt "${NGEN_COMPILE_FROM:-1}" ] && continue
    echo "torch.compile=$mode --model $m"
    # shellcheck disable=SC2086
    timeout -k 5 75 "$NGEN_PYTHON" "$g/torch_step.py" --device cuda --steps 30 --warmup 5 --compile "$mode" --model $m 2>&1 | tail -3
  done <<EOF
reduce-overhead mlp --batch 128 --layers 1024,2048,512,10
reduce-overhead convnet --batch 64 --data $data
default gpt --batch 16 --vocab 99 --seq 128
default transformer --batch 16 --vocab 99 --seq 64
reduce-overhead mlp --batch 64 --layers 784,512,256,10 --dropout 0.2 --data $data
reduce-overhead gpt --batch 16 --vocab 99 --seq 128
reduce-overhead transformer --batch 16 --vocab 99 --seq 64
default lstmbench --batch 32 --vocab 99 --seq 64
reduce-overhead convnet_bn --batch 64 --data $data
default mlp --batch 128 --layers 1024,2048,512,10
default convnet --batch 64 --data $data
EOF
}

# train: the seed MLP for EPOCHS on the GPU, ngen then PyTorch.
train_peers() {
  local epochs=${1:-5}
  cd "$g" || return 1
  echo "ngen: train -device cuda -model mlp -epochs $epochs (pipelined steps: -pipeline auto)"
  if ! "$g/train" -device cuda -model mlp -epochs "$epochs" -quiet; then
    # Pipelined steps have not run on a GPU before: keep the window's
    # run with the synchronous steps that have.
    echo "ngen: the pipelined run failed; again with -pipeline off"
    "$g/train" -device cuda -model mlp -epochs "$epochs" -quiet -pipeline off
  fi
  echo "PyTorch: torch_train.py --device cuda --model mlp --epochs $epochs"
  "$NGEN_PYTHON" "$g/torch_train.py" --device cuda --model mlp --epochs "$epochs"
}

what=${1:-}; [ $# -gt 0 ] && shift
case $what in
  # The suite runs where go test would, in runtime/cuda of the working
  # tree that travels with the call (its tests read ../../generated).
  suite) cd "$g/../runtime/cuda" 2>/dev/null || cd "$g"; exec "$g/cuda.test" -test.v "$@" ;;
  bench) cd "$g" && exec "$g/bench.test" -test.run 'TestGPU$|TestGPUSeq' -test.v "$@" -bench -steps 30 ;;
  amp) cd "$g" && exec "$g/bench.test" -test.run 'TestGPUAMP' -test.v "$@" -bench -steps 30 ;;
  compile) compile_peers ;;
  train) train_peers "$@" ;;
  sanitize) tool=$1; shift; cd "$g/../runtime/cuda" 2>/dev/null || cd "$g"; exec compute-sanitizer --tool "$tool" --error-exitcode 9 "$g/cuda.test" -test.v "$@" ;;
  all)
    # Everything, most wanted first, within a deadline (seconds, default
    # 420; NGEN_GPU_DEADLINE): each part gets its own limit or what is
    # left, whichever is less, so a part that hangs costs only its share
    # of the lease and the parts before it are already in OUT.
    out=${1:-$g/results.txt}
    deadline=$((SECONDS + ${NGEN_GPU_DEADLINE:-420}))
    part() {
      local name=$1 lim=$2; shift 2
      local left=$((deadline - SECONDS))
      [ "$left" -lt "$lim" ] && lim=$left
      echo; echo "## $name (limit ${lim} s)"
      if [ "$lim" -le 5 ]; then echo "(skipped: the deadline has passed)"; return; fi
      local t0=$SECONDS
      timeout -k 5 "$lim" bash "$g/run.sh" "$@" 2>&1
      echo "($name: exit $?, $((SECONDS - t0)) s)"
    }
    {
      echo "# GPU run, $(date -u +%FT%TZ)"
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
      "$NGEN_PYTHON" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1
      part "ngen against PyTorch eager" 200 bench
      part "mixed precision: ngen's bf16 and fp16 builds against f32 and PyTorch's autocast" 150 amp
      if [ -d "$g/../.gpudata" ]; then part "5 epochs of the seed MLP" 90 train 5
      else echo; echo "## 5 epochs of the seed MLP: not run (only 1024 training samples here: a call carrying .gpudata runs it)"; fi
      part "GPU suite" 150 suite
      part "PyTorch under torch.compile" 300 compile
    } 2>&1 | tee -a "$out"
    ;;
  *) echo "usage: run.sh all|suite|bench|amp|compile|train|sanitize TOOL ..."; exit 2 ;;
esac
