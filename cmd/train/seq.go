package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/ngen-ml/ngen/runlog"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// Sequence models: token sequences in, a class per sequence (YPer 1) or a
// next token per position (YPer T) out. Each generated package has its own
// Step signature (the RNN takes a mask, the language model does not); a
// row of seqTasks adapts it to seqModel, so a further sequence model (a
// Transformer, say) is one more row.

// seqBatch is one batch of data.SeqLoader.
type seqBatch struct{ X, Y, Mask []int32 }

// seqModel is what the sequence training loop needs of a model.
type seqModel interface {
	Step(b seqBatch) (float32, error)
	Predict(b seqBatch) ([]float32, error)
	Train()
	Eval()
	Save(w io.Writer) error
	Close() error
	Session() *runtime.Session
}

// seqSets are a task's splits; Test may be nil.
type seqSets struct{ Train, Val, Test *data.Sequences }

// seqTask is one row: the data, where it lives by default, the model it
// trains (a package in the registry, linked through generated/fused) and
// how a batch feeds that model's inputs.
type seqTask struct {
	vocab   int // token ids, for the PyTorch peer
	dataDir string
	load    func(dir string) (*seqSets, error)
	pkg     string                                        // runtime.Registered's name of the model's package
	feed    func(b seqBatch, predict bool) runtime.Inputs // the step's inputs, or predict's
}

// new builds the task's model at batch rows from the registry.
func (t seqTask) new(dev runtime.Device, batch int, seed uint64) (seqModel, error) {
	g, err := runtime.Registered(t.pkg)
	if err != nil {
		return nil, err
	}
	m, err := g.New(dev, runtime.SessionOptions{MaxBatch: batch, Seed: seed})
	if err != nil {
		return nil, err
	}
	return seqNet{m, t.feed}, nil
}

// seqNet drives a registered sequence model through its task's feed.
type seqNet struct {
	*runtime.Model
	feed func(b seqBatch, predict bool) runtime.Inputs
}

func (m seqNet) Step(b seqBatch) (float32, error) {
	loss, err := m.Model.Step(m.feed(b, false))
	return float32(loss), err
}

func (m seqNet) Predict(b seqBatch) ([]float32, error) { return logits(m.Model, m.feed(b, true)) }

// tokens feeds x (and y to a step): the character language models.
func tokens(b seqBatch, predict bool) runtime.Inputs {
	if predict {
		return runtime.Inputs{"x": b.X}
	}
	return runtime.Inputs{"x": b.X, "y": b.Y}
}

// wordsPerClass keeps the word task's epochs short: 20 000 words of each
// language (100 000 in all, 80% for training).
const wordsPerClass = 20000

var seqTasks = map[string]seqTask{
	// The language of a word (models/rnn).
	"rnn": {vocab: data.WordVocab, dataDir: data.DefaultDictDir,
		load: func(dir string) (*seqSets, error) {
			w, err := data.LoadWords(dir, data.WordOptions{PerClass: wordsPerClass})
			if err != nil {
				return nil, err
			}
			return &seqSets{w.Train, w.Val, w.Test}, nil
		},
		pkg: "rnn",
		feed: func(b seqBatch, predict bool) runtime.Inputs {
			if predict {
				return runtime.Inputs{"x": b.X, "mask": b.Mask}
			}
			return runtime.Inputs{"x": b.X, "mask": b.Mask, "y": b.Y}
		}},
	// Next character on the fortunes (models/lstm): CharLM trains the
	// weights that the generator (package lstm) samples with.
	"lstm": {vocab: data.CharVocab, dataDir: data.DefaultFortunesDir,
		load: func(dir string) (*seqSets, error) {
			text, err := data.LoadFortunes(dir)
			if err != nil {
				return nil, err
			}
			tr, err := data.Windows(text.Train, charWindow)
			if err != nil {
				return nil, err
			}
			val, err := data.Windows(text.Val, charWindow)
			if err != nil {
				return nil, err
			}
			return &seqSets{Train: tr, Val: val}, nil
		},
		pkg: "charlm", feed: tokens},
}

// charWindow is CharLM's sequence length (models/lstm Seed.T).
const charWindow = 64

