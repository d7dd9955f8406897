package dist_test

import (
	"math"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// scaledBF16 is an MLP (784 → 32 → 10, SGD) in bf16 with a loss scaler
// starting at scale, compiled at run time: no generated package scales
// bf16, whose gradients (f32's range) can overflow a sum.
func scaledBF16(dev runtime.Device, batch int, seed uint64, scale float64) (model, error) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(784))
	y := b.Input("y", ir.I32, ir.S("B"))
	logits := b.Linear("fc2", b.Unary("relu", b.Linear("fc1", x, 32)), 10)
	m := b.Model("bf16_scaled", b.Binary("cross_entropy", logits, y), logits, ir.Optimizer{Kind: "sgd", LR: 0.1})
	m.Precision = &ir.Precision{Type: ir.BF16, Scaler: &ir.LossScaler{Init: scale, Growth: 2, Backoff: 0.5, Interval: 100}, Pos: b.Pos}
	prog, err := compiler.Compile(m, compiler.Options{Fuse: true})
	if err != nil {
		return nil, err
	}
	s, err := jit.Session(dev, prog, runtime.SessionOptions{MaxBatch: batch, Seed: seed})
	if err != nil {
		return nil, err
	}
	return sessionModel{s}, nil
}

// sessionModel is a session as the workers' model.
type sessionModel struct{ s *runtime.Session }

func (m sessionModel) Step(x []float32, y []int32) (float32, error) {
	if err := m.s.WriteInput("x", x, len(y)); err != nil {
		return 0, err
	}
	if err := m.s.WriteInput("y", y, len(y)); err != nil {
		return 0, err
	}
	if err := m.s.Run("step", len(y)); err != nil {
		return 0, err
	}
	l, err := m.s.StepLoss()
	return float32(l), err
}

func (m sessionModel) Params() []string { return m.s.Names("param") }

func (m sessionModel) Param(name string) ([]float32, error) {
	i, err := m.s.Lookup("param", name)
	if err != nil {
		return nil, err
	}
	v, err := m.s.ReadFloats(i)
	out := make([]float32, len(v))
	for k, x := range v {
		out[k] = float32(x)
	}
	return out, err
}

func (m sessionModel) Session() *runtime.Session { return m.s }
func (m sessionModel) Close() error              { return m.s.Close() }

// fixedBatch is the batch every rank of a bf16_scaled job trains on:
// images a thousand times brighter, so that a scale f32 holds (at most
// 2^127) brings the gradients near f32's range.
func fixedBatch(batch int, seed uint64) ([]float32, []int32) {
	ds := synthetic(batch, seed)
	for i := range ds.X {
		ds.X[i] *= 1000
	}
	return ds.X, ds.Y
}

// TestDataParallelSumOverflowSkips: 2 ranks of a bf16 model with a loss
// scaler train on the same batch at a scale that puts each rank's
// largest gradient in (FLT_MAX/2, FLT_MAX]: every rank's gradients are
// finite (its guard passes), their sum over the ranks is not. Every
// rank skips that step and halves its scale (the update check fails
// alike on each, and under a scaler a non-finite gradient vector is a
// skip: runtime's sumOverflowed), and the next step, at half the scale,
// sums to a finite gradient and updates on both.
func TestDataParallelSumOverflowSkips(t *testing.T) {
	const batch, dataSeed = 8, 5
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	x, y := fixedBatch(batch, dataSeed)
	// One rank's largest gradient at scale 1 (rank 0's seed: the
	// broadcast gives every rank its parameters) sets the scale.
	grads := func(scale float64) []float64 {
		m, err := scaledBF16(dev, batch, 100, scale)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if _, err := m.Step(x, y); err != nil || m.Session().StepSkipped() {
			t.Fatalf("one process at scale %g: %v, skipped %v", scale, err, m.Session().StepSkipped())
		}
		i, err := m.Session().Lookup("grads", "grads")
		if err != nil {
			t.Fatal(err)
		}
		g, err := m.Session().ReadFloats(i)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	big := func(g []float64) (m float64) {
		for _, v := range g {
			m = max(m, math.Abs(v))
		}
		return m
	}
	_, e := math.Frexp(math.MaxFloat32 / big(grads(1)))
	scale := math.Ldexp(1, e-1) // the largest gradient in (FLT_MAX/2, FLT_MAX]
	if scale > 0x1p127 {
		t.Fatalf("scale %g: beyond f32", scale)
	}
	if g := big(grads(scale)); !(g > math.MaxFloat32/2 && g <= math.MaxFloat32) {
		t.Fatalf("largest gradient %g at scale %g: want one in (FLT_MAX/2, FLT_MAX]", g, scale)
	}

	j := job{Model: "bf16_scaled", Scale: scale, Batch: batch, Steps: 2, DataSeed: dataSeed, TotalRows: 4 * batch,
		Out: filepath.Join(t.TempDir(), "params"), Timeout: time.Minute}
	if out, err := mpirun(t, 2, j, 2*time.Minute); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	logs := readLogs(t, j.Out)
	if !reflect.DeepEqual(logs[0], logs[1]) {
		t.Fatalf("the ranks' scalers differ:\nrank 0 %+v\nrank 1 %+v", logs[0], logs[1])
	}
	l := logs[0]
	want := scalerLog{Scales: []float64{scale / 2, scale / 2}, Skipped: []bool{true, false}, Steps: []int{0, 1}, Schedule: []int{1, 2}, Errors: []string{"", ""}}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("rank 0's scaler %+v, want %+v", l, want)
	}
	if p0, p1 := readParams(t, j.Out+".0"), readParams(t, j.Out+".1"); !reflect.DeepEqual(p0, p1) {
		t.Errorf("the ranks' parameters differ")
	}
}
