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
  xz -d -T0 "$g"/*.xz "$g"/lib/*.xz "$g"/fmnist/*.xz && chmod +x "$g"/*.test "$g/train"
  for l in libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
    f=$(find / -xdev \( -name "$l" -o -name "$l.*" \) 2>/dev/null | head -1)
    [ -n "$f" ] && ln -sf "$f" "$g/lib/$l"
  done
  mkdir -p "$data"
  for f in "$g"/fmnist/*-ubyte; do gzip -1 -c "$f" > "$data/$(basename "$f").gz"; done
fi
export LD_LIBRARY_PATH="$g/lib:${LD_LIBRARY_PATH:-}"
export NGEN_PYTHON=${NGEN_PYTHON:-$(command -v python3)}

# compile: PyTorch's training step of each benchmark model, eager and under
# torch.compile; warmup_s (in the JSON) is the compile and warm-up steps.
compile_peers() {
  cd "$g" || return 1
  for mode in none default reduce-overhead; do
    for m in "mlp --batch 128 --layers 1024,2048,512,10" \
             "mlp --batch 64 --layers 784,512,256,10 --dropout 0.2 --data $data" \
             "convnet --batch 64 --data $data" "convnet_bn --batch 64 --data $data" \
             "lstmbench --batch 32 --vocab 99 --seq 64" "gpt --batch 16 --vocab 99 --seq 128" \
             "transformer --batch 16 --vocab 99 --seq 64"; do
      echo "torch.compile=$mode --model $m"
      # shellcheck disable=SC2086
      "$NGEN_PYTHON" "$g/torch_step.py" --device cuda --steps 30 --warmup 5 --compile "$mode" --model $m 2>&1 | tail -3
    done
  done
}

# train: the seed MLP for EPOCHS on the GPU, ngen then PyTorch.
train_peers() {
  local epochs=${1:-5}
  cd "$g" || return 1
  echo "ngen: train -device cuda -model mlp -epochs $epochs"
  "$g/train" -device cuda -model mlp -epochs "$epochs" -quiet
  echo "PyTorch: torch_train.py --device cuda --model mlp --epochs $epochs"
  "$NGEN_PYTHON" "$g/torch_train.py" --device cuda --model mlp --epochs "$epochs"
}

what=${1:-}; [ $# -gt 0 ] && shift
case $what in
  suite) cd "$g" && exec "$g/cuda.test" -test.v "$@" ;;
  bench) cd "$g" && exec "$g/bench.test" -test.run 'TestGPU$|TestGPUSeq' -test.v "$@" -bench -steps 30 ;;
  compile) compile_peers ;;
  train) train_peers "$@" ;;
  sanitize) tool=$1; shift; cd "$g" && exec compute-sanitizer --tool "$tool" --error-exitcode 9 "$g/cuda.test" -test.v "$@" ;;
  all)
    out=${1:-$g/results.txt}
    {
      echo "# GPU run, $(date -u +%FT%TZ)"
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
      "$NGEN_PYTHON" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1
      echo; echo "## GPU suite"; (cd "$g" && "$g/cuda.test" -test.v 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|skip' )
      echo; echo "## ngen against PyTorch eager"; (cd "$g" && "$g/bench.test" -test.run 'TestGPU$|TestGPUSeq' -test.v -bench -steps 30 2>&1)
      echo; echo "## PyTorch under torch.compile"; compile_peers
      echo; echo "## 5 epochs of the seed MLP"; train_peers 5
    } 2>&1 | tee -a "$out"
    ;;
  *) echo "usage: run.sh all|suite|bench|compile|train|sanitize TOOL ..."; exit 2 ;;
esac
