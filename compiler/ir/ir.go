// Package ir is ngen's graph IR: a function is a list of values in
// topological order, each computed by one op from earlier values. The DSL
// builds it, compiler passes rewrite it, codegen turns it into kernels.
//
// Text form, one value per line:
//
//	v7 = relu <f32[B,512]> v6            # models/mlp/model.go:21
package ir

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/runtime/schedule"
)

// DType is an element type.
type DType int

const (
	F32 DType = iota
	F64
	I32
	// BF16 and F16 are storage types of mixed precision (Model.Precision):
	// values of these types live in memory as bfloat16 or binary16, and
	// kernels compute on them in float, rounding each one to its type
	// once computed (docs/AMP.md).
	BF16
	F16
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F64:
		return "f64"
	case I32:
		return "i32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("dtype%d", int(d))
}

// Size in bytes.
func (d DType) Size() int {
	switch d {
	case F64:
		return 8
	case BF16, F16:
		return 2
	}
	return 4
}

// IsFloat reports whether d is a floating type.
func (d DType) IsFloat() bool { return d == F32 || d == F64 || d.IsHalf() }

// IsHalf reports whether d is a 16-bit float, a storage type that kernels
// compute on in float.
func (d DType) IsHalf() bool { return d == BF16 || d == F16 }

// CType is the C type kernels compute d in: float for the 16-bit types,
// whose values are widened on load (StorageCType is how they are stored).
func (d DType) CType() string {
	switch d {
	case F64:
		return "double"
	case I32:
		return "int"
	}
	return "float"
}

// StorageCType is the C type of d's elements in memory.
func (d DType) StorageCType() string {
	switch d {
	case BF16:
		return "__nv_bfloat16"
	case F16:
		return "__half"
	}
	return d.CType()
}

