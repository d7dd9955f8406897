// Command train trains a generated ngen model on Fashion-MNIST (or, for the
// sequence models rnn, lstm, gpt and transformer, on Debian's word lists and fortunes; see
// seq.go): the README's main job. It prints a progress bar, the running loss, and the
// test accuracy and throughput after every epoch. With -torch it then runs
// PyTorch's training of the same model, data and recipe
// (bench/torch_train.py, same epochs, batch, seed and threads) and prints
// both runs side by side.
//
//	go run ./cmd/train -model mlp -epochs 5
//	go run ./cmd/train -model convnet -epochs 3 -threads 1 -torch
//	go run ./cmd/train -model lstm -epochs 1 -save lstm.ckpt
//	go run ./cmd/train -model lstm -load lstm.ckpt -sample "Some prompt" -length 200
//	go run ./cmd/train -model gpt -epochs 1 -sample "Some prompt" -temperature 0.8 -seed 3
//	go run ./cmd/train -model convnet -epochs 3 -torch -plot run.png -log run.jsonl
//	go run ./cmd/train -model mlp -epochs 1 -profile -trace step.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runlog"
	"github.com/ngen-ml/ngen/runtime"
	_ "github.com/ngen-ml/ngen/runtime/cpu" // the default backend
	"github.com/ngen-ml/ngen/runtime/data"
)

