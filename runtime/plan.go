package runtime

import (
	"fmt"
	"sort"

	"github.com/ngen-ml/ngen/runtime/schedule"
)

// Plan is a compiled model as data: its buffers, and per entry point the
// ordered steps (kernel launches, GEMMs, memsets, copies) with their
// launch geometry. The compiler produces it; a generated package embeds it
// as data (plan_json.go) and a Session executes it.
type Plan struct {
	Model     string       `json:",omitzero"`
	Source    string       `json:",omitzero"`
	Fused     bool         `json:",omitzero"` // generated with fusion (not -fuse=none)
	DType     DType        `json:",omitzero"` // parameter dtype
	Symbols   []string     `json:",omitzero"`
	Buffers   []Buffer     `json:",omitzero"`
	Funcs     []Func       `json:",omitzero"`
	Kernels   []KernelInfo `json:",omitzero"`
	Optimizer Optimizer    `json:",omitzero"`
	// Checks are run after a function; each names a user op.
	Checks []Check `json:",omitzero"`
}

// Func is one entry point ("step", "predict").
type Func struct {
	Name    string  `json:",omitzero"`
	Steps   []Step  `json:",omitzero"`
	Outputs []Named `json:",omitzero"`
	Inputs  []Named `json:",omitzero"`
	// UpdateFrom splits a training step: steps before it compute the
	// gradients (forward and backward), the rest are the optimizer update.
	// 0 for functions without an update.
	UpdateFrom int `json:",omitzero"`
}

// Named binds a name to a buffer.
type Named struct {
	Name string `json:",omitzero"`
	Buf  int    `json:",omitzero"`
}

// Placement says where a buffer's storage lives.
type Placement int

const (
	Arena      Placement = iota // reused between values by liveness
	Persistent                  // allocated once, kept across calls
	Alias                       // a view of another buffer
)

// Size is Mul times the product of symbols (element counts, byte counts).
type Size struct {
	Mul  int64    `json:",omitzero"`
	Syms []string `json:",omitzero"`
}

// Eval evaluates s with symbol bindings.
func (s Size) Eval(env map[string]int) int64 {
	n := s.Mul
	for _, y := range s.Syms {
		n *= int64(env[y])
	}
	return n
}

func (s Size) String() string {
	str := fmt.Sprint(s.Mul)
	for _, y := range s.Syms {
		str += "*" + y
	}
	return str
}

// Expr is ceil(Size / Div), capped at Max when Max > 0: launch geometry.
type Expr struct {
	Size Size  `json:",omitzero"`
	Div  int64 `json:",omitzero"`
	Max  int64 `json:",omitzero"`
}

// Eval evaluates e.
func (e Expr) Eval(env map[string]int) int {
	n := e.Size.Eval(env)
	if e.Div > 1 {
		n = (n + e.Div - 1) / e.Div
	}
	if e.Max > 0 && n > e.Max {
		n = e.Max
	}
	if n < 1 {
		n = 1
	}
	return int(n)
}

// Init is how a parameter starts: uniform in [A, B), constant A,
// normal(A, B), or (state) the sinusoidal positional table of width A.
type Init struct {
	Kind string  `json:",omitzero"` // "uniform", "const", "normal", "sinusoid", "" = zero
	A, B float64 `json:",omitzero"`
}

// Buffer is one tensor's storage.
type Buffer struct {
	Name      string    `json:",omitzero"`
	Role      string    `json:",omitzero"` // input, output, param, grad, state, temp
	DType     DType     `json:",omitzero"`
	Elems     Size      `json:",omitzero"`
	Placement Placement `json:",omitzero"`
	AliasOf   int       `json:",omitzero"` // for Alias
	Offset    int64     `json:",omitzero"` // elements into AliasOf
	Init      Init      `json:",omitzero"`
	Shape     string    `json:",omitzero"` // the value's type as written, for messages
	Pos       string    `json:",omitzero"` // an input's declaration in the user's file (file:line), for messages
	// Bound, for an integer input, is the exclusive upper bound of the
	// values its ops accept (embedding rows, cross-entropy classes; 2 for
	// a mask); 0 for other buffers.
	Bound int64 `json:",omitzero"`
	// Func and Live place an Arena buffer: the function that uses it and
	// the first and last step index that touch it.
	Func int    `json:",omitzero"`
	Live [2]int `json:",omitzero"`
}

