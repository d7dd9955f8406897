// Package ops is ngen's op table. Each op is one row that keeps together its
// shape rule, its vector-Jacobian product and, for elementwise ops, the C
// expression the kernel generator inlines. Adding an op means adding a row.
package ops

import (
	"fmt"
	"sort"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Kind says how codegen lowers an op.
type Kind int

const (
	Source      Kind = iota // input, param, state, scalar: storage, no kernel
	Elementwise             // one output element from the same index of each (broadcast) input
	Reduce                  // reduction over axes
	MatMul                  // GEMM on the device's BLAS
	View                    // reinterprets its argument's storage, no kernel
	Special                 // has its own kernel template in codegen
	// Gather computes each output element from arguments read at indices
	// it computes (im2col, col2im, pooling): elementwise over its output,
	// so elementwise consumers fuse after it, but the arguments it indexes
	// (Def.Indexed) must be in global memory, written by earlier kernels.
	Gather
	// Loop runs a recurrence over time in one kernel from its Def.Loop
	// template (recur.go): a block per sequence carries the state.
	Loop
)

var kindNames = [...]string{"source", "elementwise", "reduce", "matmul", "view", "special", "gather", "loop"}

func (k Kind) String() string { return kindNames[k] }

// Def is one row of the op table.
type Def struct {
	Name  string
	Kind  Kind
	NArgs int // -1: any number
	// Infer returns the result type from the arguments and attributes.
	Infer func(v *ir.Value) (ir.Shape, ir.DType, error)
	// Grad returns the gradient for each argument given the gradient g of
	// v (nil entries mean no gradient flows to that argument). Nil Grad
	// means the op is not differentiable.
	Grad func(b *Builder, v, g *ir.Value) []*ir.Value
	// Expr renders an elementwise op as a C expression over its argument
	// expressions.
	Expr func(c *Ctx, v *ir.Value, args []string) string
	// Flops per output element (elementwise, reduce) for the report.
	Flops int
	// Gather renders a Gather op: C statements that declare and compute
	// the variable out for output index c.Index. args[i] is a pointer
	// name when Indexed[i], else the argument's value at the same index.
	Gather  func(c *Ctx, v *ir.Value, args []string, out string) string
	Indexed []bool
	// Moves, for a Gather op, says each output element is an element of
	// one of its arguments or zero: no arithmetic. When every argument
	// has the result's 16-bit type the kernel asks the template (Ctx.Raw)
	// to declare out in that storage type and copy the bits, which needs
	// no rounding and no conversion to float and back.
	Moves bool
	// MovesIf is Moves decided per value, for an op that moves elements
	// only in some of its forms (maxpool_bwd of windows that tile the
	// input, where each input pixel takes one window's gradient or zero,
	// while overlapping windows sum).
	MovesIf func(v *ir.Value) bool
	// Selects, for an elementwise op, lists the arguments its result is
	// one of, exactly (negated or not), or zero: relu, relu_bwd, neg,
	// abs. A 16-bit result whose selected arguments have its type is
	// already a 16-bit value, so the kernel does not round it again.
	Selects []int
	// InEval, for an op that reads the train flag, returns the argument
	// the op equals in eval mode, or nil where that does not hold (an
	// argument broadcast to a larger shape). Nil for other ops.
	InEval func(v *ir.Value) *ir.Value
	// RowLen is the row length a Gather op's template iterates best in
	// (see Ctx.Row); nil means the last dimension of its result.
	RowLen func(v *ir.Value) int
	// LongThreads, for a Gather op, says each output element walks a loop
	// of its own as long as an argument (embedding_bwd walks every token):
	// the kernel spreads few such outputs over more, smaller blocks
	// (codegen's spreadBlock).
	LongThreads bool
	// Status, for a Gather op that validates its data at run time (token
	// ids in range), names what it checks ("token id"): the memory plan
	// gives the op a code in the status word and a check naming it, and
	// the template raises the code through Ctx.Status.
	Status string
	// Loop renders a Loop op's kernel body: at(i, idx) is the C
	// expression of argument i at linear index idx, out the pointer to
	// the result, c.Dim the batch dimension.
	Loop func(c *Ctx, v *ir.Value, at func(arg int, idx string) string, out string) string
	// Blocks, for a Loop op, is the shape whose element count is the
	// kernel's grid (its blocks' work items); nil means the leading
	// dimension of the result (a block per sequence).
	Blocks func(v *ir.Value) ir.Shape
	// LoopThreads is a Loop kernel's block size on the GPU (0: 128).
	LoopThreads int
	// Stepped, for a Loop op, describes v's stepped GPU form, one step
	// of its loop a launch instead of the whole loop in one (zero
	// Launches: it has none). The program's StepForm chooses between the
	// two; by default the stepped one where Auto says. The launch
	// boundary is the grid-wide barrier between steps; the template
	// reads the launch's index from Ctx.Launch. The host targets' forms
	// run the whole loop in one launch either way.
	Stepped func(v *ir.Value) Steps
	// Tensor, for a Loop op, says whether v has a tensor-core GPU form
	// (its products as 16-bit tensor-core tiles: attention's, where the
	// operands are 16-bit and the head size a multiple of 16) and that
	// form's grid, which replaces Blocks. The program's TensorForm
	// chooses; the template renders it where Ctx.TensorCores says. The
	// host targets' forms are the same either way.
	Tensor func(v *ir.Value) (blocks ir.Shape, ok bool)
	// Expand, for a fused op, builds the same value from primitive ops:
	// the "expand fused ops" pass uses it when fusion is off, so that
	// -fuse=none computes the op the way a framework without the fused
	// kernel would, for comparison.
	Expand func(b *Builder, v *ir.Value) *ir.Value
}

// Steps is a Loop op's stepped GPU form (Def.Stepped): Launches launches,
// each over ceil(size(Work) ÷ Per) blocks of Threads threads. Auto says
// whether it is the default form for this value.
type Steps struct {
	Launches     int
	Work         ir.Shape
	Per, Threads int
	Auto         bool
}

// StepForm chooses the GPU form of Loop ops that have a stepped one
// (compiler.Options.StepForm, ngen build -loop-form).
type StepForm int

const (
	// StepAuto: each op's own rule (Steps.Auto).
	StepAuto StepForm = iota
	// StepNever: the whole loop in one launch.
	StepNever
	// StepAlways: a step a launch, at any size.
	StepAlways
)

// ParseStepForm reads auto, loop or stepped.
func ParseStepForm(s string) (StepForm, error) {
	switch s {
	case "", "auto":
		return StepAuto, nil
	case "loop":
		return StepNever, nil
	case "stepped":
		return StepAlways, nil
	}
	return StepAuto, fmt.Errorf("loop form %q: want auto, loop or stepped", s)
}

// String is the form as ParseStepForm reads it.
func (f StepForm) String() string {
	switch f {
	case StepNever:
		return "loop"
	case StepAlways:
		return "stepped"
	}
	return "auto"
}

// Use reports whether a value whose stepped form is st gets it.
func (f StepForm) Use(st Steps) bool {
	return st.Launches > 0 && (f == StepAlways || f == StepAuto && st.Auto)
}

// TensorForm chooses whether Loop ops with a tensor-core GPU form
// (Def.Tensor) take it (compiler.Options.TensorForm, ngen build
// -attention-form).
type TensorForm int

const (
	// TensorAuto: the tensor-core form wherever an op has one.
	TensorAuto TensorForm = iota
	// TensorNever: the CUDA-core form everywhere.
	TensorNever
)

// ParseTensorForm reads auto or cuda-cores.
func ParseTensorForm(s string) (TensorForm, error) {
	switch s {
	case "", "auto":
		return TensorAuto, nil
	case "cuda-cores":
		return TensorNever, nil
	}
	return TensorAuto, fmt.Errorf("attention form %q: want auto or cuda-cores", s)
}

// String is the form as ParseTensorForm reads it.
func (f TensorForm) String() string {
	if f == TensorNever {
		return "cuda-cores"
	}
	return "auto"
}

// Use reports whether v (of op d) takes its tensor-core form, and that
// form's grid.
func (f TensorForm) Use(d *Def, v *ir.Value) (ir.Shape, bool) {
	if f == TensorNever || d.Tensor == nil {
		return nil, false
	}
	return d.Tensor(v)
}

// inEval sets d.InEval to argument i, where its shape is v's.
func inEval(d *Def, i int) *Def {
	d.InEval = func(v *ir.Value) *ir.Value {
		if a := v.Args[i]; a.Shape.Eq(v.Shape) && a.DType == v.DType {
			return a
		}
		return nil
	}
	return d
}

// GatherRowLen is the row length op v's gather template prefers.
func GatherRowLen(v *ir.Value) int {
	if d := table[v.Op]; d != nil && d.RowLen != nil {
		return d.RowLen(v)
	}
	return v.Shape[len(v.Shape)-1].N
}

var table = map[string]*Def{}

func register(defs ...*Def) {
	for _, d := range defs {
		if _, dup := table[d.Name]; dup {
			panic("ops: duplicate op " + d.Name)
		}
		table[d.Name] = d
	}
}

// Lookup returns the row for op, or nil.
func Lookup(op string) *Def { return table[op] }

// Names lists every op, sorted.
func Names() []string {
	var out []string
	for n := range table {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Infer runs v's shape rule and checks the argument count.
func Infer(v *ir.Value) (ir.Shape, ir.DType, error) {
	d := table[v.Op]
	if d == nil {
		return nil, 0, fmt.Errorf("unknown op %q", v.Op)
	}
	if d.NArgs >= 0 && len(v.Args) != d.NArgs {
		return nil, 0, fmt.Errorf("%s takes %d arguments, got %d", v.Op, d.NArgs, len(v.Args))
	}
	return d.Infer(v)
}

// Target is what a kernel template renders for. The table says what an
// op computes; the target decides the form (STYLE.md §13). Most templates
// render one form for every target; the ones with a host form of their
// own (a GEMM per time step for the recurrences, GEMMs for attention, a
// row at a time for LayerNorm, cross-entropy and embedding gradients)
// render it for Host, and codegen puts it in the host glue, not the .cu.
type Target int

const (
	// CUDA is the GPU's form: the .cu that nvcc and NVRTC compile, which
	// the CPU backend also runs as written (GPU blocks, GPU forms).
	CUDA Target = iota
	// Host is the CPU backend's own form, run with one-thread blocks (or
	// as a span of a grid-stride loop) on host threads.
	Host
	// HostBaseline is Host without the forms that change the GPU form's
	// arithmetic (the recurrences' and attention's GEMM forms): what the
	// CPU backend runs with cpu.Options.Baseline, so that tests compare
	// it bit for bit with the GPU forms on any host.
	HostBaseline
)

// Ctx is what an elementwise expression may ask of the kernel it is
// rendered into.
type Ctx struct {
	// Target is what the kernel is rendered for.
	Target Target
	T      string // C element type of the value being computed
	// Raw, when set, is the 16-bit storage type (__nv_bfloat16, __half)
	// a Moves template declares its output in (see Def.Moves), with
	// RawZero as its zero.
	Raw string
	// Index is the C expression of the linear output index (long long).
	Index string
	// Row and Col, when set, are the C names of the kernel's loop over
	// rows of RowLen elements (NGEN_GRID_STRIDE_ROWS): Index is
	// Row*RowLen + Col, Col counts up fastest and row-invariant work can
	// leave the inner loop. A gather template whose preferred row length
	// (Def.RowLen) is RowLen uses them; others decode Index.
	Row, Col string
	RowLen   int
	// Scalar returns the C name of a runtime scalar kernel parameter.
	Scalar func(name string, ctype string) string
	// Member returns the C name of v when the kernel computes v itself
	// (so a template may reuse what v's template declared), else false.
	Member func(v *ir.Value) (string, bool)
	// Dim renders one dimension as a C long long expression (a symbolic
	// one as the kernel's runtime parameter).
	Dim func(d ir.Dim) string
	// Status returns the C name of the status word (int *) and of v's
	// code in it (a constant parameter), for ops with Def.Status.
	Status func(v *ir.Value) (ptr string, code string)
	// StatusBlock returns the C name (const int *) of the step's status
	// block, for ops that read what a builtin kernel left there.
	StatusBlock func() string
	// Imm returns the C name (an int) of a per-launch constant parameter
	// holding v. Templates take numbers that differ between layers (a
	// dropout's stream) through it, so that the layers share one kernel.
	Imm func(v int64) string
	// Launch, in a stepped Loop kernel (Def.Stepped), is the C name of
	// the launch's index (an int, 0 for the first launch); every form of
	// the kernel takes it as its last parameter, and the forms that run
	// the whole loop ignore it.
	Launch string
	// TensorCores, in a Loop kernel's CUDA form, says that the op takes
	// its tensor-core form (Def.Tensor, under the program's TensorForm).
	TensorCores bool
}

// MovesValue reports whether v's template only moves elements (Moves, or
// MovesIf for v).
func (d *Def) MovesValue(v *ir.Value) bool {
	return d.Moves || (d.MovesIf != nil && d.MovesIf(v))
}

// SelectsExact reports whether v's result is one of its arguments of its
// own type (Def.Selects), so that rounding it to that type changes
// nothing.
func (d *Def) SelectsExact(v *ir.Value) bool {
	if len(d.Selects) == 0 {
		return false
	}
	for _, i := range d.Selects {
		if i >= len(v.Args) || v.Args[i].DType != v.DType {
			return false
		}
	}
	return true
}

// moveType is the type a Moves template declares its value in: c.Raw
// when set, else c.T.
func (c *Ctx) moveType() string {
	if c.Raw != "" {
		return c.Raw
	}
	return c.T
}

// RawZero is the zero of c.Raw's type. It is written as a conversion of
// 0.0f, which is exact and folds to a constant: __ushort_as_bfloat16 is
// not declared for targets below sm_80 in CUDA 11.8's cuda_bf16.hpp
// (NVRTC for compute_75 rejected it), while the conversions are declared
// for every target.
func (c *Ctx) RawZero() string {
	if c.Raw == "__half" {
		return "__float2half_rn(0.0f)"
	}
	return "__float2bfloat16_rn(0.0f)"
}

// Size renders the element count of s as a C long long expression.
func (c *Ctx) Size(s ir.Shape) string {
	out := "1LL"
	for _, d := range s {
		if d == ir.D(1) {
			continue
		}
		if out == "1LL" {
			out = c.Dim(d)
		} else {
			out += " * " + c.Dim(d)
		}
	}
	return out
}

// Math returns the C math function name for the context's type
// (expf for float, exp for double).
func (c *Ctx) Math(fn string) string {
	if c.T == "float" {
		return fn + "f"
	}
	return fn
}

// Lit renders a constant in the context's type.
func (c *Ctx) Lit(f float64) string {
	if c.T == "float" {
		return fmt.Sprintf("%sf", fmtFloat(f))
	}
	return fmtFloat(f)
}

func fmtFloat(f float64) string {
	s := fmt.Sprintf("%.17g", f)
	for _, ch := range s {
		if ch == '.' || ch == 'e' || ch == 'n' || ch == 'i' {
			return s
		}
	}
	return s + ".0"
}

// Builder appends values to a function, inferring their types, at a fixed
// source position (gradient rules build at the position of the forward op).
type Builder struct {
	F   *ir.Func
	Pos ir.Pos
	Err error
}

// Op appends op(args) with attributes; a type error is kept in b.Err.
func (b *Builder) Op(op string, attrs ir.Attrs, args ...*ir.Value) *ir.Value {
	v := &ir.Value{Op: op, Args: args, Attrs: attrs, Pos: b.Pos}
	shape, dt, err := Infer(v)
	if err != nil {
		if b.Err == nil {
			b.Err = fmt.Errorf("%s (%s): %v", op, b.Pos, err)
		}
		shape, dt = ir.Shape{}, ir.F32
		if len(args) > 0 {
			shape, dt = args[0].Shape, args[0].DType
		}
	}
	nv := b.F.NewValue(op, dt, shape, b.Pos, args...)
	nv.Attrs = attrs
	return nv
}

// Unary is Op with no attributes and one argument.
func (b *Builder) Unary(op string, x *ir.Value) *ir.Value { return b.Op(op, ir.Attrs{}, x) }

// Binary is Op with no attributes and two arguments.
func (b *Builder) Binary(op string, x, y *ir.Value) *ir.Value {
	return b.Op(op, ir.Attrs{}, x, y)
}

// Scale multiplies by a constant.
func (b *Builder) Scale(x *ir.Value, f float64) *ir.Value {
	return b.Op("scale", ir.Attrs{F: f}, x)
}

// SumTo reduces g (a broadcast result) back to shape, as the gradient of
// broadcasting requires.
func (b *Builder) SumTo(g *ir.Value, shape ir.Shape) *ir.Value {
	if g.Shape.Eq(shape) {
		return g
	}
	lead := len(g.Shape) - len(shape)
	var axes []int
	for i := range g.Shape {
		j := i - lead
		if j < 0 || (shape[j] == ir.D(1) && g.Shape[i] != ir.D(1)) {
			axes = append(axes, i)
		}
	}
	s := g
	if len(axes) > 0 {
		s = b.Op("sum", ir.Attrs{Axes: axes, KeepDim: true}, g)
	}
	if !s.Shape.Eq(shape) {
		s = b.Op("reshape", ir.Attrs{Shape: shape.Clone()}, s)
	}
	return s
}
