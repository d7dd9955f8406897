#!/usr/bin/env bash
# Issue 25's quality and CPU-speed targets for the models with a
# mixed-precision build (docs/AMP.md, "Quality and speed, measured"):
# trains each configuration with docs/PERF.md's recipe, one run at a time
# on one thread, and prints a table per run and per configuration.
#
#   bash scripts/amp_quality.sh              MLP (f32, bf16, fp16; 5 epochs)
#                                            then ConvNet (f32, bf16, fp16;
#                                            3 epochs), seeds 1 2 3
#   MODELS=mlp bash scripts/amp_quality.sh   the MLP only
#   SEEDS="1 2" LOGS=dir TRAIN=bin ...       other seeds; keep the logs in
#                                            dir; use a built cmd/train
#
# Runs go seed by seed, every precision of one seed back to back, so that
# a change of load hits the configurations alike. The load average is
# printed before and after each run: a time taken with the 1-minute load
# above ~1.5 on this 2-core machine is not the machine's. Accuracy is the
# test accuracy after the last epoch; samples/s is the mean over the
# epochs (data loading included); the time ratio is f32's samples/s over
# the configuration's (the issue's CPU target: bf16 ≤ 1.3× f32's step).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
SEEDS=${SEEDS:-"1 2 3"}
MODELS=${MODELS:-"mlp convnet"}
LOGS=${LOGS:-$(mktemp -d /tmp/amp_quality.XXXXXX)}
mkdir -p "$LOGS"
if [ -z "${TRAIN:-}" ]; then
  TRAIN=$LOGS/train
  nice go build -o "$TRAIN" ./cmd/train
fi
echo "logs in $LOGS; $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-);" \
  "$(grep -o -m1 'avx512[a-z]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"

# the recipe of docs/PERF.md: MLP 5 epochs, ConvNet 3, batch 64, 1 thread
epochs() { case $1 in mlp) echo 5 ;; convnet) echo 3 ;; esac; }
# AMPS="fp16" runs only those precisions (session 20 added the ConvNet's
# fp16 runs, whose build cmd/train compiles at run time, to f32's of
# 2026-11-28).
amps() { if [ -n "${AMPS:-}" ]; then echo "$AMPS"; else echo "off bf16 fp16"; fi; }

runs=$LOGS/runs.tsv
: >"$runs"
for m in $MODELS; do
  for s in $SEEDS; do
    for a in $(amps "$m"); do
      log=$LOGS/$m-$a-seed$s.log
      before=$(cut -d' ' -f1 /proc/loadavg)
      echo "$(date -u +%H:%M:%S) $m -amp $a -seed $s (load $before)"
      nice "$TRAIN" -model "$m" -amp "$a" -epochs "$(epochs "$m")" -threads 1 -seed "$s" -quiet >"$log" 2>&1 ||
        { echo "  failed: $log"; tail -5 "$log"; continue; }
      after=$(cut -d' ' -f1 /proc/loadavg)
      # model amp seed acc loss samples/s(mean) epoch-s(mean) load-before load-after scale skipped
      awk -v m="$m" -v a="$a" -v s="$s" -v lb="$before" -v la="$after" '
        /^epoch [0-9]+: train loss/ {
          n++; loss = $5; sub(",", "", loss); acc = $8; sub("%,", "", acc)
          sps += $9; t = $11; gsub(/[()]/, "", t); secs += t }
        /^loss scaling: scale/ { scale = $4; sub(",", "", scale); skipped = $5 }
        END { if (n == 0) exit 1
              printf "%s\t%s\t%s\t%s\t%s\t%.0f\t%.1f\t%s\t%s\t%s\t%s\n", m, a, s, acc, loss, sps / n, secs / n, lb, la,
                (scale == "" ? "-" : scale), (skipped == "" ? "-" : skipped) }' "$log" >>"$runs"
      tail -1 "$runs" | awk -F'\t' '{printf "  accuracy %s%%, %s samples/s, %s s an epoch, load %s→%s, scale %s, skipped %s\n", $4, $6, $7, $8, $9, $10, $11}'
    done
  done
done

echo
echo "| model | amp | seed | test accuracy | train loss | samples/s | s / epoch | load before → after | loss scale | skipped steps |"
echo "|---|---|---|---|---|---|---|---|---|---|"
awk -F'\t' '{printf "| %s | %s | %s | %s%% | %s | %s | %s | %s → %s | %s | %s |\n", $1, ($2 == "off" ? "f32" : $2), $3, $4, $5, $6, $7, $8, $9, $10, $11}' "$runs"
echo
echo "| model | amp | runs | mean accuracy | vs f32 (points) | vs f32 (relative) | mean samples/s | time / f32's |"
echo "|---|---|---|---|---|---|---|---|"
awk -F'\t' '
  { k = $1 SUBSEP $2; if (!(k in n)) order[++nk] = k; n[k]++; acc[k] += $4; sps[k] += $6 }
  END {
    for (i = 1; i <= nk; i++) {
      k = order[i]; split(k, p, SUBSEP); f = p[1] SUBSEP "off"
      ma = acc[k] / n[k]; ms = sps[k] / n[k]
      if (p[2] == "off" || !(f in n)) { d = "-"; r = "-"; tr = "-" }
      else { fa = acc[f] / n[f]; d = sprintf("%+.2f", ma - fa); r = sprintf("%+.2f%%", 100 * (ma - fa) / fa)
             tr = sprintf("%.2f×", (sps[f] / n[f]) / ms) }
      printf "| %s | %s | %d | %.2f%% | %s | %s | %.0f | %s |\n", p[1], (p[2] == "off" ? "f32" : p[2]), n[k], ma, d, r, ms, tr
    }
  }' "$runs"