func main() {
	var (
		name    = flag.String("model", "mlp", "model to train: "+modelNames())
		epochs  = flag.Int("epochs", 5, "epochs")
		esteps  = flag.Int("epoch-steps", 0, "sequence models: train each epoch on its first N shuffled batches only (0: all); -torch passes the same cap")
		batchS  = flag.String("batch", "64", "batch size, or auto: the largest that fits in -memory (runtime.MaxBatch)")
		memory  = flag.Int64("memory", 0, "memory budget in bytes for -batch auto (0: what the device can still supply)")
		seed    = flag.Uint64("seed", 1, "seed for initialisation, shuffling and dropout")
		threads = flag.Int("threads", 0, "CPU threads (0: all cores)")
		device  = flag.String("device", "cpu", "device: cpu, cuda or cuda:N (cuda needs -tags cuda)")
		dir     = flag.String("data", "", "data directory (default: Fashion-MNIST's, or the sequence model's Debian files)")
		save    = flag.String("save", "", "write a checkpoint (safetensors) here after training")
		load    = flag.String("load", "", "resume from this checkpoint (written by -save or scripts/safetensors_io.py); lstm/gpt -sample: generate from it instead of training")
		accum   = flag.Int("accumulate", 1, "sum the gradients of this many batches (micro-batches of -batch rows) before each update")
		quiet   = flag.Bool("quiet", false, "no progress bar")
		profile = flag.Bool("profile", false, "time every kernel and GEMM of the last epoch and print the table (synchronises after each)")
		torch   = flag.Bool("torch", false, "then train the same model with PyTorch (-torch-script) and print both runs side by side")
		conc    = flag.Bool("torch-concurrent", false, "sequence models, with -torch: run the PyTorch peer at the same time as ngen, each on -threads threads (quality runs on a machine with cores to spare; the throughput columns then share the machine)")
		only    = flag.Bool("torch-only", false, "sequence models: run only the PyTorch peer, on the recipe and data ngen's run would use, and print its epochs (a peer's quality runs without repeating ngen's; implies -torch and -torch-concurrent)")
		script  = flag.String("torch-script", "bench/torch_train.py", "PyTorch peer for -torch, run with /usr/bin/python3")
		prompt  = flag.String("sample", "", "lstm, gpt: then print -length characters generated after this prompt")
		length  = flag.Int("length", 200, "characters to generate with -sample")
		temp    = flag.Float64("temperature", 0.8, "sampling temperature for -sample (0: the most likely character)")
		amp     = flag.String("amp", "", "mixed precision: bf16 or fp16 trains the model's mixed-precision build (generated/'s for mlp and convnet in bf16, else compiled at run time from the model's declaration and cached; docs/AMP.md), off (the default) the f32 one")
		attn    = flag.String("attention-form", "auto", "with -amp on -device cuda: 16-bit attention's GPU form, auto (its products on tensor cores where the head size is a multiple of 16) or cuda-cores (as ngen build -attention-form); the CPU runs its own forms either way")
		determ  = flag.Bool("deterministic", false, "refuse any configuration that cannot promise bit-identical parameters from run to run (CPU, -threads given, no -dist)")
	)
	rc := recipeFlags() // -lr, -schedule, -warmup, -min-lr, -clip, -weight-decay (recipe.go)
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	rc.set = set
	rc.defaults(*name) // gpt, transformer: warm-up, cosine, clipping at 1 (recipe.go)
	sampling := set["sample"]
	if *only {
		*torch, *conc = true, true
	}
	task, seq := seqTasks[*name]
	_, known := models[*name]
	err := runFlags{model: *name, epochs: *epochs, accum: *accum, batch: *batchS, memory: *memory, threads: *threads,
		device: *device, length: *length, temperature: *temp, deterministic: *determ, torch: *torch, dist: *distMode,
		set: set, args: flag.Args()}.check()
	if err == nil && !seq && !known {
		err = fmt.Errorf("unknown model %q (have %s)", *name, modelNames())
	}
	if err == nil && *only {
		err = checkTorchOnly(seq, set)
	}
	if err == nil {
		err = checkAMP(*name, *amp, seq, *device, *distMode, *torch)
	}
	if err == nil {
		if attentionForm, err = ops.ParseTensorForm(*attn); err != nil {
			err = fmt.Errorf("-attention-form: %v", err)
		}
	}
	if err == nil {
		err = rc.check()
	}
	if err == nil {
		err = checkOutputs(*profile, *torch) // -log, -plot, -trace (outputs.go)
	}
	if err == nil {
		err = checkDistFlags(*torch, *batchS)
	}
	if err == nil && *torch {
		// The peer runs after ngen's training: a script that is not
		// there (the default path is relative to the repository root)
		// failed only after every epoch.
		if _, e := os.Stat(*script); e != nil {
			err = fmt.Errorf("-torch-script %s: %v (run from the repository root, or give the script's path)", *script, e)
		}
	}
	if err == nil && seq && *esteps < 0 {
		err = fmt.Errorf("-epoch-steps %d: want 0 (whole epochs) or more", *esteps)
	}
	if err == nil && seq && *conc && !*torch {
		err = fmt.Errorf("-torch-concurrent: give -torch too")
	}
	if err == nil && !seq && *esteps != 0 {
		err = fmt.Errorf("-epoch-steps: only the sequence models (%s) take it", strings.Join(seqNames(), ", "))
	}
	if err == nil && !seq && *conc {
		err = fmt.Errorf("-torch-concurrent: only the sequence models (%s) take it", strings.Join(seqNames(), ", "))
	}
	if err == nil {
		err = checkWritable(*save) // before any training, for every model
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(2)
	}
	if seq {
		grp, err := joinGroup() // -dist (dist.go)
		if err != nil {
			fmt.Fprintln(os.Stderr, "train:", err)
			os.Exit(1)
		}
		var rec *recorder
		if grp.lead() { // rank 0 alone logs and plots
			rec = newRecorder(*name)
		}
		err = trainSeq(*name, task, seqOptions{amp: *amp, epochs: *epochs, epochSteps: *esteps, batch: 64, accum: *accum, seed: *seed, threads: *threads,
			device: *device, dir: *dir, save: *save, quiet: *quiet || !grp.lead(), profile: *profile, grp: grp, rec: rec, recipe: rc, peerOnly: *only}, *batchS, *torch, *conc, *script,
			sampleOptions{sampling, *prompt, *length, *temp, *load})
		grp.finish(err)
		return
	}
	if *dir == "" {
		*dir = data.DefaultFashionMNISTDir
	}
	batch, err := parseBatch(*batchS)
	if err == nil {
		err = checkRows(*accum, batch, 1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(2)
	}
	grp, err := joinGroup() // -dist (dist.go)
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
	if err := checkRows(*accum, batch, grp.size()); err != nil {
		grp.finish(err)
		return
	}
	var rec *recorder
	if grp.lead() { // rank 0 alone logs and plots
		rec = newRecorder(*name)
	}
	var recipeArgs []string
	ours, err := run(grp, *name, *amp, *epochs, &batch, *memory, *accum, *seed, *threads, *device, *dir, *save, *load, *quiet || !grp.lead(), *profile, rec, rc, &recipeArgs)
	if err == nil && *torch {
		var peerLog []string
		if peerLog, err = rec.peerArgs(); err == nil {
			if *amp == "bf16" { // checkAMP refused fp16 with -torch
				peerLog = append(peerLog, "--amp", "bf16")
			}
			err = compare(ours, *script, *name, *epochs, batch, *seed, *threads, *dir, append(peerLog, recipeArgs...))
		}
	}
	if err == nil {
		err = rec.finish()
	}
	grp.finish(err)
}

// epochResult is one epoch of a run, ngen's or PyTorch's.
type epochResult struct {
	Epoch     int     `json:"epoch"`
	Acc       float64 `json:"test_acc"`
	ValAcc    float64 `json:"val_acc,omitempty"` // sequence classifiers
	BPC       float64 `json:"val_bpc,omitempty"` // language models: validation bits per character
	Loss      float64 `json:"train_loss"`
	PerSecond float64 `json:"samples_per_s"`
	Steps     int     `json:"steps,omitempty"` // training steps of the epoch (sequence models)
}

// compare runs the PyTorch peer on the same model, data and recipe and
// prints its epochs beside ours. It runs after ngen's training, not beside
// it, so the two do not share the cores. extra are more arguments for the
// peer (its -log).
func compare(ours []epochResult, script, name string, epochs, batch int, seed uint64, threads int, dir string, extra []string) error {
	if threads <= 0 {
		threads = goruntime.NumCPU()
	}
	fmt.Printf("\nPyTorch (%s, same model, data, epochs, batch, seed and threads):\n", script)
	args := append([]string{script, "--model", name, "--epochs", strconv.Itoa(epochs),
		"--batch", strconv.Itoa(batch), "--seed", strconv.FormatUint(seed, 10), "--threads", strconv.Itoa(threads), "--data", dir}, extra...)
	cmd := exec.Command("/usr/bin/python3", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("PyTorch peer %s: %w", script, err)
	}
	var theirs []epochResult
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r epochResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("PyTorch peer %s printed %q: %w", script, line, err)
		}
		theirs = append(theirs, r)
	}
	if len(theirs) != len(ours) {
		return fmt.Errorf("PyTorch peer %s ran %d epochs, ngen %d", script, len(theirs), len(ours))
	}
	fmt.Printf("%5s  %10s  %10s  %10s  %10s  %12s  %12s\n", "epoch", "ngen acc", "torch acc", "ngen loss", "torch loss", "ngen smp/s", "torch smp/s")
	for i, a := range ours {
		b := theirs[i]
		fmt.Printf("%5d  %9.2f%%  %9.2f%%  %10.4f  %10.4f  %12.0f  %12.0f\n", a.Epoch, 100*a.Acc, 100*b.Acc, a.Loss, b.Loss, a.PerSecond, b.PerSecond)
	}
	return nil
}

