//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// TestSummedGemm runs a batch summed into one C (a convolution's weight
// gradient: the scratch+reduce lowering, whose ones vector is filled by
// memsets) and one that is a single GEMM with K' = Batch·K, in f32 and
// f64, against the naive sum; then a larger one, which regrows the
// scratch.
func TestSummedGemm(t *testing.T) {
	d := newDevice(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []runtime.DType{runtime.F32, runtime.F64} {
		for _, sh := range []struct{ m, n, k, batch int }{{4, 6, 5, 7}, {16, 9, 33, 40}} {
			for _, kcat := range []bool{false, true} {
				m, n, k, batch := sh.m, sh.n, sh.k, sh.batch
				g := runtime.GemmArgs{DType: dt, M: m, N: n, K: k, Alpha: 1, Beta: 1, LDA: k, LDB: k, LDC: n,
					TransB: true, Batch: batch, StrideA: m * k, StrideB: n * k}
				if kcat { // A_b is K×M transposed, B_b K×N: stacked rows.
					g.TransA, g.TransB, g.LDA, g.LDB, g.StrideB = true, false, m, n, k*n
				}
				lo := runtime.LowerGemm(g, 0, 0)
				if (lo.How == "k-concat") != kcat {
					t.Fatalf("%+v lowered as %s", sh, lo.How)
				}
				a, b, c := make([]float64, batch*m*k), make([]float64, batch*n*k), make([]float64, m*n)
				for _, v := range [][]float64{a, b, c} {
					for i := range v {
						v[i] = float64(float32(r.Float64()*2 - 1))
					}
				}
				want := append([]float64(nil), c...)
				for i := range batch {
					naiveGemm(bool(g.TransA), bool(g.TransB), m, n, k, 1, a[i*m*k:], g.LDA, b[i*n*k:], g.LDB, 1, want, n)
				}
				up := func(v []float64) runtime.Ptr {
					if dt == runtime.F64 {
						return upload(t, d, v)
					}
					f := make([]float32, len(v))
					for i := range v {
						f[i] = float32(v[i])
					}
					return upload(t, d, f)
				}
				g.A, g.B, g.C = up(a), up(b), up(c)
				if err := d.Gemm(g); err != nil {
					t.Fatal(err)
				}
				var got []float64
				if dt == runtime.F64 {
					got = download[float64](t, d, g.C, len(c))
				} else {
					for _, v := range download[float32](t, d, g.C, len(c)) {
						got = append(got, float64(v))
					}
				}
				// Up to 40·33 f32 products reassociated: 1e-3; f64 1e-10.
				tol := 1e-10
				if dt == runtime.F32 {
					tol = 1e-3
				}
				for i := range got {
					if math.Abs(got[i]-want[i]) > tol {
						t.Fatalf("%s %+v %s: C[%d] = %v, want %v", dt, sh, lo.How, i, got[i], want[i])
					}
				}
				for _, p := range []runtime.Ptr{g.A, g.B, g.C} {
					d.Free(p)
				}
			}
		}
	}
}

// TestGraphsMatchEager trains every generated model for five steps (the
// batch changes at the fourth, which captures a second graph) with CUDA
// graphs and without, and wants the same losses and parameters: a replay
// runs the captured kernels with the step's own scalars. It also checks
// that graphs were captured and replayed, with no kernel node's
// arguments rewritten: a step's scalars are read from the device clock.
func TestGraphsMatchEager(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, gm := range genModels {
		t.Run(gm.name, func(t *testing.T) {
			var losses [2][]float64
			var params [2]map[string][]float64
			var gd *Device
			for side, noGraphs := range []bool{false, true} {
				d, err := New(Options{NoGraphs: noGraphs})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if !noGraphs {
					gd = d
				}
				m, err := gm.open(gm.fused, d)
				if err != nil {
					t.Fatal(err)
				}
				for step := range 5 {
					n := gm.batch
					if step == 3 {
						n = gm.batch / 2
					}
					l, err := m.Step(modelBatch(t, gm.fused, n))
					if err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					losses[side] = append(losses[side], l)
				}
				params[side] = modelParams(t, m)
				m.Close()
			}
			sameRuns(t, [2]string{"with graphs", "without"}, losses, params)
			if gd.gr.captures < 2 || gd.gr.replays < 2 {
				t.Fatalf("%d graphs captured, %d replays; want at least 2 of each", gd.gr.captures, gd.gr.replays)
			}
			if gd.gr.nodeUpdates != 0 {
				t.Fatalf("replays rewrote %d kernel nodes' arguments, want none", gd.gr.nodeUpdates)
			}
		})
	}
}

// TestPipelinedGPU (issue 26 item 1) trains every generated model's
// fused package for 6 steps on the GPU with graphs, synchronously and
// pipelined (runtime.Session.SetPipelined: the status block read into a
// page-locked ring a step late, CopyToHostAsync), and wants each step's
// loss, the last step's included after Flush, and the parameters the
// same. runtime's TestPipelinedMatchesSync checks the same on a CPU
// device that defers its calls; this is the GPU's own check.
func TestPipelinedGPU(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, gm := range genModels {
		t.Run(gm.name, func(t *testing.T) {
			var losses [2][]float64
			var params [2]map[string][]float64
			for side, pipelined := range []bool{false, true} {
				d, err := New(Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				m, err := gm.open(gm.fused, d)
				if err != nil {
					t.Fatal(err)
				}
				s := m.Session()
				if pipelined {
					if err := s.SetPipelined(true); err != nil {
						t.Fatal(err)
					}
				}
				for step := range 6 {
					l, err := m.Step(modelBatch(t, gm.fused, gm.batch))
					if err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					if !pipelined {
						losses[side] = append(losses[side], l)
					}
				}
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
				if pipelined {
					losses[side] = s.TakeLosses(nil)
				}
				params[side] = modelParams(t, m)
				m.Close()
			}
			sameRuns(t, [2]string{"synchronously", "pipelined"}, losses, params)
		})
	}
}

// sameRuns fails unless two runs' losses and parameters agree: the same
// kernels and cuBLAS calls on the same stream, equal up to cuBLAS picking
// another algorithm under another capture (1e-5). names say how each run
// ran.
func sameRuns(t *testing.T, names [2]string, losses [2][]float64, params [2]map[string][]float64) {
	t.Helper()
	if len(losses[0]) != len(losses[1]) {
		t.Fatalf("%d losses %s, %d %s", len(losses[0]), names[0], len(losses[1]), names[1])
	}
	for i := range losses[0] {
		if math.Abs(losses[0][i]-losses[1][i]) > 1e-5*(1+math.Abs(losses[1][i])) {
			t.Fatalf("step %d: loss %v %s, %v %s", i, losses[0][i], names[0], losses[1][i], names[1])
		}
	}
	for name, p := range params[1] {
		for i := range p {
			if q := params[0][name][i]; math.Abs(q-p[i]) > 1e-5*(1+math.Abs(p[i])) {
				t.Fatalf("%s[%d] = %v %s, %v %s", name, i, q, names[0], p[i], names[1])
			}
		}
	}
}

// modelParams reads every parameter of m.
func modelParams(t *testing.T, m *runtime.Model) map[string][]float64 {
	t.Helper()
	ps := map[string][]float64{}
	for _, name := range m.Params() {
		p, err := m.Param(name)
		if err != nil {
			t.Fatal(err)
		}
		ps[name] = p
	}
	return ps
}
