#!/usr/bin/env bash
# The gpt's default recipe against a constant rate and against PyTorch on
# the same recipe, over seeds (issue 29): for each seed S,
#   recipe:   cmd/train -model gpt (its default recipe: a warm-up over a
#             twentieth of the run, cosine decay to 0, clip_grad_norm_ 1)
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
OUT=${OUT:-gpt_recipe_quality}
mkdir -p "$OUT"
go build -o "$OUT/train" ./cmd/train
common=(-model gpt -epochs "$EPOCHS" -epoch-steps "$STEPS" -batch "$BATCH" -threads "$THREADS" -quiet)
for s in $SEEDS; do
	start=$(date +%s)
	"$OUT/train" "${common[@]}" -seed "$s" -torch -torch-concurrent -log "$OUT/recipe_seed$s.jsonl" \
		| tee "$OUT/recipe_seed$s.txt"
	mid=$(date +%s)
	"$OUT/train" "${common[@]}" -seed "$s" -schedule constant -clip 0 -log "$OUT/constant_seed$s.jsonl" \
		| tee "$OUT/constant_seed$s.txt"
	end=$(date +%s)
	echo "seed $s: recipe and PyTorch $((mid - start)) s, constant $((end - mid)) s" | tee -a "$OUT/times.txt"
done
echo
echo "last validation bits per character (ngen recipe, PyTorch recipe, ngen constant):"
for s in $SEEDS; do
	r=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+ ' "$OUT/recipe_seed$s.txt" | tail -1 | awk '{print $2, $3}')
	c=$(grep -oE 'validation [0-9.]+ bits' "$OUT/constant_seed$s.txt" | tail -1 | awk '{print $2}')
	echo "seed $s: $r $c"
done
