package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Gradient accumulation (runtime/accumulate.go): k micro-batches of b rows
// then one update give the parameters of one step on the k·b rows.

type accBatch struct {
	x []float64
	y []int32
}

func accData(n, in, classes int, seed uint64) accBatch {
	rng := rand.New(rand.NewPCG(seed, 11))
	d := accBatch{x: make([]float64, n*in), y: make([]int32, n)}
	for i := range d.x {
		d.x[i] = rng.NormFloat64()
	}
	for i := range d.y {
		d.y[i] = int32(rng.IntN(classes))
	}
	return d
}

func concat(bs ...accBatch) accBatch {
	var out accBatch
	for _, b := range bs {
		out.x = append(out.x, b.x...)
		out.y = append(out.y, b.y...)
	}
	return out
}

func feed(t *testing.T, s *runtime.Session, d accBatch) int {
	t.Helper()
	rows := len(d.y)
	if err := s.WriteInput("x", d.x, rows); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteInput("y", d.y, rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

func params(t *testing.T, s *runtime.Session) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, n := range s.Names("param") {
		i, _ := s.Lookup("param", n)
		v, err := s.ReadFloats(i)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = v
	}
	return out
}

func sameParams(t *testing.T, what string, got, want map[string][]float64) {
	t.Helper()
	for n, w := range want {
		for i := range w {
			// f64, and the batch's sums run in another order: 1e-12 relative.
			if d := math.Abs(got[n][i] - w[i]); d > 1e-12*(1+math.Abs(w[i])) || math.IsNaN(got[n][i]) {
				t.Fatalf("%s: %s[%d] = %.17g, want %.17g", what, n, i, got[n][i], w[i])
			}
		}
	}
}

const accIn, accClasses, accB = 6, 3, 4

func accSession(t *testing.T, dev runtime.Device, p *compiler.Program, batch, k int) *runtime.Session {
	t.Helper()
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: batch, Seed: 9, AccumulationSteps: k})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestAccumulateMatchesLargeBatch(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	opts := []ir.Optimizer{irtest.Adam, {Kind: "sgd", LR: 0.1, Momentum: 0.9}}
	for _, fuse := range []bool{true, false} {
		for _, opt := range opts {
			p, err := compiler.Compile(irtest.MLP(ir.F64, accIn, 8, accClasses, 0, opt), compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []int{2, 3, 4} {
				big := accSession(t, dev, p, k*accB, 0)
				small := accSession(t, dev, p, accB, k)
				for u := 0; u < 3; u++ {
					var micro []accBatch
					for j := 0; j < k; j++ {
						micro = append(micro, accData(accB, accIn, accClasses, uint64(100*u+j)))
						if err := small.Run("step", feed(t, small, micro[j])); err != nil {
							t.Fatal(err)
						}
					}
					if err := big.Run("step", feed(t, big, concat(micro...))); err != nil {
						t.Fatal(err)
					}
				}
				if big.Steps() != 3 || small.Steps() != 3 || small.Pending() != 0 {
					t.Fatalf("steps %d and %d, pending %d", big.Steps(), small.Steps(), small.Pending())
				}
				sameParams(t, fmt.Sprintf("%s fuse=%v k=%d", opt.Kind, fuse, k), params(t, small), params(t, big))
			}
		}
	}
}

// TestAccumulateSkipsBadMicroBatch: a micro-batch that fails its checks
// (a label out of range, a non-finite loss) adds nothing, so the update
// equals one over the good micro-batches alone.
func TestAccumulateSkipsBadMicroBatch(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	p, err := compiler.Compile(irtest.MLP(ir.F64, accIn, 8, accClasses, 0, irtest.Adam), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	good := []accBatch{accData(accB, accIn, accClasses, 1), accData(accB, accIn, accClasses, 2), accData(accB, accIn, accClasses, 3)}
	badLabel := accData(accB, accIn, accClasses, 4)
	badLabel.y[2] = 99
	badValue := accData(accB, accIn, accClasses, 5)
	badValue.x[3] = math.Inf(1)

	// AccumulationSteps 3: the bad micro-batches fail and are not counted.
	small := accSession(t, dev, p, accB, 3)
	for i, d := range []accBatch{good[0], badLabel, good[1], badValue, good[2]} {
		err := small.Run("step", feed(t, small, d))
		if bad := i == 1 || i == 3; bad != (err != nil) {
			t.Fatalf("micro-batch %d: error %v", i, err)
		}
	}
	big := accSession(t, dev, p, 3*accB, 0)
	if err := big.Run("step", feed(t, big, concat(good...))); err != nil {
		t.Fatal(err)
	}
	if small.Steps() != 1 {
		t.Fatalf("%d updates, want 1", small.Steps())
	}
	sameParams(t, "bad micro-batches skipped", params(t, small), params(t, big))

	// RunGrads and RunUpdate, with the last micro-batch failing: the
	// update uses the two good ones.
	split := accSession(t, dev, p, accB, 0)
	if err := split.RunUpdate(); err == nil || !strings.Contains(err.Error(), "no gradients") {
		t.Fatalf("RunUpdate with nothing accumulated: %v", err)
	}
	for i, d := range []accBatch{good[0], good[1], badLabel} {
		if err := split.RunGrads(feed(t, split, d)); (i == 2) != (err != nil) {
			t.Fatalf("RunGrads %d: %v", i, err)
		}
	}
	if split.Pending() != 2 {
		t.Fatalf("pending %d, want 2", split.Pending())
	}
	if err := split.RunUpdate(); err != nil {
		t.Fatal(err)
	}
	big2 := accSession(t, dev, p, 2*accB, 0)
	if err := big2.Run("step", feed(t, big2, concat(good[0], good[1]))); err != nil {
		t.Fatal(err)
	}
	sameParams(t, "last micro-batch failed", params(t, split), params(t, big2))
}