// run trains model name on Fashion-MNIST, its mixed-precision build under
// -amp bf16 or fp16 (amp.go); peer receives the PyTorch peer's arguments
// for the same rate and schedule (recipe.go).
func run(grp *group, name, amp string, epochs int, batchp *int, memory int64, accum int, seed uint64, threads int, devName, dir, save, load string, quiet, profile bool, rec *recorder, rc *recipe, peer *[]string) ([]epochResult, error) {
	if amp != "" && amp != "off" && trainedAs(name, amp) == "" {
		g, err := compileAMP(name, amp, devName, func(f string, a ...any) {
			if grp.lead() {
				fmt.Printf(f, a...)
			}
		})
		if err != nil {
			return nil, err
		}
		if !addImageClassifier(models, g) {
			return nil, fmt.Errorf("-amp %s: %s's build takes no Fashion-MNIST images", amp, name)
		}
	}
	mk, ok := models[trainedAs(name, amp)]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (have %s)", name, modelNames())
	}
	trainSet, err := data.LoadFashionMNIST(dir, true)
	if err != nil {
		return nil, err
	}
	testSet, err := data.LoadFashionMNIST(dir, false)
	if err != nil {
		return nil, err
	}
	if devName, err = grp.device(devName); err != nil {
		return nil, err
	}
	dev, err := runtime.OpenDevice(devName, threads)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	if *batchp == 0 {
		if *batchp, err = autoBatch(dev, mk, memory, accum, trainSet.N); err != nil {
			return nil, err
		}
		if err := checkRows(accum, *batchp, grp.size()); err != nil {
			return nil, err
		}
	}
	batch := *batchp
	m, err := mk(dev, batch, seed)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if load != "" {
		if err := loadCheckpoint(m, load); err != nil {
			return nil, err
		}
	}
	if err := m.Session().SetAccumulationSteps(accum); err != nil {
		return nil, err
	}
	if err := grp.attach(m); err != nil {
		return nil, err
	}
	loader, err := data.NewLoader(trainSet, batch, true, seed)
	if err != nil {
		return nil, err
	}
	if err := grp.shard(loader); err != nil {
		return nil, err
	}
	src, closeSrc, err := newBatches(loader, dev)
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	// Every epoch ends with an update, a partial accumulation included
	// (trainEpoch).
	total := epochs * ((loader.Len() + accum - 1) / accum)
	if err := rc.apply(m.Session(), total); err != nil {
		return nil, err
	}
	if err := setPipelined(m.Session(), dev); err != nil {
		return nil, err
	}
	if *peer, err = rc.peerArgs(m.Session().Plan(), total); err != nil {
		return nil, err
	}
	var results []epochResult
	say := func(format string, a ...any) { // rank 0 alone prints
		if grp.lead() {
			fmt.Printf(format, a...)
		}
	}
	shown := name
	if p := trainedAs(name, amp); p != name {
		shown = fmt.Sprintf("%s (%s mixed precision, package %s)", name, amp, p)
	}
	say("model %s on %s: %d train / %d test images, batch %d%s, %d steps per epoch\n",
		shown, dev.Name(), trainSet.N, testSet.N, batch, grp.describe(batch), loader.Len())
	if accum > 1 && grp.lead() {
		fmt.Printf("accumulating %d micro-batches of %d per update (%d rows per update)\n", accum, batch, accum*batch)
	}
	rc.describe(m.Session(), total, say)
	if err := rec.begin(dev, batch); err != nil {
		return nil, err
	}
	for epoch := 1; epoch <= epochs; epoch++ {
		m.Train()
		if profile && epoch == epochs {
			m.Session().SetProfiling(true)
		}
		var bar *progressbar.ProgressBar
		if !quiet {
			bar = progressbar.NewOptions(loader.Len(), progressbar.OptionSetDescription(fmt.Sprintf("epoch %d", epoch)),
				progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish())
		}
		start := time.Now()
		rec.epochStart()
		sum, n, wait, err := trainEpoch(m, src, func(loss float32, rows int, sum float64, n int) error {
			if bar != nil {
				bar.Describe(fmt.Sprintf("epoch %d loss %.4f", epoch, sum/float64(n)))
				bar.Add(1)
			}
			return rec.stepDone(m.Session(), epoch, loss, rows)
		})
		if err != nil {
			return nil, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		elapsed := time.Since(start)
		if profile && grp.lead() {
			fmt.Printf("epoch %d: waited %.3f s for data of %.3f s training (%.1f%%; prefetch %v)\n",
				epoch, wait.Seconds(), elapsed.Seconds(), 100*wait.Seconds()/elapsed.Seconds(), *prefetch)
		}
		if bar != nil {
			bar.Finish()
		}
		acc, err := grp.accuracy(m, testSet, batch)
		if err != nil {
			return nil, err
		}
		ls := []float64{sum, float64(n)} // the loss over every rank's batches
		if err := grp.sum(ls); err != nil {
			return nil, err
		}
		sum, n = ls[0], int(ls[1])
		say("epoch %d: train loss %.4f, test accuracy %.2f%%, %.0f samples/s (%.1f s)\n",
			epoch, sum/float64(n), 100*acc, float64(trainSet.N)/elapsed.Seconds(), elapsed.Seconds())
		results = append(results, epochResult{Epoch: epoch, Acc: acc, Loss: sum / float64(n), PerSecond: float64(trainSet.N) / elapsed.Seconds()})
		if err := rec.evalDone(runlog.Eval{Epoch: epoch, TrainLoss: sum / float64(n), TestAcc: runlog.F(acc), SamplesPerS: float64(trainSet.N) / elapsed.Seconds()}); err != nil {
			return nil, err
		}
	}
	if profile && grp.lead() {
		fmt.Printf("\nprofile of epoch %d (training steps and test predictions):\n", epochs)
		if err := runtime.WriteProfile(os.Stdout, m.Session().Profile()); err != nil {
			return nil, err
		}
		if err := writeTrace(m.Session()); err != nil {
			return nil, err
		}
	}
	if g := grp.comm; g != nil && grp.lead() {
		t := m.Session().ReduceTime()
		fmt.Printf("gradient all-reduce: %.3f s over %d steps (%.2f ms a step)\n", t.Seconds(), m.Session().Steps(), 1e3*t.Seconds()/float64(max(m.Session().Steps(), 1)))
	}
	if err := flushAccumulation(m.Session(), grp.lead()); err != nil {
		return nil, err
	}
	describeAMP(m.Session(), say)
	if save != "" && grp.lead() { // rank 0's replica (its batch norm statistics)
		if err := saveCheckpoint(m, save); err != nil {
			return nil, err
		}
		fmt.Println("saved", save)
	}
	return results, nil
}

