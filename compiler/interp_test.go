package compiler

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// interp evaluates IR in float64 on the CPU, for tests that check what a
// pass computes rather than how the graph looks: autodiff's gradients and
// the lowered optimizer update. It knows only the ops those tests use
// (elementwise, sum, broadcast, views), not matmul or cross-entropy, which
// codegen's tests check end to end against PyTorch.
type interp struct {
	env  map[string]int          // symbol bindings ("B")
	vals map[*ir.Value][]float64 // row-major data; seeded values are leaves
}

func newInterp(env map[string]int) *interp {
	return &interp{env: env, vals: map[*ir.Value][]float64{}}
}

func (in *interp) dims(s ir.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		if d.Sym != "" {
			n, ok := in.env[d.Sym]
			if !ok {
				panic("interp: unbound symbol " + d.Sym)
			}
			out[i] = n
		} else {
			out[i] = d.N
		}
	}
	return out
}

func numel(ds []int) int {
	n := 1
	for _, d := range ds {
		n *= d
	}
	return n
}

// at returns x's element for output index idx of shape out, broadcasting
// x's dims (right-aligned, size 1 repeats) as NumPy does.
func at(x []float64, xs, out []int, idx []int) float64 {
	off, stride := 0, 1
	for i := len(xs) - 1; i >= 0; i-- {
		j := i + len(out) - len(xs)
		if xs[i] != 1 {
			off += idx[j] * stride
		}
		stride *= xs[i]
	}
	return x[off]
}

// unravel turns linear index k of shape s into a multi-index.
func unravel(k int, s []int) []int {
	idx := make([]int, len(s))
	for i := len(s) - 1; i >= 0; i-- {
		idx[i] = k % s[i]
		k /= s[i]
	}
	return idx
}

var pointwise = map[string]func(a []float64, attr ir.Attrs) float64{
	"add":    func(a []float64, _ ir.Attrs) float64 { return a[0] + a[1] },
	"sub":    func(a []float64, _ ir.Attrs) float64 { return a[0] - a[1] },
	"mul":    func(a []float64, _ ir.Attrs) float64 { return a[0] * a[1] },
	"div":    func(a []float64, _ ir.Attrs) float64 { return a[0] / a[1] },
	"neg":    func(a []float64, _ ir.Attrs) float64 { return -a[0] },
	"exp":    func(a []float64, _ ir.Attrs) float64 { return math.Exp(a[0]) },
	"sqrt":   func(a []float64, _ ir.Attrs) float64 { return math.Sqrt(a[0]) },
	"square": func(a []float64, _ ir.Attrs) float64 { return a[0] * a[0] },
	"relu":   func(a []float64, _ ir.Attrs) float64 { return math.Max(a[0], 0) },
	"copy":   func(a []float64, _ ir.Attrs) float64 { return a[0] },
	"scale":  func(a []float64, at ir.Attrs) float64 { return a[0] * at.F },
	"addc":   func(a []float64, at ir.Attrs) float64 { return a[0] + at.F },
	"relu_bwd": func(a []float64, _ ir.Attrs) float64 {
		if a[1] > 0 {
			return a[0]
		}
		return 0
	},
	// broadcast's only argument is expanded to the value's shape by at.
	"broadcast": func(a []float64, _ ir.Attrs) float64 { return a[0] },
}

// eval returns v's data, computing its arguments first.
func (in *interp) eval(v *ir.Value) []float64 {
	if d, ok := in.vals[v]; ok {
		return d
	}
	out := in.dims(v.Shape)
	var d []float64
	switch {
	case v.Op == "fill":
		d = make([]float64, numel(out))
		for i := range d {
			d[i] = v.Attrs.F
		}
	case v.Op == "reshape":
		d = in.eval(v.Args[0])
	case v.Op == "flat":
		for _, a := range v.Args {
			d = append(d, in.eval(a)...)
		}
	case v.Op == "sum":
		x := v.Args[0]
		xs := in.dims(x.Shape)
		axes, _ := ir.NormAxes(v.Attrs.Axes, len(xs))
		red := map[int]bool{}
		for _, a := range axes {
			red[a] = true
		}
		// Accumulate into the keepdim shape; its data is the same
		// without the kept ones.
		keep := append([]int(nil), xs...)
		for a := range red {
			keep[a] = 1
		}
		d = make([]float64, numel(keep))
		xd := in.eval(x)
		for k := range xd {
			idx := unravel(k, xs)
			for a := range red {
				idx[a] = 0
			}
			off := 0
			for i, n := range keep {
				off = off*n + idx[i]
			}
			d[off] += xd[k]
		}
	case pointwise[v.Op] != nil:
		fn := pointwise[v.Op]
		args := make([][]float64, len(v.Args))
		shapes := make([][]int, len(v.Args))
		for i, a := range v.Args {
			args[i], shapes[i] = in.eval(a), in.dims(a.Shape)
		}
		d = make([]float64, numel(out))
		xs := make([]float64, len(args))
		for k := range d {
			idx := unravel(k, out)
			for i := range args {
				xs[i] = at(args[i], shapes[i], out, idx)
			}
			d[k] = fn(xs, v.Attrs)
		}
	default:
		panic(fmt.Sprintf("interp: cannot evaluate %s (seed it)", v.LongString()))
	}
	if len(d) != numel(out) {
		panic(fmt.Sprintf("interp: %s has %d elements", v.LongString(), len(d)))
	}
	in.vals[v] = d
	return d
}
