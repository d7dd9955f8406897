// Package dsl is how users declare networks for ngen: inputs with a
// symbolic batch dimension, layers and ops, a loss and an optimizer. Every
// op records the caller's file:line so that compile errors point at the
// user's source. The declaration builds the compiler's IR directly; the
// ngen command evaluates it (dsl/eval) and compiles it.
//
// Pipeline: DSL (this package) → IR → passes → kernels → glue → runtime.
package dsl

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// DType is an element type.
type DType = ir.DType

// Element types.
const (
	F32 = ir.F32
	F64 = ir.F64
)

// Batch is the symbolic batch dimension, bound when a model is run.
var Batch = batchDim{}

type batchDim struct{}

// Model is a network under declaration.
type Model struct {
	m      *ir.Model
	b      *ops.Builder
	err    error
	stream int
}

// Tensor is a value of the model.
type Tensor struct {
	m *Model
	v *ir.Value
}

// Shape is the tensor's shape, e.g. [B,512].
func (t *Tensor) Shape() string {
	if t == nil || t.v == nil {
		return "<nil>"
	}
	return t.v.Shape.String()
}

// DType is the tensor's element type.
func (t *Tensor) DType() DType {
	if t == nil || t.v == nil {
		return 0
	}
	return t.v.DType
}

// NewModel starts a model. name becomes the generated package's name after
// sanitising.
func NewModel(name string) *Model {
	f := ir.NewFunc("forward")
	pos := callerPos()
	return &Model{m: &ir.Model{Name: name, Source: pos.File, Forward: f, Pos: pos}, b: &ops.Builder{F: f}}
}

// Err is the first error the declaration hit.
func (m *Model) Err() error { return m.err }

func (m *Model) fail(pos ir.Pos, op, format string, args ...any) {
	if m.err == nil {
		m.err = fmt.Errorf("%s (%s): %s", op, pos, fmt.Sprintf(format, args...))
	}
}

func dims(m *Model, pos ir.Pos, op string, ds []any) ir.Shape {
	var s ir.Shape
	prod := int64(1)
	for _, d := range ds {
		switch d := d.(type) {
		case batchDim:
			s = append(s, ir.S("B"))
		case int:
			if d <= 0 {
				m.fail(pos, op, "dimension %d must be positive", d)
			}
			if d > math.MaxInt32 {
				m.fail(pos, op, "dimension %d exceeds the kernels' 32-bit range", d)
			}
			// A product past 2^48 elements wraps later shape arithmetic
			// (Flatten, Linear) into nonsense far from this line.
			if d > 0 && prod > (1<<48)/int64(d) {
				m.fail(pos, op, "dimension %d takes the product past 2^48 elements a row", d)
			}
			prod *= int64(max(d, 1))
			s = append(s, ir.D(d))
		default:
			m.fail(pos, op, "dimension %v: want an int or dsl.Batch", d)
		}
	}
	return s
}

func (m *Model) source(op string, role ir.Role, name string, dt ir.DType, shape ir.Shape, pos ir.Pos) *Tensor {
	for _, v := range m.m.Forward.Values {
		if v.Name == name && (v.Role == role || savedRole(v.Role) && savedRole(role)) {
			m.fail(pos, op, "%s %q declared twice (first at %s)", role, name, v.Pos)
		}
	}
	if name == "" {
		m.fail(pos, op, "empty name")
	} else if err := checkTensorName(name); err != nil {
		m.fail(pos, op, "%v", err)
	} else if savedRole(role) && (name == "__metadata__" || strings.HasPrefix(name, runtime.OptimizerPrefix)) {
		// A checkpoint's header keeps these keys for itself: the model
		// built and trained, and every Save failed.
		m.fail(pos, op, "name %q is a checkpoint's own key (safetensors' __metadata__, the optimizer state's %s...)", name, runtime.OptimizerPrefix)
	}
	v := m.m.Forward.NewValue(op, dt, shape, pos)
	v.Role, v.Name = role, name
	return &Tensor{m, v}
}

// Input declares a float input fed at every step, e.g.
// m.Input("x", dsl.F32, dsl.Batch, 784).
func (m *Model) Input(name string, dt DType, shape ...any) *Tensor {
	pos := callerPos()
	if dt != F32 && dt != F64 {
		m.fail(pos, "input", "dtype must be F32 or F64")
	}
	return m.source("input", ir.Input, name, dt, dims(m, pos, "input", shape), pos)
}

// Labels declares an i32 class-label input.
func (m *Model) Labels(name string, shape ...any) *Tensor {
	pos := callerPos()
	return m.source("input", ir.Input, name, ir.I32, dims(m, pos, "labels", shape), pos)
}

// Init is a parameter initialiser.
type Init struct {
	kind string
	a, b float64
}

// Uniform draws from [lo, hi).
func Uniform(lo, hi float64) Init { return Init{"uniform", lo, hi} }

