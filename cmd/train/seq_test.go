package main

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runlog"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// tinyFortunes writes a fortunes directory of n short made-up fortunes, so
// that an epoch of the seed LSTM takes seconds.
func tinyFortunes(t *testing.T, n int) string {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the cat sat on a mat and you will meet a tall dark stranger today tomorrow never")
	var b strings.Builder
	for i := 0; i < n; i++ {
		for w := 0; w < 30; w++ {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(" \n"[rng.IntN(2)])
		}
		fmt.Fprintf(&b, "\t-- fortune %d\n%%\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "made-up"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tinyWords writes the five word lists with made-up words whose letters
// give their language away.
func tinyWords(t *testing.T, n int) string {
	dir := t.TempDir()
	letters := []string{"abcde", "fghij", "klmno", "pqrst", "uvwxy"}
	rng := rand.New(rand.NewPCG(3, 4))
	for c, l := range data.WordLanguages {
		var b strings.Builder
		for i := 0; i < n; i++ {
			for k := 3 + rng.IntN(8); k > 0; k-- {
				b.WriteByte(letters[c][rng.IntN(5)])
			}
			b.WriteByte('\n')
		}
		if err := os.WriteFile(filepath.Join(dir, l.File), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSeqTrainRNN(t *testing.T) {
	o := seqOptions{epochs: 3, batch: 32, seed: 2, threads: 1, device: "cpu", dir: tinyWords(t, 300), quiet: true}
	res, err := runSeq("rnn", seqTasks["rnn"], o)
	if err != nil {
		t.Fatal(err)
	}
	last := res[len(res)-1]
	// Letters that give the class away: three epochs learn them.
	if last.ValAcc < 0.6 || last.Acc < 0.6 || last.Acc > 1 {
		t.Fatalf("after 3 epochs: validation accuracy %.3f, test %.3f; want both over 0.6", last.ValAcc, last.Acc)
	}
}

func TestSeqTrainAndSample(t *testing.T) {
	var ckpt bytes.Buffer
	o := seqOptions{epochs: 1, batch: 16, seed: 2, threads: 1, device: "cpu", dir: tinyFortunes(t, 40), quiet: true, trained: &ckpt}
	res, err := runSeq("lstm", seqTasks["lstm"], o)
	if err != nil {
		t.Fatal(err)
	}
	// An untrained model scores log2(vocab) ≈ 6.6 bits; the made-up text
	// has few characters.
	if bpc := res[0].BPC; !(bpc > 0 && bpc < math.Log2(float64(data.CharVocab))) {
		t.Fatalf("validation bits per character %v after an epoch", bpc)
	}
	dev, err := runtime.OpenDevice("cpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	gen := func(seed uint64, temperature float64) string {
		s, err := sampleText(dev, bytes.NewReader(ckpt.Bytes()), "The cat", 80, temperature, seed)
		if err != nil {
			t.Fatal(err)
		}
		if n := utf8.RuneCountInString(s); n != 80 {
			t.Fatalf("generated %d characters, want 80", n)
		}
		return s
	}
	a, b, c := gen(7, 1), gen(7, 1), gen(8, 1)
	if a != b {
		t.Fatalf("seed 7 twice gave different text:\n%q\n%q", a, b)
	}
	if a == c {
		t.Fatalf("seeds 7 and 8 gave the same text %q", a)
	}
	if g0, g1 := gen(7, 0), gen(8, 0); g0 != g1 {
		t.Fatalf("temperature 0 depends on the seed:\n%q\n%q", g0, g1)
	}
	if _, err := sampleText(dev, strings.NewReader("not a checkpoint"), "x", 5, 1, 1); err == nil || !strings.Contains(err.Error(), "-load") {
		t.Fatalf("bad checkpoint: err = %v", err)
	}
}

// TestSeqEpochSteps: -epoch-steps caps every epoch of ngen and of the
// PyTorch peer at the same number of steps.
func TestSeqEpochSteps(t *testing.T) {
	dir := tinyFortunes(t, 40)
	o := seqOptions{epochs: 2, epochSteps: 3, batch: 4, seed: 2, threads: 1, device: "cpu", dir: dir, quiet: true}
	res, err := runSeq("lstm", seqTasks["lstm"], o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Steps != 3 {
			t.Fatalf("epoch %d trained %d steps, want 3 (-epoch-steps 3)", r.Epoch, r.Steps)
		}
	}
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	if err := compareSeq(res, seqTasks["lstm"], "../../bench/torch_train.py", "lstm", o); err != nil {
		t.Fatal(err)
	}
}

// TestSeqTorchPeer runs the PyTorch peer for one epoch of each sequence
// model on the sequences cmd/train writes for it.
func TestSeqTorchPeer(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	for _, c := range []struct{ name, dir string }{{"rnn", tinyWords(t, 100)}, {"lstm", tinyFortunes(t, 20)},
		{"gpt", tinyFortunes(t, 16)}, {"transformer", tinyFortunes(t, 16)}} {
		o := seqOptions{epochs: 1, batch: 16, seed: 2, threads: 1, device: "cpu", dir: c.dir, quiet: true}
		ours := []epochResult{{Epoch: 1}}
		if err := compareSeq(ours, seqTasks[c.name], "../../bench/torch_train.py", c.name, o); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
}

// TestSeqTorchConcurrent runs -torch-concurrent: the peer starts before
// ngen trains and its epochs are checked against ngen's (same step
// counts); when ngen's run fails, the peer is stopped and its data file
// removed.
func TestSeqTorchConcurrent(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	o := seqOptions{epochs: 2, epochSteps: 2, seed: 2, threads: 1, device: "cpu", dir: tinyFortunes(t, 20), quiet: true}
	if err := trainSeq("lstm", seqTasks["lstm"], o, "8", true, true, "../../bench/torch_train.py", sampleOptions{}); err != nil {
		t.Fatal(err)
	}
	o.device = "no-such-device"
	err := trainSeq("lstm", seqTasks["lstm"], o, "8", true, true, "../../bench/torch_train.py", sampleOptions{})
	if err == nil || !strings.Contains(err.Error(), "no-such-device") {
		t.Fatalf("ngen on a missing device: got %v, want its error", err)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("the peer's data file was left behind: %v", left)
	}
}

// TestSeqTorchOnly runs -torch-only: the PyTorch peer alone, on the
// recipe ngen's run resolves (the gpt's warm-up, cosine and clipping),
// its epochs printed and its -log written, while ngen trains no step and
// writes no log of its own; the flags that need ngen's run are refused.
func TestSeqTorchOnly(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dir, out := tinyFortunes(t, 16), t.TempDir()
	logf := filepath.Join(out, "run.jsonl")
	b, err := trainCmd("-model", "gpt", "-epochs", "2", "-epoch-steps", "2", "-batch", "4", "-threads", "1", "-quiet", "-data", dir,
		"-torch-only", "-log", logf, "-torch-script", filepath.Join("..", "..", "bench", "torch_train.py")).CombinedOutput()
	if err != nil {
		t.Fatalf("train: %v\n%s", err, b)
	}
	s := string(b)
	if !strings.Contains(s, "schedule WarmupCosine") || !strings.Contains(s, "clipped to global norm 1") {
		t.Fatalf("the recipe is not the gpt's default:\n%s", s)
	}
	if strings.Contains(s, "epoch 1: train loss") {
		t.Fatalf("ngen trained:\n%s", s)
	}
	rows := regexp.MustCompile(`(?m)^ +(\d) +([0-9.]+) +([0-9.]+) +\d+ +2$`).FindAllStringSubmatch(s, -1)
	if len(rows) != 2 {
		t.Fatalf("want the peer's two epochs of 2 steps:\n%s", s)
	}
	if _, err := os.Stat(logf); !os.IsNotExist(err) {
		t.Fatalf("ngen's log was written (%v)", err)
	}
	l, err := runlog.ReadFile(torchLogPath(logf))
	if err != nil {
		t.Fatal(err)
	}
	if l.Run.Framework != "pytorch" || len(l.Steps) != 4 || len(l.Evals) != 2 {
		t.Fatalf("the peer's log: run %+v, %d steps, %d evals", l.Run, len(l.Steps), len(l.Evals))
	}
	for _, c := range [][]string{{"-model", "gpt", "-torch-only", "-save", filepath.Join(out, "x.safetensors")}, {"-model", "mlp", "-torch-only"}} {
		b, err := trainCmd(c...).CombinedOutput()
		if err == nil || !strings.Contains(string(b), "-torch-only") {
			t.Fatalf("%v: err %v, output %s", c, err, b)
		}
	}
}
