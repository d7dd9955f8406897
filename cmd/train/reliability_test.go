package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// TestFlagsRefused (issue 27): flags that were accepted and then not
// applied (exit 0) are refused before anything runs, for every model.
func TestFlagsRefused(t *testing.T) {
	base := func(model string) runFlags {
		return runFlags{model: model, epochs: 1, accum: 1, batch: "64", device: "cpu", length: 200, temperature: 0.8, set: map[string]bool{}}
	}
	with := func(f runFlags, edit func(*runFlags), given ...string) runFlags {
		f.set = map[string]bool{}
		for _, g := range given {
			f.set[g] = true
		}
		edit(&f)
		return f
	}
	for _, tc := range []struct {
		name string
		f    runFlags
		want string
	}{
		{"-accumulate 0 for rnn", with(base("rnn"), func(f *runFlags) { f.accum = 0 }), "-accumulate 0"},
		{"-accumulate 2^62", with(base("mlp"), func(f *runFlags) { f.accum = 4611686018427387904 }), "-accumulate 4611686018427387904"},
		{"-epochs -1 for gpt", with(base("gpt"), func(f *runFlags) { f.epochs = -1 }), "-epochs -1"},
		{"-memory without -batch auto", with(base("mlp"), func(f *runFlags) { f.memory = 40000000 }, "memory"), "only -batch auto reads a budget"},
		{"-memory -5", with(base("mlp"), func(f *runFlags) { f.batch, f.memory = "auto", -5 }, "memory"), "-memory -5"},
		{"-sample for mlp", with(base("mlp"), func(*runFlags) {}, "sample"), "-sample: only the gpt and lstm models generate text"},
		{"-sample for rnn", with(base("rnn"), func(*runFlags) {}, "sample"), "only the gpt and lstm"},
		{"-temperature NaN", with(base("lstm"), func(f *runFlags) { f.temperature = math.NaN() }, "sample", "temperature"), "-temperature NaN"},
		{"-temperature -1", with(base("gpt"), func(f *runFlags) { f.temperature = -1 }, "sample", "temperature"), "-temperature -1"},
		{"-temperature +Inf", with(base("gpt"), func(f *runFlags) { f.temperature = math.Inf(1) }, "sample", "temperature"), "-temperature +Inf"},
		{"-length -5", with(base("lstm"), func(f *runFlags) { f.length = -5 }, "sample", "length"), "-length -5"},
		{"-length 0", with(base("lstm"), func(f *runFlags) { f.length = 0 }, "sample", "length"), "-length 0"},
		{"-length without -sample", with(base("lstm"), func(f *runFlags) { f.length = 5 }, "length"), "give -sample too"},
		{"-threads 2^60", with(base("mlp"), func(f *runFlags) { f.threads = 1 << 60 }), "-threads 1152921504606846976"},
		{"-threads -1", with(base("lstm"), func(f *runFlags) { f.threads = -1 }), "-threads -1"},
		{"stray argument", with(base("rnn"), func(f *runFlags) { f.args = []string{"10"} }), `unexpected argument "10"`},
		{"-deterministic on cuda", with(base("mlp"), func(f *runFlags) { f.deterministic, f.threads, f.device = true, 1, "cuda" }), "-deterministic: -device cuda"},
		{"-deterministic without -threads", with(base("mlp"), func(f *runFlags) { f.deterministic = true }), "-deterministic: give -threads N"},
		{"-deterministic with -dist", with(base("rnn"), func(f *runFlags) { f.deterministic, f.threads, f.dist = true, 2, "mpi" }), "-deterministic: -dist mpi"},
		{"-deterministic with -batch auto", with(base("mlp"), func(f *runFlags) { f.deterministic, f.threads, f.batch = true, 2, "auto" }), "-batch auto without -memory"},
	} {
		if err := tc.f.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, f := range []runFlags{
		base("mlp"), base("gpt"),
		with(base("lstm"), func(f *runFlags) { f.temperature, f.length = 0, 1 }, "sample", "temperature", "length"),
		with(base("mlp"), func(f *runFlags) { f.batch, f.memory = "auto", 40000000 }, "memory"),
		with(base("mlp"), func(f *runFlags) { f.deterministic, f.threads = true, 2 }),
		with(base("mlp"), func(f *runFlags) { f.deterministic, f.threads, f.batch, f.memory = true, 1, "auto", 1<<26 }, "memory"),
		with(base("rnn"), func(f *runFlags) { f.accum = maxAccumulate }),
	} {
		if err := f.check(); err != nil {
			t.Errorf("%+v refused: %v", f, err)
		}
	}
	if err := checkRows(1<<20, 4096, 1); err == nil {
		t.Error("2^32 rows per update accepted")
	}
	if err := checkRows(4, 64, 2); err != nil {
		t.Error(err)
	}
}

// trainMain runs this binary as the train command (TestMain) and returns
// its exit code and output.
func trainMain(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "NGEN_TRAIN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestFlagsRefusedByMain: the refusals reach the command line (exit 2,
// before any data is read or model built), and -save's directory is
// checked before training for the sequence models too (it failed only
// after an epoch).
func TestFlagsRefusedByMain(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "m.ckpt")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-model", "lstm", "-save", missing, "-data", "/nonexistent"}, "-save " + missing},
		{[]string{"-model", "gpt", "-save", missing, "-data", "/nonexistent"}, "-save " + missing},
		{[]string{"-model", "mlp", "-sample", "hi", "-data", "/nonexistent"}, "-sample: only"},
		{[]string{"-model", "rnn", "-accumulate", "0", "-data", "/nonexistent"}, "-accumulate 0"},
		{[]string{"-model", "mlp", "-memory", "-5", "-batch", "auto", "-data", "/nonexistent"}, "-memory -5"},
		{[]string{"-model", "mlp", "-threads", "1152921504606846976", "-data", "/nonexistent"}, "-threads"},
		{[]string{"-model", "nosuch"}, `unknown model "nosuch"`},
		{[]string{"-model", "gpt", "-amp", "bf16", "-attention-form", "tensor", "-data", "/nonexistent"}, "-attention-form"},
	} {
		code, out := trainMain(t, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("train %s: exit %d, output %q; want exit 2 and %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
}

// ckptStep reads ngen.step from a checkpoint.
func ckptStep(t *testing.T, b []byte) int {
	t.Helper()
	f, err := safetensors.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(f.Metadata["ngen.step"])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSeqAccumulate: -accumulate applies to the sequence models (it was
// ignored): 24 micro-batches of 16 RNN sequences, two per update, give
// the parameters of 12 batches of 32 (the same sequences: -epoch-steps
// keeps to full batches; the RNN has no dropout; f32 sums in another
// order). An odd count of micro-batches ends with the last one updated
// alone, so that no gradient is lost and the checkpoint can be written.
func TestSeqAccumulate(t *testing.T) {
	dir := tinyWords(t, 100)
	var a, b, c bytes.Buffer
	oa := seqOptions{epochs: 1, epochSteps: 24, batch: 16, accum: 2, seed: 2, threads: 1, device: "cpu", dir: dir, quiet: true, trained: &a}
	ob := seqOptions{epochs: 1, epochSteps: 12, batch: 32, seed: 2, threads: 1, device: "cpu", dir: dir, quiet: true, trained: &b}
	if _, err := runSeq("rnn", seqTasks["rnn"], oa); err != nil {
		t.Fatal(err)
	}
	if _, err := runSeq("rnn", seqTasks["rnn"], ob); err != nil {
		t.Fatal(err)
	}
	if sa, sb := ckptStep(t, a.Bytes()), ckptStep(t, b.Bytes()); sa != 12 || sb != 12 {
		t.Fatalf("24 micro-batches of 16 gave %d updates, 12 batches of 32 gave %d; want 12 each", sa, sb)
	}
	oc := seqOptions{epochs: 1, epochSteps: 25, batch: 16, accum: 2, seed: 2, threads: 1, device: "cpu", dir: dir, quiet: true, trained: &c}
	rc, err := runSeq("rnn", seqTasks["rnn"], oc)
	if err != nil {
		t.Fatal(err)
	}
	if micro, sc := rc[0].Steps, ckptStep(t, c.Bytes()); micro%2 != 1 || sc != (micro+1)/2 {
		t.Fatalf("%d micro-batches gave %d updates, want %d (an odd count: the last alone)", micro, sc, (micro+1)/2)
	}
	fa, _ := safetensors.Parse(a.Bytes())
	fb, _ := safetensors.Parse(b.Bytes())
	worst := 0.0
	for _, ta := range fa.Tensors {
		if ta.DType != "F32" || strings.HasPrefix(ta.Name, runtime.OptimizerPrefix) {
			continue
		}
		tb, _ := fb.Lookup(ta.Name)
		for i := 0; i+4 <= len(ta.Data); i += 4 {
			x := math.Float32frombits(uint32(ta.Data[i]) | uint32(ta.Data[i+1])<<8 | uint32(ta.Data[i+2])<<16 | uint32(ta.Data[i+3])<<24)
			y := math.Float32frombits(uint32(tb.Data[i]) | uint32(tb.Data[i+1])<<8 | uint32(tb.Data[i+2])<<16 | uint32(tb.Data[i+3])<<24)
			worst = max(worst, math.Abs(float64(x-y)))
		}
	}
	// 12 Adam steps at lr 1e-3: the summation order changes the last
	// bits of the gradients, which Adam's normalisation can turn into a
	// few ulps of a step: 1e-5 absolute.
	if worst > 1e-5 {
		t.Fatalf("accumulated and large-batch parameters differ by %g", worst)
	}
	t.Logf("parameters within %g of the large batches'", worst)
}

// TestSeqDist: `mpirun -np 2 train -model rnn -dist mpi -batch 16` (the
// flag was ignored for the sequence models) prints one epoch line, whose
// loss and validation accuracy (summed over the ranks) are those of one
// process with batches of 32 on the same sequences.
func TestSeqDist(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatalf("mpirun not on PATH (scripts/setup.sh installs openmpi-bin): %v", err)
	}
	dir := tinyWords(t, 100)
	// -epoch-steps 12: full global batches only (the epoch's last would
	// be padded for two ranks, as DistributedSampler pads).
	args := []string{"-model", "rnn", "-epochs", "1", "-epoch-steps", "12", "-threads", "1", "-quiet", "-data", dir}
	line := func(out string) (loss, acc float64) {
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "epoch 1: train loss ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("want one epoch line, got %d:\n%s", len(lines), out)
		}
		f := strings.Fields(lines[0])
		loss, _ = strconv.ParseFloat(strings.TrimSuffix(f[4], ","), 64)
		acc, _ = strconv.ParseFloat(strings.TrimSuffix(f[7], "%"), 64)
		return loss, acc
	}
	code, one := trainMain(t, append(args, "-batch", "32")...)
	if code != 0 {
		t.Fatalf("one process: exit %d\n%s", code, one)
	}
	cmd := exec.Command("mpirun", append([]string{"--oversubscribe", "--allow-run-as-root", "-np", "2", "-x", "NGEN_TRAIN_MAIN",
		os.Args[0], "-dist", "mpi", "-batch", "16"}, args...)...)
	cmd.Env = append(os.Environ(), "NGEN_TRAIN_MAIN=1")
	two, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, two)
	}
	l1, a1 := line(one)
	l2, a2 := line(string(two))
	// The same batches summed in another order: 4 printed decimals agree
	// to a unit or so, the validation accuracy to one word of ~100.
	if math.Abs(l1-l2) > 2e-4 || math.Abs(a1-a2) > 1.01 {
		t.Fatalf("one process: loss %g accuracy %g%%; two: loss %g accuracy %g%%", l1, a1, l2, a2)
	}
	if !strings.Contains(string(two), "×2 processes") {
		t.Fatalf("the run does not say it is split:\n%s", two)
	}
}

// saveEnv makes this binary a -save writer for TestSaveKilledTrain: it
// loads the checkpoint at $NGEN_TEST_SAVE, steps the MLP and writes it
// back with saveCheckpoint (what -save runs), saying "begin N" and then
// waiting for a byte on stdin before each save, "end N" after.
const saveEnv = "NGEN_TEST_SAVE"

func saveWriter(path string) error {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		return err
	}
	m, err := mlp.New(dev, mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		return err
	}
	if err := loadCheckpoint(m, path); err != nil {
		return err
	}
	x, y := make([]float32, 4*784), []int32{1, 7, 3, 0}
	for i := range x {
		x[i] = float32(i%13) / 13
	}
	var one [1]byte
	for {
		if _, err := m.Step(x, y); err != nil {
			return err
		}
		n := m.Session().Steps()
		os.Stdout.WriteString("begin " + strconv.Itoa(n) + "\n")
		if _, err := os.Stdin.Read(one[:]); err != nil {
			return nil
		}
		if err := saveCheckpoint(m, path); err != nil {
			return err
		}
		os.Stdout.WriteString("end " + strconv.Itoa(n) + "\n")
	}
}

