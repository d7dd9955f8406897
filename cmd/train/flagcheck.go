package main

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ngen-ml/ngen/runtime/cpu"
)

// maxAccumulate bounds -accumulate: more micro-batches per update than
// this is a slip (4611686018427387904 overflowed the rows per update,
// printed "(0 rows per update)" and never updated).
const maxAccumulate = 1 << 20

// checkCounts rejects flag values that parse but that the run would
// silently ignore or misread: a negative epoch count (0 is a valid way to
// only -load and -save), an accumulation below one batch or absurdly many
// batches, and words after the flags (a typo such as "-epochs 3 10" would
// otherwise train with defaults the user did not mean).
func checkCounts(epochs, accum int, args []string) error {
	switch {
	case epochs < 0:
		return fmt.Errorf("-epochs %d: want 0 or more", epochs)
	case accum < 1 || accum > maxAccumulate:
		return fmt.Errorf("-accumulate %d: want 1 (no accumulation) to %d batches per update", accum, maxAccumulate)
	case len(args) > 0:
		return fmt.Errorf("unexpected argument %q: every option is a flag (train -h lists them)", args[0])
	}
	return nil
}

// checkRows rejects an accumulation whose rows per update (accum micro-
// batches of batch rows, times the processes) do not fit an int32.
func checkRows(accum, batch, procs int) error {
	if batch > 0 && (accum > math.MaxInt32/batch || accum*batch > math.MaxInt32/max(procs, 1)) {
		return fmt.Errorf("-accumulate %d of -batch %d rows (%d processes): the rows per update overflow", accum, batch, procs)
	}
	return nil
}

// runFlags are the flags every model's run reads, as given.
type runFlags struct {
	model                string
	epochs, accum        int
	batch                string
	memory               int64
	threads              int
	device               string
	length               int
	temperature          float64
	deterministic, torch bool
	dist                 string
	set                  map[string]bool // flags given on the command line
	args                 []string
}

// check rejects a combination of flags that the run would misread or
// ignore: each flag is either applied or refused, for every model.
func (f runFlags) check() error {
	if err := checkCounts(f.epochs, f.accum, f.args); err != nil {
		return err
	}
	if f.threads < 0 || f.threads > cpu.MaxThreads {
		return fmt.Errorf("-threads %d: want 0 (every core) to %d", f.threads, cpu.MaxThreads)
	}
	auto := strings.EqualFold(f.batch, "auto")
	switch {
	case f.memory < 0:
		return fmt.Errorf("-memory %d: want a budget in bytes (0: what the device can still supply)", f.memory)
	case f.set["memory"] && !auto:
		return fmt.Errorf("-memory: only -batch auto reads a budget; give -batch auto or drop -memory")
	}
	switch {
	case f.set["dist-timeout"] && f.dist == "":
		return fmt.Errorf("-dist-timeout: only -dist mpi's collectives read it; give -dist mpi or drop it")
	case f.set["torch-script"] && !f.torch:
		return fmt.Errorf("-torch-script: only -torch runs the PyTorch peer; give -torch too")
	}
	_, samples := seqSamplers[f.model]
	if samples && f.set["load"] {
		// -load with -sample generates from the checkpoint and trains
		// nothing: these flags were read by nothing (-save wrote no file).
		for _, n := range []string{"epochs", "epoch-steps", "accumulate", "save", "torch", "lr", "schedule", "warmup", "clip", "weight-decay", "log", "plot", "profile"} {
			if f.set[n] {
				return fmt.Errorf("-%s: %s -load generates from the checkpoint without training; drop -%s, or drop -load to train first", n, f.model, n)
			}
		}
	}
	switch {
	case f.set["sample"] && !samples:
		return fmt.Errorf("-sample: only the %s models generate text", strings.Join(samplerNames(), " and "))
	case (f.set["length"] || f.set["temperature"]) && !f.set["sample"]:
		return fmt.Errorf("-length and -temperature shape -sample's text: give -sample too")
	case f.length < 1:
		return fmt.Errorf("-length %d: want at least one character", f.length)
	case math.IsNaN(f.temperature) || math.IsInf(f.temperature, 0) || f.temperature < 0:
		return fmt.Errorf("-temperature %v: want a finite value ≥ 0 (0: always the most likely character)", f.temperature)
	}
	if f.deterministic {
		return f.checkDeterministic()
	}
	return nil
}

// checkDeterministic refuses what cannot promise bit-identical parameters
// from run to run: -deterministic's contract (README, "Determinism").
// Accepted: the CPU backend, a thread count given (the split of work
// between threads decides summation orders, so it must not follow the
// machine's core count), a batch size given or found from an explicit
// -memory budget.
func (f runFlags) checkDeterministic() error {
	switch {
	case f.device != "cpu":
		return fmt.Errorf("-deterministic: -device %s: bit-identical runs are only promised on the CPU backend (not verified on GPUs: cuBLAS algorithm choice, TF32)", f.device)
	case f.threads == 0:
		return fmt.Errorf("-deterministic: give -threads N: with 0 the thread count, and with it the summation order of GEMMs split between threads, follows the machine's cores")
	case f.dist != "":
		return fmt.Errorf("-deterministic: -dist %s: the all-reduce's summation order is MPI's choice, not promised across runs", f.dist)
	case strings.EqualFold(f.batch, "auto") && f.memory == 0:
		return fmt.Errorf("-deterministic: -batch auto without -memory sizes the batch by the memory the device has free")
	}
	return nil
}

func samplerNames() []string {
	var names []string
	for n := range seqSamplers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