// StepKind selects which fields of Step apply.
type StepKind int

const (
	LaunchStep StepKind = iota
	GemmStep
	MemsetStep
	CopyStep
)

// Step is one device call.
type Step struct {
	Kind   StepKind `json:",omitzero"`
	Kernel int      `json:",omitzero"` // LaunchStep
	Grid   [3]Expr  `json:",omitzero"`
	Block  [3]int   `json:",omitzero"`
	Shared int      `json:",omitzero"`
	Args   []ArgRef `json:",omitzero"`
	Gemm   Gemm     `json:",omitzero"`
	Buf    int      `json:",omitzero"` // MemsetStep, CopyStep destination
	Src    int      `json:",omitzero"` // CopyStep source
	// Builtin, on a LaunchStep, names a kernel codegen adds rather than
	// renders from a group (GuardKernel, CommitKernel); Buf and Src are
	// the guard's operands, Commits the commit's.
	Builtin string `json:",omitzero"`
	// Commits, on a CommitKernel step, are the state buffers it writes and
	// their new values: one launch commits them all.
	Commits []Commit `json:",omitzero"`
	// When says whether the session runs this step at a given point of a
	// run (the zero value: always). The pass that lowers a step sets it;
	// the session tests it, not the kernel's name.
	When StepCond `json:",omitzero"`
	// Label names this launch or GEMM for people: the fused group it
	// computes (blocks_1_norm1_layernorm_fwd). Launches of one shared
	// kernel carry their own labels; profiles, traces and fault messages
	// use them.
	Label string `json:",omitzero"`
	// Report fields.
	Ops   string `json:",omitzero"` // the IR ops this step computes
	Bytes Sum    `json:",omitzero"` // bytes read plus written in global memory
	Flops Sum    `json:",omitzero"`
	// TensorFlops is the part of Flops the kernel's GPU form runs on
	// tensor cores (attention's tensor-core form); the rest runs on CUDA
	// cores.
	TensorFlops Sum `json:",omitzero"`
}

// StepCond is the run-time condition of a step (Step.When).
type StepCond int

const (
	// Always: the step runs whenever its function does.
	Always StepCond = iota
	// WhileClipping: the step runs only while the session clips the
	// gradients by their global norm (a finite max norm,
	// Session.SetClipNorm): the grad-norm kernel. With clipping off the
	// update reads the coefficient 1 from its own max_norm scalar
	// (ops.ClipCoef), so skipping the kernel leaves the step bit for bit
	// an unclipped one and costs nothing.
	WhileClipping
)

// Commit is one state buffer a CommitKernel step writes: Dst ← Src.
type Commit struct{ Dst, Src int }

// Sum is a sum of sizes (a cost that mixes static and batch-sized parts).
type Sum []Size

// Eval evaluates every term and adds them.
func (s Sum) Eval(env map[string]int) int64 {
	var n int64
	for _, t := range s {
		n += t.Eval(env)
	}
	return n
}

// ArgRef is one kernel argument: a buffer pointer, a named runtime scalar,
// or (Buf -1 and no Scalar) the constant Const. Constants are what lets
// launches share a kernel: two layers whose kernels differ only in a
// number (a dropout's Philox stream, an op's status code) launch one
// kernel, each with its own value.
type ArgRef struct {
	Buf    int     `json:",omitzero"` // -1 for scalars and constants
	Scalar string  `json:",omitzero"`
	Kind   ArgKind `json:",omitzero"`
	Const  int64   `json:",omitzero"`
}

// Gemm is a GEMM step over buffers: C = Alpha op(A) op(B) + Beta C, with
// row-major operands packed tightly; Batch matrices with the A or B operand
// shared when its BatchX is false.
type Gemm struct {
	TransA, TransB bool    `json:",omitzero"`
	M, N, K        Size    `json:",omitzero"`
	A, B, C        int     `json:",omitzero"`
	Batch          Size    `json:",omitzero"`
	BatchA, BatchB bool    `json:",omitzero"`
	Alpha, Beta    float64 `json:",omitzero"`
	// SumBatch accumulates every batch's product into one C (the plan
	// zeroes C first): Σ_b op(A_b)·op(B_b), a weight gradient summed over
	// the samples without storing the per-sample products.
	SumBatch bool `json:",omitzero"`
}