// countCorrect evaluates in eval mode over the whole set and counts the
// correct predictions.
func countCorrect(m model, ds *data.Dataset, batch int) (int, error) {
	m.Eval()
	loader, err := data.NewLoader(ds, batch, false, 0)
	if err != nil {
		return 0, err
	}
	correct := 0
	for {
		x, y, ok := loader.Next()
		if !ok {
			break
		}
		logits, err := m.Predict(x)
		if err != nil {
			return 0, err
		}
		classes := len(logits) / len(y)
		for r := range y {
			best := 0
			for c := 1; c < classes; c++ {
				if logits[r*classes+c] > logits[r*classes+best] {
					best = c
				}
			}
			if int32(best) == y[r] {
				correct++
			}
		}
	}
	return correct, nil
}

// parseBatch reads -batch: a positive size, or auto (0).
func parseBatch(s string) (int, error) {
	if s == "auto" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("-batch %q: want a positive size up to %d, or auto", s, math.MaxInt32)
	}
	return n, nil
}

// autoBatch is -batch auto: the largest batch whose model fits in the
// budget (runtime.MaxBatch, from the plan's sizes), at most the training
// set.
func autoBatch(dev runtime.Device, mk func(runtime.Device, int, uint64) (model, error), budget int64, accum, n int) (int, error) {
	m, err := mk(dev, 1, 0) // for its plan
	if err != nil {
		return 0, err
	}
	plan := m.Session().Plan()
	if err := m.Close(); err != nil {
		return 0, err
	}
	b, err := runtime.MaxBatch(dev, plan, budget, runtime.SessionOptions{AccumulationSteps: accum})
	if err != nil {
		return 0, fmt.Errorf("-batch auto: %w (give a budget with -memory BYTES)", err)
	}
	need := runtime.SessionBytes(dev, plan, runtime.SessionOptions{MaxBatch: b, AccumulationSteps: accum})
	fmt.Printf("-batch auto: batch %d takes %d bytes (%s) of the budget", b, need, runtime.HumanBytes(need))
	if b > n {
		b = n
		fmt.Printf("; capped at the training set, %d", n)
	}
	fmt.Println()
	return b, nil
}

// flushAccumulation runs the update of micro-batches still pending when
// training ends (an epoch's batches need not divide by -accumulate; the
// remainder carries over between epochs), so that no gradient computed is
// lost and the checkpoint, which holds no partial sum, can be written.
// Every rank of a group holds the same count and updates together.
func flushAccumulation(s *runtime.Session, lead bool) error {
	n := s.Pending()
	if n == 0 {
		return nil
	}
	if err := s.RunUpdate(); err != nil {
		return fmt.Errorf("the last update, of the %d micro-batches left pending: %w", n, err)
	}
	if lead {
		fmt.Printf("the last update applied the %d micro-batch(es) left pending (of %d per update)\n", n, s.AccumulationSteps())
	}
	return nil
}