// ParseDType is the inverse of String.
func ParseDType(s string) (DType, error) {
	for _, d := range []DType{F32, F64, I32, BF16, F16} {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q", s)
}

// Pos is a position in the user's DSL source.
type Pos struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

func (p Pos) String() string {
	if p.File == "" {
		return "?"
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Role says where a value's storage comes from.
type Role int

const (
	Temp   Role = iota // computed by the function
	Input              // fed by the caller each call
	Param              // trainable parameter, lives in the params region
	State              // persistent buffer (optimizer moments, ...)
	Scalar             // runtime scalar passed to kernels (batch size, lr, ...)
)

var roleNames = [...]string{"temp", "input", "param", "state", "scalar"}

func (r Role) String() string { return roleNames[r] }

// Attrs holds op attributes. Each op uses the fields it documents in its
// table row; the rest stay zero.
type Attrs struct {
	Axes    []int     `json:"axes,omitempty"`
	KeepDim bool      `json:"keepdim,omitempty"`
	TransA  bool      `json:"transa,omitempty"`
	TransB  bool      `json:"transb,omitempty"`
	F       float64   `json:"f,omitempty"`     // scalar constant
	F2      float64   `json:"f2,omitempty"`    // second scalar constant
	I       int       `json:"i,omitempty"`     // integer attribute (dropout stream id, ...)
	Shape   Shape     `json:"shape,omitempty"` // target shape (reshape, broadcast)
	Perm    []int     `json:"perm,omitempty"`
	Init    string    `json:"init,omitempty"` // parameter initialiser
	Floats  []float64 `json:"floats,omitempty"`
	Str     string    `json:"str,omitempty"`
	Ints    []int     `json:"ints,omitempty"` // integer parameters (a pooling or convolution window, ...)
}

// Value is one node of a function.
type Value struct {
	ID    int
	Op    string
	Args  []*Value
	Shape Shape
	DType DType
	Attrs Attrs
	Pos   Pos
	Role  Role
	// Name is the user's name for inputs, params and state; codegen
	// sanitises it before it reaches generated code.
	Name string
	// Phase is "bwd" for values autodiff made and "opt" for the optimizer
	// update; kernel names use it.
	Phase string
	// Checkpoint is the segment (> 0) of a forward value whose backward
	// recomputes it instead of keeping it (dsl Model.Checkpoint, or the
	// compiler under a memory budget); "recompute" then gives it the
	// phase "re".
	Checkpoint int
}

// Func is one entry point of a model (the training step, the forward pass).
type Func struct {
	Name   string
	Values []*Value
	// Outputs names the values the caller reads back ("loss", "logits", ...).
	Outputs map[string]*Value
	// Updates writes New into the persistent storage of State after the
	// function runs (optimizer updates).
	Updates []Update
	// Grads maps parameter name to its gradient value (training step only).
	Grads map[string]*Value
	// Unreached names the parameters no gradient of the loss reaches
	// (their Grads entry is a zero fill). The optimizer leaves them alone,
	// as PyTorch's skips a parameter whose .grad is None: no step, no
	// weight decay, no state change.
	Unreached map[string]bool
	nextID    int
}

// Update is a write-back of a new value into persistent storage.
type Update struct {
	State *Value
	New   *Value
}

// Optimizer is the declared optimizer, lowered by the "lower optimizer" pass.
type Optimizer struct {
	Kind        string  `json:"kind"` // sgd, adam, adamw
	LR          float64 `json:"lr"`
	Momentum    float64 `json:"momentum,omitempty"`
	Dampening   float64 `json:"dampening,omitempty"`
	Nesterov    bool    `json:"nesterov,omitempty"`
	WeightDecay float64 `json:"weight_decay,omitempty"`
	Beta1       float64 `json:"beta1,omitempty"`
	Beta2       float64 `json:"beta2,omitempty"`
	Eps         float64 `json:"eps,omitempty"`
	// Schedule, when set, varies the rate from step to step; LR is its
	// base rate (PyTorch's initial_lr).
	Schedule *schedule.Schedule `json:"schedule,omitempty"`
	// ClipValue, when positive, clamps every gradient the update reads
	// to [-ClipValue, ClipValue] (torch.nn.utils.clip_grad_value_).
	ClipValue float64 `json:"clip_value,omitempty"`
	// ClipNorm, when positive, scales the gradients the update reads
	// so that their global L2 norm is at most ClipNorm
	// (torch.nn.utils.clip_grad_norm_).
	ClipNorm float64 `json:"clip_norm,omitempty"`
	// ClipNormOff compiles clip_grad_norm_ in (the grad-norm kernel and
	// the scale in the update) with no bound until the session sets one
	// (runtime.Session.SetClipNorm): dsl.ClipGradNorm(math.Inf(1)). The
	// max norm is a run-time value either way; ClipNorm is the one a
	// session starts with.
	ClipNormOff bool `json:"clip_norm_off,omitempty"`
	// Groups are the parameter groups in declaration order (torch.optim
	// param_groups); a parameter takes the first group that matches it,
	// and the parameters no group matches form the default group, which
	// has the options above.
	Groups []ParamGroup `json:"groups,omitempty"`
	// Pos is the user's Optimizer call, for errors about its groups.
	Pos Pos `json:"pos"`
}

// GradNorm reports whether the step computes the gradients' global norm
// and scales the update by clip_grad_norm_'s coefficient.
func (o *Optimizer) GradNorm() bool { return o.ClipNorm > 0 || o.ClipNormOff }

// ParamGroup is one parameter group of an optimizer, with its options
// resolved: a field the user left unset holds the optimizer's value.
type ParamGroup struct {
	// Names are path.Match globs on the parameter names; Kinds are globs
	// on the kind the declaring layer recorded on a parameter
	// (Value.Attrs.Str of a param: "linear.bias", "layernorm.weight").
	// A parameter is a member when any of them matches.
	Names []string `json:"names,omitempty"`
	Kinds []string `json:"kinds,omitempty"`
	// LRScale multiplies the optimizer's (scheduled) learning rate.
	LRScale     float64 `json:"lr_scale"`
	WeightDecay float64 `json:"weight_decay,omitempty"`
	// OwnDecay says the group set its own weight decay: a run-time
	// decay (cmd/train -weight-decay) changes the default group and the
	// groups without their own.
	OwnDecay bool    `json:"own_decay,omitempty"`
	Beta1    float64 `json:"beta1,omitempty"`
	Beta2    float64 `json:"beta2,omitempty"`
	Momentum float64 `json:"momentum,omitempty"`
	// Params are the members, in layout order; "lower optimizer" fills
	// them in.
	Params []string `json:"params,omitempty"`
}

// Model is what the DSL declares: a forward function with a loss, and an
// optimizer. The compiler derives the step and predict functions from it.
type Model struct {
	Name      string
	Source    string // DSL file, relative to the module root
	Forward   *Func
	Loss      *Value // scalar, in Forward
	Output    *Value // prediction output, in Forward
	Optimizer *Optimizer
	// Precision, when set, is the model's mixed-precision policy
	// (dsl.AMP); the "autocast" pass applies it.
	Precision *Precision
	Pos       Pos
}

// Precision is a mixed-precision policy: GEMM inputs and the activations
// between them are stored in Type, while parameters, their gradients
// and the optimizer stay f32 and the ops on autocast's f32 list compute
// in f32 (compiler/autocast.go).
type Precision struct {
	Type DType `json:"type"`
	// Scaler, when set, is dynamic loss scaling (PyTorch's GradScaler):
	// the loss's gradient is seeded with a run-time scale and the update
	// unscales (compiler/autodiff.go, compiler/optimizer.go).
	Scaler *LossScaler `json:"scaler,omitempty"`
	// Pos is the user's Precision call, for errors.
	Pos Pos `json:"pos"`
	// Flag, when set, is the command-line override that set the policy
	// instead of the model (ngen build -amp bf16); Pos is then empty.
	Flag string `json:"flag,omitempty"`
}

// SetBy says where the policy comes from, for errors: "set at
// file:line", or "set by -amp bf16".
func (pr *Precision) SetBy() string {
	if pr.Flag != "" {
		return "set by " + pr.Flag
	}
	return "set at " + pr.Pos.String()
}

// Where is the policy's origin alone: "file:line" or "-amp bf16".
func (pr *Precision) Where() string {
	if pr.Flag != "" {
		return pr.Flag
	}
	return pr.Pos.String()
}

// GradScaler is PyTorch's GradScaler defaults (dsl.GradScaler): init
// scale 2^16, growth factor 2, backoff factor 0.5, growth interval 2000.
func GradScaler() *LossScaler {
	return &LossScaler{Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000}
}

// LossScaler is dynamic loss scaling's configuration, GradScaler's
// constructor arguments (runtime.LossScaler runs it).
type LossScaler struct {
	Init     float64 `json:"init_scale"`
	Growth   float64 `json:"growth_factor"`
	Backoff  float64 `json:"backoff_factor"`
	Interval int     `json:"growth_interval"`
}

// NewFunc returns an empty function.
func NewFunc(name string) *Func {
	return &Func{Name: name, Outputs: map[string]*Value{}, Grads: map[string]*Value{}}
}

// NewValue appends a value computed by op from args.
func (f *Func) NewValue(op string, dt DType, shape Shape, pos Pos, args ...*Value) *Value {
	v := &Value{ID: f.nextID, Op: op, Args: args, DType: dt, Shape: shape, Pos: pos}
	f.nextID++
	f.Values = append(f.Values, v)
	return v
}

// Renumber gives values dense IDs in list order.
func (f *Func) Renumber() {
	for i, v := range f.Values {
		v.ID = i
	}
	f.nextID = len(f.Values)
}

// Lookup finds the value with a role and name.
func (f *Func) Lookup(role Role, name string) *Value {
	for _, v := range f.Values {
		if v.Role == role && v.Name == name {
			return v
		}
	}
	return nil
}

// Clone copies f; the copy's values are new and refer only to each other.
func (f *Func) Clone(name string) (*Func, map[*Value]*Value) {
	g := NewFunc(name)
	m := map[*Value]*Value{}
	for _, v := range f.Values {
		nv := *v
		nv.Args = make([]*Value, len(v.Args))
		for i, a := range v.Args {
			nv.Args[i] = m[a]
		}
		nv.Shape = v.Shape.Clone()
		g.Values = append(g.Values, &nv)
		m[v] = &nv
	}
	g.nextID = f.nextID
	for k, v := range f.Outputs {
		g.Outputs[k] = m[v]
	}
	for k, v := range f.Grads {
		g.Grads[k] = m[v]
	}
	for _, u := range f.Updates {
		g.Updates = append(g.Updates, Update{m[u.State], m[u.New]})
	}
	return g, m
}

// Prune removes values that no output, gradient or update needs, keeping
// sources (inputs, params, state) the caller declared.
func (f *Func) Prune() {
	live := map[*Value]bool{}
	var mark func(v *Value)
	mark = func(v *Value) {
		if live[v] {
			return
		}
		live[v] = true
		for _, a := range v.Args {
			mark(a)
		}
	}
	for _, v := range f.Outputs {
		mark(v)
	}
	for _, v := range f.Grads {
		mark(v)
	}
	for _, u := range f.Updates {
		mark(u.State)
		mark(u.New)
	}
	var kept []*Value
	for _, v := range f.Values {
		if live[v] || v.Role == Param || v.Role == State {
			kept = append(kept, v)
		}
	}
	f.Values = kept
}

// Uses counts, for each value, how many argument slots refer to it.
func (f *Func) Uses() map[*Value][]*Value {
	u := map[*Value][]*Value{}
	for _, v := range f.Values {
		for _, a := range v.Args {
			u[a] = append(u[a], v)
		}
	}
	return u
}

// Params lists the function's parameters in declaration order.
func (f *Func) Params() []*Value { return f.byRole(Param) }

// Inputs lists the function's inputs in declaration order.
func (f *Func) Inputs() []*Value { return f.byRole(Input) }

func (f *Func) byRole(r Role) []*Value {
	var out []*Value
	for _, v := range f.Values {
		if v.Role == r {
			out = append(out, v)
		}
	}
	return out
}

func (v *Value) String() string { return fmt.Sprintf("v%d", v.ID) }

// Type is the value's type in the text form, e.g. f32[B,512].
func (v *Value) Type() string { return v.DType.String() + v.Shape.String() }

// LongString is the value's line in the text form.
func (v *Value) LongString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d = %s <%s>", v.ID, v.Op, v.Type())
	for _, a := range v.Args {
		fmt.Fprintf(&b, " v%d", a.ID)
	}
	if a := v.Attrs.String(); a != "" {
		b.WriteString(" " + a)
	}
	if v.Name != "" {
		fmt.Fprintf(&b, " %q", v.Name)
	}
	if v.Role != Temp {
		fmt.Fprintf(&b, " (%s)", v.Role)
	}
	if v.Checkpoint > 0 {
		fmt.Fprintf(&b, " [checkpoint %d]", v.Checkpoint)
	}
	if v.Pos.File != "" {
		fmt.Fprintf(&b, "  # %s", v.Pos)
	}
	return b.String()
}

// String prints non-zero attributes as {k=v ...}.
func (a Attrs) String() string {
	var parts []string
	if a.Axes != nil {
		parts = append(parts, fmt.Sprintf("axes=%v", a.Axes))
	}
	if a.KeepDim {
		parts = append(parts, "keepdim")
	}
	if a.TransA {
		parts = append(parts, "transa")
	}
	if a.TransB {
		parts = append(parts, "transb")
	}
	if a.F != 0 {
		parts = append(parts, fmt.Sprintf("f=%g", a.F))
	}
	if a.F2 != 0 {
		parts = append(parts, fmt.Sprintf("f2=%g", a.F2))
	}
	if a.I != 0 {
		parts = append(parts, fmt.Sprintf("i=%d", a.I))
	}
	if a.Shape != nil {
		parts = append(parts, "shape="+a.Shape.String())
	}
	if a.Perm != nil {
		parts = append(parts, fmt.Sprintf("perm=%v", a.Perm))
	}
	if a.Init != "" {
		parts = append(parts, "init="+a.Init)
	}
	if a.Floats != nil {
		parts = append(parts, fmt.Sprintf("floats=%v", a.Floats))
	}
	if a.Str != "" {
		parts = append(parts, "str="+a.Str)
	}
	if a.Ints != nil {
		parts = append(parts, fmt.Sprintf("ints=%v", a.Ints))
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Print writes the function in text form.
func (f *Func) Print() string {
	var b strings.Builder
	fmt.Fprintf(&b, "func %s\n", f.Name)
	for _, v := range f.Values {
		b.WriteString("  " + v.LongString() + "\n")
	}
	var names []string
	for n := range f.Outputs {
		names = append(names, n)
	}
	sortStrings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  output %s = v%d\n", n, f.Outputs[n].ID)
	}
	names = names[:0]
	for n := range f.Grads {
		names = append(names, n)
	}
	sortStrings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  grad %q = v%d\n", n, f.Grads[n].ID)
	}
	for _, u := range f.Updates {
		fmt.Fprintf(&b, "  update v%d <- v%d\n", u.State.ID, u.New.ID)
	}
	return b.String()
}