// Normal draws from N(mean, std²).
func Normal(mean, std float64) Init { return Init{"normal", mean, std} }

// Const sets every element to v.
func Const(v float64) Init { return Init{"const", v, 0} }

func (in Init) String() string { return fmt.Sprintf("%s:%g:%g", in.kind, in.a, in.b) }

// Param declares a trainable parameter of static shape.
func (m *Model) Param(name string, dt DType, init Init, shape ...int) *Tensor {
	return m.declare(ir.Param, "param", name, dt, init, ir.Static(shape...), callerPos())
}

// declare adds a parameter or state tensor with its initialiser: the
// storage that layers create (weights, biases, running statistics).
func (m *Model) declare(role ir.Role, kind, name string, dt DType, init Init, shape ir.Shape, pos ir.Pos) *Tensor {
	op := "param"
	if role == ir.State {
		op = "state"
	}
	if dt.IsHalf() {
		// Master weights stay f32 under mixed precision (m.Precision).
		m.fail(pos, op, "%s: dtype %s: parameters and state are f32 or f64; for 16-bit compute use m.Precision(dsl.AMP{...})", name, dt)
	}
	for _, d := range shape {
		if d.N <= 0 {
			m.fail(pos, op, "%s: dimension %d must be positive", name, d.N)
		}
		if d.N > math.MaxInt32 {
			m.fail(pos, op, "%s: dimension %d exceeds the kernels' 32-bit range", name, d.N)
		}
	}
	if !finite(init.a, init.b) {
		m.fail(pos, op, "%s: initialiser %s(%g, %g) needs finite numbers", name, init.kind, init.a, init.b)
	} else if !inRange(dt, init.a, init.b) {
		m.fail(pos, op, "%s: initialiser %s(%g, %g) is beyond the range of %s (the weights would start at ±Inf)", name, init.kind, init.a, init.b, dt)
	} else if err := checkInit(init); err != nil {
		m.fail(pos, op, "%s: %v", name, err)
	}
	t := m.source(op, role, name, dt, shape, pos)
	t.v.Attrs.Init = init.String()
	if role == ir.Param {
		t.v.Attrs.Str = kind // what optimizer groups select by (ir.ParamGroup.Kinds)
	}
	return t
}

// Linear is torch.nn.Linear(in, out): y = x Wᵀ + b with W [out,in], both
// initialised U(-1/√in, 1/√in) as PyTorch does. x may have any rank ≥ 1.
func (m *Model) Linear(name string, x *Tensor, out int) *Tensor {
	return m.linear(name, x, out, true, callerPos())
}

// LinearNoBias is Linear without the bias.
func (m *Model) LinearNoBias(name string, x *Tensor, out int) *Tensor {
	return m.linear(name, x, out, false, callerPos())
}

func (m *Model) linear(name string, x *Tensor, out int, bias bool, pos ir.Pos) *Tensor {
	if m.err != nil || m.isNil(pos, "linear", name, "the input", x) {
		return m.errTensor(x)
	}
	s := x.v.Shape
	if len(s) == 0 || s[len(s)-1].Sym != "" {
		m.fail(pos, "linear", "%s: input %s needs a static last dimension", name, s)
		return x
	}
	in := s[len(s)-1].N
	if out <= 0 {
		m.fail(pos, "linear", "%s: width %d must be positive", name, out)
		return x
	}
	bound := 1 / math.Sqrt(float64(in))
	w := m.declare(ir.Param, "linear.weight", name+".weight", x.v.DType, Uniform(-bound, bound), ir.Static(out, in), pos)
	// Rank > 2 inputs become a batched GEMM with the weight shared.
	y := m.op(pos, "matmul", ir.Attrs{TransB: true}, x, w)
	if bias {
		b := m.declare(ir.Param, "linear.bias", name+".bias", x.v.DType, Uniform(-bound, bound), ir.Static(out), pos)
		y = m.op(pos, "add", ir.Attrs{}, y, b)
	}
	return y
}

// Output marks the prediction output (logits).
func (m *Model) Output(t *Tensor) {
	pos := callerPos()
	if m.err != nil {
		return
	}
	if zero(t) {
		m.fail(pos, "output", "the tensor is nil (an op given a nil tensor returns nil)")
		return
	}
	if t.m != m {
		m.fail(pos, "output", "tensor belongs to another model")
		return
	}
	if m.m.Output != nil {
		// The second call used to replace the first without a word.
		m.fail(pos, "output", "the output is already set (at %s): name further outputs with m.OutputNamed", m.m.Output.Pos)
		return
	}
	m.m.Output = t.v
}