// seqOptions are the flags the sequence loop reads.
type seqOptions struct {
	// amp is -amp: bf16 or fp16 trains the model's mixed-precision build,
	// compiled at run time (jit.go); "" or off the f32 package.
	amp           string
	epochs, batch int
	// accum is -accumulate: micro-batches of batch rows per update (0 or
	// 1: every batch updates).
	accum int
	// epochSteps, when positive, caps each epoch at its first epochSteps
	// batches of the shuffled order (a shorter recipe on a random part of
	// the training split; the PyTorch peer gets the same cap).
	epochSteps  int
	seed        uint64
	threads     int
	device, dir string
	save        string
	quiet       bool
	profile     bool
	// trained, when not nil, receives the trained model's checkpoint.
	trained *bytes.Buffer
	// rec feeds -log and -plot (outputs.go); peerArgs are the PyTorch
	// peer's arguments for its log.
	rec      *recorder
	peerArgs []string
	// recipe is -lr and -schedule (recipe.go); runSeq writes the PyTorch
	// peer's arguments for it into recipeArgs when that is not nil.
	recipe     *recipe
	recipeArgs *[]string
	// recipeReady, when set, runs once recipeArgs holds the peer's
	// recipe, before the first step (-torch-concurrent starts the peer).
	recipeReady func() error
	// grp is the data-parallel group (-dist mpi); nil: this process alone.
	grp *group
	// peerOnly (-torch-only): runSeq returns once the recipe is resolved
	// and the peer started (recipeReady), before ngen's first step.
	peerOnly bool
}

