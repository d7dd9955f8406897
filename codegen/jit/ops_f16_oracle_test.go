package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// round16 rounds x to the nearest binary16 value (ties to even; from
// 65520 up to infinity; subnormals kept), directly from float64.
func round16(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	a := math.Abs(x)
	if a >= 65520 {
		return math.Copysign(math.Inf(1), x)
	}
	return math.Copysign(math.Ldexp(math.RoundToEven(math.Ldexp(a, -ulp16Exp(a))), ulp16Exp(a)), x)
}

// ulp16Exp is the exponent of binary16's spacing at magnitude a: 11
// significant bits, and 2^-24 below the normals.
func ulp16Exp(a float64) int {
	_, e := math.Frexp(a)
	return max(e-11, -24)
}

// TestOpsOracleF16 runs every elementwise case of the op oracle (unary
// and binary, with broadcasts) on f16 operands: each operand is an f32
// parameter holding binary16 values, cast to f16, the op computes in f32
// and stores f16 (the kernels' mixed-precision arithmetic), and its
// result is cast back; every result and operand gradient must be a
// binary16 value (an op that did not round fails here, where a tolerance
// of one spacing would let it pass). The reference is the same arithmetic
// in float64:
// PyTorch in f64 on the same binary16 inputs (testdata/oracle's
// torch_ops.py), rounded to binary16 once. The forward result must be
// that value or its binary16 neighbour (the kernels' f32 arithmetic,
// with exp's and erf's approximations within 2 f32 ulps, may round the
// other way at a boundary): at most one binary16 spacing apart. The
// operand gradients (grad_output binary16 too) are one rounding of an
// f32 product, or of a short f32 sum over a broadcast: within two
// spacings of the value plus 2^-11 of the tensor's largest. Fused and
// -fuse=none both.
func TestOpsOracleF16(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	groups := opGroups()
	var cases []opCase
	for _, g := range []string{"unary", "binary"} {
		cases = append(cases, groups[g]...)
	}
	b := irtest.New()
	rng := rand.New(rand.NewPCG(16, 99))
	data := opData{floats: map[string][]float64{}, labels: map[string][]int32{}}
	shapes := map[string][]int{}
	var loss *ir.Value
	var req []oracle.Case
	for _, c := range cases {
		var args []*ir.Value
		for j, a := range c.args {
			p := b.Param(c.argName(j), ir.F32, 1, a.shape...)
			vals := genValues(rng, elems(a.shape), a.domain, ir.F64)
			for k := range vals {
				vals[k] = round16(vals[k])
			}
			data.floats[c.argName(j)] = vals
			args = append(args, b.Op("cast", ir.Attrs{Str: "f16"}, p))
		}
		v := b.Op("cast", ir.Attrs{Str: "f32"}, buildCase(b, c, args))
		if b.Err != nil {
			t.Fatalf("case %s: %v", c.name, b.Err)
		}
		var shape []int
		for _, d := range v.Shape {
			shape = append(shape, d.N)
		}
		shapes[c.name] = shape
		g := b.Param(c.gName(), ir.F32, 1, shape...)
		gv := genValues(rng, elems(shape), anySign, ir.F64)
		for k := range gv {
			gv[k] = round16(gv[k])
		}
		data.floats[c.gName()] = gv
		term := b.Op("sum", ir.Attrs{}, b.Binary("mul", v, g))
		if loss == nil {
			loss = term
		} else {
			loss = b.Binary("add", loss, term)
		}
		req = append(req, oracleCase(c, "f64", data, shape))
	}
	m := b.Model("ops_f16", loss, loss, ir.Optimizer{Kind: "sgd", LR: 0})
	want, err := oracle.Run(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, fuse := range []bool{true, false} {
		t.Run(fmt.Sprintf("fuse=%v", fuse), func(t *testing.T) {
			s := opSession(t, dev, m, fuse, data)
			defer s.Close()
			got := runOps(t, s)
			worst := 0.0 // forward, in binary16 spacings
			for i, c := range cases {
				w := want[i]
				fwd := got.grads[c.gName()] // d loss / d g: the case's result
				for k, x := range w.Output.Data {
					r := round16(x)
					sp := math.Ldexp(1, ulp16Exp(math.Abs(r)))
					worst = max(worst, math.Abs(fwd[k]-r)/sp)
					if round16(fwd[k]) != fwd[k] {
						t.Errorf("%s forward[%d] = %.9g is not a binary16 value", c.name, k, fwd[k])
						break
					}
					if math.Abs(fwd[k]-r) > sp {
						t.Errorf("%s forward[%d] = %.9g, float64 %.9g rounds to %.9g (binary16 spacing %.3g)", c.name, k, fwd[k], x, r, sp)
						break
					}
				}
				for j := range c.args {
					g, wg := got.grads[c.argName(j)], w.Grads[j].Data
					top := 0.0
					for _, x := range wg {
						top = max(top, math.Abs(x))
					}
					for k, x := range wg {
						sp := math.Ldexp(1, ulp16Exp(math.Abs(x)))
						if round16(g[k]) != g[k] {
							t.Errorf("%s grad %s[%d] = %.9g is not a binary16 value (the cast's gradient rounds it)", c.name, c.argName(j), k, g[k])
							break
						}
						if math.Abs(g[k]-x) > 2*sp+top/2048 {
							t.Errorf("%s grad %s[%d] = %.9g, float64 %.9g (binary16 spacing %.3g, largest %.3g)", c.name, c.argName(j), k, g[k], x, sp, top)
							break
						}
					}
				}
			}
			t.Logf("%d cases: forward results within %.2g binary16 spacings of float64's rounded", len(cases), worst)
		})
	}
}