// TestSaveKilledTrain (issue 27): -save's writer (saveCheckpoint) killed
// with SIGKILL at a random point of a save, 50 times: the path then holds
// the previous checkpoint or the new one, and it loads.
func TestSaveKilledTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("50 processes killed while saving: about 30 s")
	}
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	path := filepath.Join(t.TempDir(), "mlp.ckpt")
	m, err := mlp.New(dev, mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := saveCheckpoint(m, path); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(27, 6))
	saveTime, midSave := 50*time.Millisecond, 0
	for trial := 0; trial < 50; trial++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), saveEnv+"="+path)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		want, ends, last, writing := 1+rng.IntN(3), 0, -1, -1
		var began time.Time
		buf := make([]byte, 0, 256)
		for writing < 0 || ends < want {
			var c [1]byte
			if _, err := out.Read(c[:]); err != nil {
				t.Fatalf("trial %d: the writer stopped: %v\n%s", trial, err, stderr.String())
			}
			if c[0] != '\n' {
				buf = append(buf, c[0])
				continue
			}
			f := strings.Fields(string(buf))
			buf = buf[:0]
			n, _ := strconv.Atoi(f[1])
			if f[0] == "begin" {
				writing, began = n, time.Now()
				in.Write([]byte{1})
			} else {
				last, writing = n, -1
				ends++
				saveTime = time.Since(began)
			}
		}
		time.Sleep(time.Duration(rng.Int64N(int64(saveTime * 5 / 4))))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := mlp.New(dev, mlp.Options{Batch: 4, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Load(bytes.NewReader(b)); err != nil {
			t.Fatalf("trial %d: killed while saving step %d: the file does not load: %v", trial, writing, err)
		}
		got := r.Session().Steps()
		r.Close()
		if got != last && got != writing {
			t.Fatalf("trial %d: the file holds step %d; the writer had finished step %d and was writing step %d", trial, got, last, writing)
		}
		if got == last {
			midSave++
		}
	}
	if midSave == 0 {
		t.Fatal("no kill landed inside a save")
	}
	t.Logf("%d of 50 kills left the previous checkpoint, the rest the new one", midSave)
}

// TestDeterministicRuns: two runs of `train -deterministic` (the MLP with
// dropout, 2 threads) write byte-identical checkpoints, and the flag
// refuses -threads 0 from the command line.
func TestDeterministicRuns(t *testing.T) {
	dir := smallFashionMNIST(t, 256, 100)
	out := t.TempDir()
	var ckpts [][]byte
	for run := 0; run < 2; run++ {
		path := filepath.Join(out, "run"+strconv.Itoa(run))
		code, text := trainMain(t, "-model", "mlp", "-epochs", "2", "-batch", "32", "-threads", "2", "-deterministic", "-quiet", "-data", dir, "-save", path)
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", run, code, text)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ckpts = append(ckpts, b)
	}
	if !bytes.Equal(ckpts[0], ckpts[1]) {
		t.Fatal("two -deterministic runs wrote different checkpoints")
	}
	if code, text := trainMain(t, "-model", "mlp", "-deterministic", "-data", dir); code != 2 || !strings.Contains(text, "give -threads N") {
		t.Fatalf("-deterministic without -threads: exit %d\n%s", code, text)
	}
}