// runSeq trains a sequence model: a progress bar, then after every epoch
// the validation accuracy (classes) or bits per character (next token),
// and the throughput; the test accuracy at the end where there is a test
// split.
func runSeq(name string, task seqTask, o seqOptions) ([]epochResult, error) {
	grp := o.grp
	if grp == nil {
		grp = &group{}
	}
	accum := max(o.accum, 1)
	if err := checkRows(accum, o.batch, grp.size()); err != nil {
		return nil, err
	}
	dir := o.dir
	if dir == "" {
		dir = task.dataDir
	}
	sets, err := task.load(dir)
	if err != nil {
		return nil, err
	}
	devName, err := grp.device(o.device)
	if err != nil {
		return nil, err
	}
	dev, err := runtime.OpenDevice(devName, o.threads)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	m, err := task.new(dev, o.batch, o.seed)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if err := m.Session().SetAccumulationSteps(accum); err != nil {
		return nil, err
	}
	if grp.comm != nil {
		if err := m.Session().SetCommunicator(grp.comm); err != nil {
			return nil, err
		}
	}
	loader, err := data.NewSeqLoader(sets.Train, o.batch, true, o.seed)
	if err != nil {
		return nil, err
	}
	if grp.comm != nil {
		if err := loader.Shard(grp.comm.Rank(), grp.size()); err != nil {
			return nil, err
		}
	}
	say := func(format string, a ...any) { // rank 0 alone prints
		if grp.lead() {
			fmt.Printf(format, a...)
		}
	}
	tr := sets.Train
	perEpoch := loader.Len()
	if o.epochSteps > 0 && o.epochSteps < perEpoch {
		perEpoch = o.epochSteps
	}
	shown := name
	if o.amp != "" && o.amp != "off" {
		shown = fmt.Sprintf("%s (%s mixed precision, build %s)", name, o.amp, task.pkg)
	}
	say("model %s on %s: %d train / %d validation sequences of %d tokens, batch %d%s, %d steps per epoch\n",
		shown, dev.Name(), tr.N, sets.Val.N, tr.T, o.batch, grp.describe(o.batch), perEpoch)
	total := o.epochs * ((perEpoch + max(accum, 1) - 1) / max(accum, 1))
	if err := o.recipe.apply(m.Session(), total); err != nil {
		return nil, err
	}
	if err := setPipelined(m.Session(), dev); err != nil {
		return nil, err
	}
	o.recipe.describe(m.Session(), total, say)
	if o.recipeArgs != nil {
		if *o.recipeArgs, err = o.recipe.peerArgs(m.Session().Plan(), total); err != nil {
			return nil, err
		}
	}
	if o.recipeReady != nil {
		if err := o.recipeReady(); err != nil {
			return nil, err
		}
	}
	if o.peerOnly {
		return nil, nil
	}
	if accum > 1 {
		say("accumulating %d micro-batches of %d per update (%d rows per update)\n", accum, o.batch, accum*o.batch*grp.size())
	}
	if err := o.rec.begin(dev, o.batch); err != nil {
		return nil, err
	}
	var results []epochResult
	for epoch := 1; epoch <= o.epochs; epoch++ {
		m.Train()
		if o.profile && epoch == o.epochs {
			m.Session().SetProfiling(true)
		}
		var bar *progressbar.ProgressBar
		if !o.quiet {
			bar = progressbar.NewOptions(perEpoch, progressbar.OptionSetDescription(fmt.Sprintf("epoch %d", epoch)),
				progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish())
		}
		start := time.Now()
		o.rec.epochStart()
		sum, n, calls := 0.0, 0, 0
		j := judged{s: m.Session()}
		got := func(loss float32, rows int) error {
			sum += float64(loss)
			n++
			if err := o.rec.stepDone(m.Session(), epoch, loss, rows); err != nil {
				return err
			}
			if bar != nil {
				bar.Describe(fmt.Sprintf("epoch %d loss %.4f", epoch, sum/float64(n)))
				bar.Add(1)
			}
			return nil
		}
		for calls < perEpoch {
			x, y, mask, ok := loader.Next()
			if !ok {
				break
			}
			calls++
			loss, err := m.Step(seqBatch{x, y, mask})
			if err := j.step(loss, len(x)/tr.T, err, n, got); err != nil {
				return nil, fmt.Errorf("epoch %d %w", epoch, err)
			}
		}
		if err := j.flush(n, got); err != nil {
			return nil, fmt.Errorf("epoch %d %w", epoch, err)
		}
		loader.Reset()
		elapsed := time.Since(start)
		if bar != nil {
			bar.Finish()
		}
		ev, err := grp.evaluate(m, sets.Val, o.batch)
		if err != nil {
			return nil, err
		}
		ls := []float64{sum, float64(n)} // the loss over every rank's batches
		if err := grp.sum(ls); err != nil {
			return nil, err
		}
		loss := ls[0] / ls[1]
		perS := float64(n*o.batch*grp.size()) / elapsed.Seconds()
		say("epoch %d: train loss %.4f, validation %s, %.0f sequences/s (%.0f tokens/s, %.1f s)\n",
			epoch, loss, ev, perS, perS*float64(tr.T), elapsed.Seconds())
		r := epochResult{Epoch: epoch, Loss: loss, PerSecond: perS, Steps: n}
		le := runlog.Eval{Epoch: epoch, TrainLoss: r.Loss, SamplesPerS: perS}
		if ev.perSeq {
			r.ValAcc, le.ValAcc = ev.acc, runlog.F(ev.acc)
		} else {
			r.BPC, le.ValBPC = ev.bpc, runlog.F(ev.bpc)
		}
		results = append(results, r)
		if err := o.rec.evalDone(le); err != nil {
			return nil, err
		}
	}
	if err := flushAccumulation(m.Session(), grp.lead()); err != nil {
		return nil, err
	}
	describeAMP(m.Session(), say)
	if sets.Test != nil && o.epochs > 0 {
		ev, err := grp.evaluate(m, sets.Test, o.batch)
		if err != nil {
			return nil, err
		}
		say("test %s\n", ev)
		last := &results[len(results)-1]
		last.Acc = ev.acc
		if err := o.rec.evalDone(runlog.Eval{Epoch: last.Epoch, TrainLoss: last.Loss, TestAcc: runlog.F(ev.acc), SamplesPerS: last.PerSecond}); err != nil {
			return nil, err
		}
	}
	if o.profile && grp.lead() {
		fmt.Printf("\nprofile of epoch %d (training steps and validation predictions):\n", o.epochs)
		if err := runtime.WriteProfile(os.Stdout, m.Session().Profile()); err != nil {
			return nil, err
		}
		if err := writeTrace(m.Session()); err != nil {
			return nil, err
		}
	}
	if o.save != "" && grp.lead() { // rank 0's replica
		if err := saveCheckpoint(m, o.save); err != nil {
			return nil, err
		}
		fmt.Println("saved", o.save)
	}
	if o.trained != nil {
		if err := m.Save(o.trained); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// seqEval is a model's quality on a split: the mean cross-entropy per
// target in nats, and the accuracy of its most likely class.
type seqEval struct {
	loss, acc, bpc float64
	perSeq         bool // one target per sequence: report accuracy
}

func (e seqEval) String() string {
	if e.perSeq {
		return fmt.Sprintf("accuracy %.2f%% (loss %.4f)", 100*e.acc, e.loss)
	}
	return fmt.Sprintf("%.4f bits per character (accuracy %.2f%%)", e.bpc, 100*e.acc)
}

// evaluate runs the model in eval mode over a whole split, each rank of
// a group over its contiguous share, the sums added over the ranks.
func (g *group) evaluate(m seqModel, s *data.Sequences, batch int) (seqEval, error) {
	lo, hi := 0, s.N
	if g.comm != nil {
		r, n := g.comm.Rank(), g.comm.Size()
		lo, hi = s.N*r/n, s.N*(r+1)/n
	}
	var sums [3]float64
	if hi > lo {
		nll, correct, n, err := evalSums(m, s.Part(lo, hi), batch)
		if err != nil {
			return seqEval{}, err
		}
		sums = [3]float64{nll, float64(correct), float64(n)}
	}
	if err := g.sum(sums[:]); err != nil {
		return seqEval{}, err
	}
	e := seqEval{loss: sums[0] / sums[2], acc: sums[1] / sums[2], perSeq: s.YPer == 1}
	e.bpc = e.loss / math.Ln2
	return e, nil
}

// evaluate runs the model in eval mode over a whole split in this process.
func evaluate(m seqModel, s *data.Sequences, batch int) (seqEval, error) {
	return (&group{}).evaluate(m, s, batch)
}

// evalSums is the summed cross-entropy (nats), the correct predictions and
// the targets of a split, in eval mode. The cross-entropy is taken in
// float64 from the logits, so it does not depend on how the batch divides
// the split.
func evalSums(m seqModel, s *data.Sequences, batch int) (float64, int, int, error) {
	m.Eval()
	defer m.Train()
	l, err := data.NewSeqLoader(s, batch, false, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	var nll float64
	correct, n := 0, 0
	for {
		x, y, mask, ok := l.Next()
		if !ok {
			break
		}
		logits, err := m.Predict(seqBatch{x, y, mask})
		if err != nil {
			return 0, 0, 0, err
		}
		C := len(logits) / len(y)
		for r, want := range y {
			row := logits[r*C : (r+1)*C]
			best, mx := 0, math.Inf(-1)
			for c, v := range row {
				if float64(v) > mx {
					best, mx = c, float64(v)
				}
			}
			z := 0.0
			for _, v := range row {
				z += math.Exp(float64(v) - mx)
			}
			nll += mx + math.Log(z) - float64(row[want])
			if int32(best) == want {
				correct++
			}
			n++
		}
	}
	return nll, correct, n, nil
}

// sampleOptions are the flags of -sample.
type sampleOptions struct {
	on          bool // -sample was given (an empty prompt starts a fortune)
	prompt      string
	length      int
	temperature float64
	load        string // generate from this checkpoint instead of training
}

// seqSamplers are the models that generate text with -sample: each reads
// a checkpoint of its row's model (transformer.go adds gpt).
var seqSamplers = map[string]func(dev runtime.Device, ckpt io.Reader, prompt string, length int, temperature float64, seed uint64) (string, error){
	"lstm": sampleText,
}

// trainSeq is main for the sequence models: train (or, with -sample and
// -load, only load), compare with PyTorch, sample.
func trainSeq(name string, task seqTask, o seqOptions, batchS string, torch, concurrent bool, script string, so sampleOptions) error {
	b, err := parseBatch(batchS)
	if err != nil {
		return err
	}
	if b == 0 {
		return fmt.Errorf("-batch auto: not offered for the sequence models; give a size")
	}
	o.batch = b
	sample, ok := seqSamplers[name]
	if so.on && !ok {
		return fmt.Errorf("-sample: only the lstm and gpt models generate text")
	}
	if so.load != "" && !so.on {
		return fmt.Errorf("-load: give -sample too (-load only feeds the generator)")
	}
	if o.amp != "" && o.amp != "off" && !(so.on && so.load != "") {
		g, err := compileAMP(task.pkg, o.amp, o.device, func(f string, a ...any) {
			if o.grp == nil || o.grp.lead() {
				fmt.Printf(f, a...)
			}
		})
		if err != nil {
			return err
		}
		task.pkg = g.Name
	}
	var ckpt io.Reader
	if so.load != "" {
		f, err := os.Open(so.load)
		if err != nil {
			return err
		}
		defer f.Close()
		ckpt = f
	} else {
		var trained bytes.Buffer
		if so.on {
			o.trained = &trained
		}
		ckpt = &trained
		if torch {
			if o.peerArgs, err = o.rec.peerArgs(); err != nil {
				return err
			}
			if o.amp == "bf16" { // checkAMP refused fp16 with -torch
				o.peerArgs = append(o.peerArgs, "--amp", "bf16")
			}
		}
		var recipeArgs []string
		o.recipeArgs = &recipeArgs
		var peer *seqPeer
		if torch && concurrent {
			// Started before ngen's first step, once the recipe is
			// resolved (its schedule spans the run's steps), on its own
			// threads: the two runs share the machine, so their
			// throughput columns are not a comparison.
			o.recipeReady = func() error {
				po := o
				po.peerArgs = append(slices.Clone(o.peerArgs), recipeArgs...)
				peer, err = startSeqPeer(task, script, name, po)
				return err
			}
		}
		ours, err := runSeq(name, task, o)
		if err != nil {
			if peer != nil {
				peer.stop()
			}
			return err
		}
		if torch && peer == nil {
			o.peerArgs = append(o.peerArgs, recipeArgs...)
			peer, err = startSeqPeer(task, script, name, o)
			if err != nil {
				return err
			}
		}
		if peer != nil {
			if err := peer.compare(ours); err != nil {
				return err
			}
		}
		if err := o.rec.finish(); err != nil {
			return err
		}
	}
	if !so.on || (o.grp != nil && !o.grp.lead()) { // rank 0 alone samples
		return nil
	}
	dev, err := runtime.OpenDevice(o.device, o.threads)
	if err != nil {
		return err
	}
	defer dev.Close()
	text, err := sample(dev, ckpt, so.prompt, so.length, so.temperature, o.seed)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s%s\n", so.prompt, text)
	return nil
}