// Loss marks the scalar to minimise.
func (m *Model) Loss(t *Tensor) {
	pos := callerPos()
	if m.err != nil {
		return
	}
	if zero(t) {
		m.fail(pos, "loss", "the tensor is nil (an op given a nil tensor returns nil)")
		return
	}
	if t.m != m {
		m.fail(pos, "loss", "tensor belongs to another model")
		return
	}
	if len(t.v.Shape) != 0 {
		m.fail(pos, "loss", "loss must be a scalar, got %s", t.v.Type())
		return
	}
	if m.m.Loss != nil {
		// The second call used to replace the first without a word.
		m.fail(pos, "loss", "the loss is already set (at %s): add the terms into one loss", m.m.Loss.Pos)
		return
	}
	m.m.Loss = t.v
}

// Build returns the declared model, or the first error.
func (m *Model) Build() (*ir.Model, error) {
	if m == nil || m.m == nil {
		return nil, fmt.Errorf("the model is nil: a model function must return dsl.NewModel's result")
	}
	if m.err != nil {
		return nil, m.err
	}
	if err := checkName(m.m.Name); err != nil {
		return nil, fmt.Errorf("model %q (%s): %v", m.m.Name, m.m.Pos, err)
	}
	switch {
	case m.m.Loss == nil:
		return nil, fmt.Errorf("model %s (%s): no loss: call m.Loss", m.m.Name, m.m.Pos)
	case m.m.Output == nil:
		return nil, fmt.Errorf("model %s (%s): no output: call m.Output", m.m.Name, m.m.Pos)
	case m.m.Optimizer == nil:
		return nil, fmt.Errorf("model %s (%s): no optimizer: call m.Optimizer", m.m.Name, m.m.Pos)
	}
	if pr := m.m.Precision; pr != nil {
		// A convolution is named as the layer the user wrote (its
		// im2col), before the f64 input that feeds it.
		for _, v := range m.m.Forward.Values {
			if v.Op == "im2col" && v.Args[0].DType == F64 {
				return nil, fmt.Errorf("conv2d (%s): its input is %s, but mixed precision (precision at %s) needs an f32 convolution", v.Pos, v.Args[0].Type(), pr.Pos)
			}
		}
		for _, v := range m.m.Forward.Values {
			if v.DType == F64 {
				return nil, fmt.Errorf("%s (%s): %s is f64, but mixed precision (precision at %s) needs an f32 model", v.Op, v.Pos, v.Type(), pr.Pos)
			}
		}
	}
	return m.m, nil
}

// checkName rejects an empty model name; any other name becomes a usable
// package name (compiler.PackageName).
func checkName(name string) error {
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("empty model name")
	}
	return nil
}

func (m *Model) errTensor(x *Tensor) *Tensor {
	if !zero(x) {
		return x
	}
	return &Tensor{m: m, v: &ir.Value{Op: "fill", Shape: ir.Shape{}, DType: ir.F32}}
}

// op appends an op, running its shape rule now.
func (m *Model) op(pos ir.Pos, op string, attrs ir.Attrs, args ...*Tensor) *Tensor {
	if m.err != nil {
		return m.errTensor(first(args))
	}
	vs := make([]*ir.Value, len(args))
	for i, a := range args {
		if zero(a) {
			m.fail(pos, op, "argument %d is nil", i)
			return m.errTensor(nil)
		}
		if a.m != m {
			m.fail(pos, op, "argument %d belongs to another model", i)
			return a
		}
		vs[i] = a.v
	}
	m.b.Pos = pos
	v := m.b.Op(op, attrs, vs...)
	if m.b.Err != nil && m.err == nil {
		m.err = m.b.Err
	}
	return &Tensor{m, v}
}

func first(ts []*Tensor) *Tensor {
	if len(ts) > 0 {
		return ts[0]
	}
	return nil
}

// moduleRoots caches, per source directory, the module root above it ("" if
// none): every op asks.
var moduleRoots sync.Map

// callerPos is the first stack frame outside this package, relative to the
// module root when one is found.
func callerPos() ir.Pos {
	pcs := make([]uintptr, 16)
	n := goruntime.Callers(2, pcs)
	frames := goruntime.CallersFrames(pcs[:n])
	for {
		fr, more := frames.Next()
		if !strings.HasPrefix(fr.Function, "github.com/ngen-ml/ngen/dsl.") || strings.HasSuffix(fr.File, "_test.go") {
			return ir.Pos{File: relToModule(fr.File), Line: fr.Line}
		}
		if !more {
			return ir.Pos{}
		}
	}
}

// relToModule is file relative to the module root above it (found by
// looking for go.mod upward), or file unchanged when there is none.
func relToModule(file string) string {
	dir := filepath.Dir(file)
	root, ok := moduleRoots.Load(dir)
	if !ok {
		root = ""
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				root = d
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
		moduleRoots.Store(dir, root)
	}
	if root == "" {
		return file
	}
	rel, err := filepath.Rel(root.(string), file)
	if err != nil {
		return file
	}
	return filepath.ToSlash(rel)
}