// Check is a run-time check the session performs after a function.
type Check struct {
	Func   string `json:",omitzero"`
	Kind   string `json:",omitzero"` // "finite" (NaN/Inf in a scalar output), "status" (error flag buffer), "guard" (status block words 4..7)
	Buf    int    `json:",omitzero"`
	Op     string `json:",omitzero"` // the user op, for the message
	Pos    string `json:",omitzero"` // file:line of the user op
	Detail string `json:",omitzero"`
	// Code, for a "status" check, is the value its op writes into the
	// status word (one per op and line; cross-entropy's is 1 when it is
	// the only checked op).
	Code int `json:",omitzero"`
}

// Optimizer is the update rule, for the host-side scalars it needs each
// step (bias corrections and so on).
type Optimizer struct {
	Kind        string  `json:",omitzero"`
	LR          float64 `json:",omitzero"`
	Momentum    float64 `json:",omitzero"`
	Dampening   float64 `json:",omitzero"`
	Nesterov    bool    `json:",omitzero"`
	WeightDecay float64 `json:",omitzero"`
	Beta1       float64 `json:",omitzero"`
	Beta2       float64 `json:",omitzero"`
	Eps         float64 `json:",omitzero"`
	// Schedule, when set, gives the rate of each step from the step
	// counter (LR is its base rate); Session.SetLR overrides it.
	Schedule *schedule.Schedule `json:",omitzero"`
	// ClipValue, when positive, clamps the update's gradients to
	// [-ClipValue, ClipValue]; the update check and its bound use the
	// clamped gradient too.
	ClipValue float64 `json:",omitzero"`
	// ClipNorm, when positive, scales the update's gradients by
	// clip_grad_norm_'s coefficient, which GradNormKernel computes on the
	// device. It is the max norm a session starts with: the kernel reads
	// the session's (Session.SetClipNorm) as its scalar max_norm.
	ClipNorm float64 `json:",omitzero"`
	// ClipNormOff: the grad-norm kernel is compiled in, with no bound
	// (+Inf) until Session.SetClipNorm sets one.
	ClipNormOff bool `json:",omitzero"`
	// Groups are the declared parameter groups (param_groups.go); the
	// parameters after the last group's form the default group, which
	// has the options above.
	Groups []ParamGroup `json:",omitzero"`
	// Scaler, when set, is dynamic loss scaling (loss_scale.go): the
	// gradients are the scaled loss's, and the update, the update check
	// and the grad-norm kernel multiply them by the scalar inv_scale.
	Scaler *LossScaler `json:",omitzero"`
}

// GradNorm reports whether the plan's step computes the gradients'
// global norm (GradNormKernel) and scales the update by clip_grad_norm_'s
// coefficient, so that Session.SetClipNorm applies.
func (o Optimizer) GradNorm() bool { return o.ClipNorm > 0 || o.ClipNormOff }

// Align is the byte alignment of every buffer.
const Align = 256

// PlanArena assigns byte offsets to buffers with the given sizes and
// inclusive step intervals so that buffers alive at the same time do not
// overlap. Larger buffers are placed first, each at the lowest offset that
// fits. It returns the offsets and the arena's size.
func PlanArena(sizes []int64, live [][2]int) ([]int64, int64) {
	idx := make([]int, len(sizes))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return sizes[idx[a]] > sizes[idx[b]] })
	off := make([]int64, len(sizes))
	type span struct{ lo, hi int64 }
	var placed []int
	total := int64(0)
	for _, i := range idx {
		var busy []span
		for _, j := range placed {
			if live[i][0] <= live[j][1] && live[j][0] <= live[i][1] {
				busy = append(busy, span{off[j], off[j] + alignUp(sizes[j])})
			}
		}
		sort.Slice(busy, func(a, b int) bool { return busy[a].lo < busy[b].lo })
		at := int64(0)
		for _, s := range busy {
			if at+alignUp(sizes[i]) <= s.lo {
				break
			}
			if s.hi > at {
				at = s.hi
			}
		}
		off[i] = at
		placed = append(placed, i)
		if e := at + alignUp(sizes[i]); e > total {
			total = e
		}
	}
	return off, total
}

func alignUp(n int64) int64 { return (n + Align - 1) / Align * Align }
