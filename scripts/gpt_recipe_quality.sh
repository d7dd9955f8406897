#!/usr/bin/env bash
# The gpt's default recipe against a constant rate and against PyTorch on
# the same recipe, over seeds (issue 29): for each seed S,
#   recipe:   cmd/train -model gpt (its default recipe: a warm-up over a
#             twentieth of the run, a cosine from 6e-4 to half of it,
#             clip_grad_norm_ 1; RECIPE's flags change it)
#             with -torch -torch-concurrent, so bench/torch_train.py runs
#             the same recipe (SequentialLR(LinearLR, CosineAnnealingLR),
#             clip_grad_norm_(params, 1.0), the same weight decay) on the
#             same windows, seed and step cap beside it;
#   constant: cmd/train -model gpt -schedule constant -clip 0 (Adam at
#             3e-4 throughout, no clipping: the recipe before issue 29).
# Each run writes its output and its -log under OUT; the summary at the
# end prints every run's last validation bits per character.
#
#   bash scripts/gpt_recipe_quality.sh            # 3 seeds, 4 × 500 steps
#   SEEDS="1" EPOCHS=1 STEPS=20 bash scripts/gpt_recipe_quality.sh   # a smoke run
#   RECIPE="-lr 5e-4 -min-lr 5e-5" PARTS=ngen bash scripts/gpt_recipe_quality.sh
#       # another recipe: RECIPE's flags go to the recipe, ngen and torch parts
#   PARTS=constant bash scripts/gpt_recipe_quality.sh   # one part only:
#       recipe (ngen and PyTorch side by side), ngen (ngen's recipe
#       alone), torch (PyTorch's recipe alone, cmd/train -torch-only) or
#       constant; run parts in two shells to use two cores
#
# Session 20 ran the parts as two chains on the 2-core VM, one thread
# each: PARTS=torch and PARTS=constant (ngen's recipe runs were session
# 19's, docs/AMP.md); about 20 min a seed for each part on an idle core.
#
# Cost, measured on one smoke run (SEEDS=1 EPOCHS=1 STEPS=5) on the 2-core
# development VM under other jobs (load about 6): ngen's step took 2.1 s
# and PyTorch's 3.6 s side by side, a validation pass over the 1978
# windows 130 s (ngen) and 220 s (PyTorch). A seed of the default size
# (4 × 500 steps, four validations) is then about 2.2 h for the recipe
# pair and 1.3 h for the constant run, 3.5 h a seed; an idle machine
# (about 1.4 s a step each, session 10) takes roughly half.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"1 2 3"}
EPOCHS=${EPOCHS:-4}
STEPS=${STEPS:-500}
BATCH=${BATCH:-16}
THREADS=${THREADS:-1}
PARTS=${PARTS:-"recipe constant"}
OUT=${OUT:-gpt_recipe_quality}
read -r -a recipe <<<"${RECIPE:-}"
mkdir -p "$OUT"
bin="$OUT/train.$$"
go build -o "$bin" ./cmd/train
common=(-model gpt -epochs "$EPOCHS" -epoch-steps "$STEPS" -batch "$BATCH" -threads "$THREADS" -quiet)
for s in $SEEDS; do
	for part in $PARTS; do
		start=$(date +%s)
		case $part in
		recipe) args=("${recipe[@]}" -torch -torch-concurrent -log "$OUT/recipe_seed$s.jsonl") ;;
		ngen) args=("${recipe[@]}" -log "$OUT/ngen_seed$s.jsonl") ;;
		torch) args=("${recipe[@]}" -torch-only -log "$OUT/torch_seed$s.jsonl") ;;
		constant) args=(-schedule constant -clip 0 -log "$OUT/constant_seed$s.jsonl") ;;
		*) echo "PARTS: unknown part $part (recipe, ngen, torch, constant)" >&2; exit 2 ;;
		esac
		"$bin" "${common[@]}" -seed "$s" "${args[@]}" | tee "$OUT/${part}_seed$s.txt"
		echo "seed $s: $part $(($(date +%s) - start)) s" | tee -a "$OUT/times.txt"
	done
done
rm -f "$bin"
echo
echo "last validation bits per character, by part:"
for s in $SEEDS; do
	line="seed $s:"
	for part in $PARTS; do
		f="$OUT/${part}_seed$s.txt"
		case $part in
		recipe) v=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ ' "$f" | tail -1 | awk '{print "ngen " $2 ", PyTorch " $3}') ;;
		torch) v=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+$' "$f" | tail -1 | awk '{print "PyTorch " $2}') ;;
		*) v=$(grep -oE 'validation [0-9.]+ bits' "$f" | tail -1 | awk -v p="$part" '{print p " " $2}') ;;
		esac
		line="$line $v;"
	done
	echo "$line"
done
