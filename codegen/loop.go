package codegen

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// loopKernel renders a recurrence (an ops.Loop value, e.g. rnn_scan) as
// one kernel from its op row's template: a block per sequence over the
// symbolic batch (or per work item of the row's Blocks), the loop over
// time inside. It synchronises its block
// between steps; the CPU backend runs it with one-thread blocks.
//
// A stepped op (ops.Def.Stepped, where the program's StepForm takes it)
// renders a GPU form that computes one time step a launch over the grid
// the op asks for, launched
// KernelInfo.Steps times; its host forms still loop over time in one
// launch, and the CPU backend runs them so (runtime.WholeLoops).
func loopKernel(p *compiler.Program, g *compiler.Group, target ops.Target) *kernel {
	k := newKernel(p, g, target)
	in, out := k.buffers(p, g)
	v := g.Root
	c := k.ctx(v.DType.CType(), "")
	at := func(i int, idx string) string {
		a := v.Args[i]
		if a.Op == "fill" {
			return k.ctx(a.DType.CType(), idx).Lit(a.Attrs.F)
		}
		ptr, ok := in[a]
		if !ok {
			panic(fmt.Sprintf("codegen: kernel %s: %s reads %s, which is not in global memory", g.Name, v, a))
		}
		return fmt.Sprintf("%s[%s]", ptr, idx)
	}
	d := ops.Lookup(v.Op)
	var st ops.Steps
	if d.Stepped != nil {
		if st = d.Stepped(v); !p.StepForm.Use(st) {
			st = ops.Steps{}
		}
	}
	if st.Launches > 0 {
		// Every form takes the launch's index, last: the plan passes
		// one argument list to whichever form the device runs.
		c.Launch = launchParam
	}
	tensorBlocks, tensor := p.TensorForm.Use(d, v)
	c.TensorCores = tensor
	body := d.Loop(c, v, at, out[v])
	for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		k.body.WriteString("  " + line + "\n")
	}
	k.sync, k.soloBlocks = true, true
	k.block = [3]int{128, 1, 1}
	if d.LoopThreads > 0 {
		k.block[0] = d.LoopThreads
	}
	blocks := ir.Shape{v.Shape[0]}
	if d.Blocks != nil {
		blocks = d.Blocks(v)
	}
	if tensor {
		blocks = tensorBlocks
	}
	z, div := blocks.Size(), int64(0)
	if st.Launches > 0 {
		k.param("int", launchParam, runtime.ArgRef{Buf: -1, Scalar: runtime.LaunchScalar, Kind: runtime.ArgI32})
		k.steps, k.block[0] = st.Launches, st.Threads
		z, div = st.Work.Size(), int64(st.Per)
	}
	k.grid = [3]runtime.Expr{
		{Size: runtime.Size{Mul: z.N, Syms: z.Syms}, Div: div, Max: 1 << 20},
		{Size: runtime.Size{Mul: 1}},
		{Size: runtime.Size{Mul: 1}},
	}
	return k
}

// launchParam is the C name of a stepped kernel's launch index.
const launchParam = "ngen_launch"
