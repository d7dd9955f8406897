package jit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestConvFusion checks the fusion of irtest.ConvNet's step: the ReLU
// backward shares one kernel with the col2im or the average-pool backward
// that produces its gradient; each convolution's bias add and ReLU form
// the epilogue kernel of its GEMM, except conv1's, which the "pool first"
// pass moves after the max pooling into the pooling kernel (argmax, pick,
// bias, ReLU in one kernel; its backward ReLU then runs at the pooled size,
// with conv2's col2im, and the max-pool backward stands alone). Then it
// trains the model fused and unfused from the same seed and data and
// compares every step.
func TestConvFusion(t *testing.T) {
	m := irtest.ConvNet(ir.F32, 3, irtest.Adam)
	p, err := compiler.Compile(m, compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	groups := p.Groups[p.Step]
	ops := func(g *compiler.Group) []string {
		var out []string
		for _, v := range g.Values {
			out = append(out, v.Op)
		}
		return out
	}
	owner := map[*ir.Value]*compiler.Group{}
	for _, g := range groups {
		for _, v := range g.Values {
			owner[v] = g
		}
	}
	fusedWithRelu := map[string]int{}
	for _, v := range p.Step.Values {
		if v.Op != "relu_bwd" {
			continue
		}
		g := v.Args[0] // the gradient flowing into the ReLU
		if owner[g] != owner[v] {
			t.Errorf("%s and its %s run in different kernels: %s | %s", v, g.Op, owner[g], owner[v])
			continue
		}
		fusedWithRelu[g.Op]++
		if got := ops(owner[v]); !slices.Equal(got, []string{g.Op, "relu_bwd"}) {
			t.Errorf("kernel %s computes %v, want [%s relu_bwd]", owner[v].Name, got, g.Op)
		}
	}
	for op, n := range map[string]int{"col2im": 3, "avgpool_bwd": 1} {
		if fusedWithRelu[op] != n {
			t.Errorf("%d kernels fuse %s with relu_bwd, want %d (have %v)", fusedWithRelu[op], op, n, fusedWithRelu)
		}
	}
	kernels := map[string]int{}
	for _, g := range groups {
		kernels[fmt.Sprint(ops(g))]++
	}
	for _, want := range []struct {
		ops string
		n   int
	}{
		{"[add relu]", 2}, // conv2-3: bias + ReLU epilogue
		{"[relu]", 1},     // conv4 has no bias
		// conv1's epilogue after its pooling; the argmax stored once,
		// the max read through it.
		{"[maxpool_argmax maxpool_pick add relu]", 1},
		{"[maxpool_bwd]", 1}, // col2im's output, which it indexes, must be in memory
		{"[avgpool]", 1},
		{"[matmul]", 11}, // forward 5; dcol or dX of all but conv1 (4); the two fc dW GEMMs
		// The dW GEMM of each ungrouped conv sums over the batch as it
		// multiplies (the grouped conv's weight is broadcast, so its
		// batch sum stays a reduction).
		{"[matmul sum]", 3},
	} {
		if kernels[want.ops] != want.n {
			t.Errorf("%d kernels %s, want %d (kernels: %v)", kernels[want.ops], want.ops, want.n, kernels)
		}
	}

	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, steps = 5, 3
	rng := rand.New(rand.NewPCG(41, 42))
	x := make([]float32, rows*4*9*8)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int32, rows)
	for i := range y {
		y[i] = int32(rng.IntN(3))
	}
	fused := trainTrace(t, dev, m, true, x, y, rows, steps)
	unfused := trainTrace(t, dev, m, false, x, y, rows, steps)
	t.Logf("step kernel launches: fused %d, unfused %d", fused.launches, unfused.launches)
	if fused.launches >= unfused.launches {
		t.Errorf("fused step launches %d kernels, unfused %d", fused.launches, unfused.launches)
	}
	// Fusion keeps each value's arithmetic and summation order (gathers
	// sum their windows in the same order either way); only the
	// cross-entropy's atomic adds of row losses may reorder. Observed: bit
	// for bit; rtol 1e-6 leaves room for the atomics.
	const rtol, atol = 1e-6, 1e-9
	closeTo(t, "loss per step", fused.loss, unfused.loss, rtol, atol)
	if len(fused.grads) != 9 || len(unfused.grads) != 9 { // conv4 has no bias
		t.Fatalf("fused has %d gradients, unfused %d, want 9", len(fused.grads), len(unfused.grads))
	}
	for n, g := range unfused.grads {
		closeTo(t, "step 1 grad "+n, fused.grads[n], g, rtol, atol)
	}
	for n, p := range unfused.params {
		closeTo(t, fmt.Sprintf("param after %d steps %s", steps, n), fused.params[n], p, rtol, atol)
	}
}
