package runtime

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
)

// Model is an instance of a registered generated model, driven by input
// name: what tools and tests that take any model use (cmd/train, the GPU
// suite, the GPU-forms tests). A generated package's typed API is the same
// session behind typed methods. Model is safe for concurrent use: each
// method runs alone.
type Model struct {
	mu sync.Mutex
	s  *Session
	g  *Generated
}

// Inputs are one call's inputs by name: a []float32, []float64 or []int32
// each, holding whole rows (row-major) of the input's declared shape.
type Inputs map[string]any

// New opens an instance of the model on dev.
func (g *Generated) New(dev Device, opts SessionOptions) (*Model, error) {
	if g == nil {
		return nil, fmt.Errorf("runtime.Generated.New: the package is nil (runtime.Registered found none?)")
	}
	s, err := g.NewSession(dev, opts)
	if err != nil {
		return nil, err
	}
	return &Model{s: s, g: g}, nil
}

// Session is the instance's session, for what Model does not wrap. Calls
// on it bypass Model's lock.
func (m *Model) Session() *Session { return m.s }

// Generated is the package the instance is of.
func (m *Model) Generated() *Generated { return m.g }

// InputNames lists function fn's inputs in declaration order ("step",
// "predict").
func (g *Generated) InputNames(fn string) []string {
	for _, f := range g.Plan.Funcs {
		if f.Name == fn {
			var out []string
			for _, in := range f.Inputs {
				out = append(out, in.Name)
			}
			return out
		}
	}
	return nil
}

// write checks that in holds exactly function fn's inputs, in whole rows
// of one batch size, writes them, and returns the rows.
func (m *Model) write(method, fn string, in Inputs) (int, error) {
	f := m.s.plan.fn(fn)
	if f == nil {
		return 0, fmt.Errorf("%s.%s: the model has no %s function", m.g.Name, method, fn)
	}
	want := map[string]bool{}
	for _, n := range f.Inputs {
		want[n.Name] = true
	}
	for name := range in {
		if !want[name] {
			return 0, fmt.Errorf("%s.%s: %s takes no input %q (it takes %v)", m.g.Name, method, fn, name, m.g.InputNames(fn))
		}
	}
	rows := -1
	for _, n := range f.Inputs {
		data, ok := in[n.Name]
		if !ok {
			return 0, fmt.Errorf("%s.%s: input %q is missing", m.g.Name, method, n.Name)
		}
		b := &m.s.plan.Buffers[n.Buf]
		_, count, _, err := hostSlice(data)
		if err != nil {
			return 0, fmt.Errorf("%s.%s: input %q: %w", m.g.Name, method, n.Name, err)
		}
		row := rowElems(b)
		if row == 0 {
			continue // no batch axis: any batch
		}
		if count == 0 || count%row != 0 {
			return 0, fmt.Errorf("%s.%s: input %q%s has shape %s: got %d values, not a positive whole number of rows of %d", m.g.Name, method, n.Name, declared(b), b.Shape, count, row)
		}
		if r := count / row; rows < 0 {
			rows = r
		} else if r != rows {
			return 0, fmt.Errorf("%s.%s: input %q holds %d rows, another input %d", m.g.Name, method, n.Name, r, rows)
		}
	}
	if rows < 0 {
		rows = 1
	}
	for _, n := range f.Inputs {
		// A training step's inputs skip the host's scan (WriteStepInput).
		if err := m.s.writeInput(n.Name, in[n.Name], rows, fn != "step"); err != nil {
			return 0, err
		}
	}
	return rows, nil
}

// rowElems is the elements per batch row of a buffer whose size is a
// multiple of the batch symbol B, else 0.
func rowElems(b *Buffer) int {
	if len(b.Elems.Syms) != 1 || b.Elems.Syms[0] != "B" {
		return 0
	}
	return int(b.Elems.Mul)
}

func (p *Plan) fn(name string) *Func {
	for i := range p.Funcs {
		if p.Funcs[i].Name == name {
			return &p.Funcs[i]
		}
	}
	return nil
}

// Step runs one training step on a batch and returns its loss.
func (m *Model) Step(in Inputs) (float64, error) {
	if m == nil {
		return 0, errNilModel("Step")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rows, err := m.write("Step", "step", in)
	if err != nil {
		return 0, err
	}
	if err := m.s.Run("step", rows); err != nil {
		return 0, err
	}
	return m.s.StepLoss()
}

// Predict runs the forward pass (in the current Train/Eval mode) and
// returns the model's output (the one dsl's Output declares, as the
// typed package's Predict does) for every row: a []float32 or []float64.
func (m *Model) Predict(in Inputs) (any, error) {
	if m == nil {
		return nil, errNilModel("Predict")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rows, err := m.write("Predict", "predict", in)
	if err != nil {
		return nil, err
	}
	fn := "predict"
	if !m.s.Training() && m.s.plan.fn("predict_eval") != nil {
		fn = "predict_eval"
	}
	if err := m.s.Run(fn, rows); err != nil {
		return nil, err
	}
	// The model's output (dsl's m.Output) is named "output"; the others
	// (named outputs such as an RNN's hn) are read with Session.Lookup.
	f := m.s.plan.fn(fn)
	buf := -1
	for _, o := range f.Outputs {
		if o.Name == "output" {
			buf = o.Buf
		}
	}
	if buf < 0 {
		return nil, fmt.Errorf("%s.Predict: %s has no output named \"output\"", m.g.Name, fn)
	}
	var out any = make([]float32, m.s.Elems(buf))
	if m.s.plan.Buffers[buf].DType == F64 {
		out = make([]float64, m.s.Elems(buf))
	}
	if err := m.s.Read(buf, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Train selects training behaviour (dropout on, batch statistics).
func (m *Model) Train() { m.mu.Lock(); defer m.mu.Unlock(); m.s.SetTrain(true) }

// Eval selects evaluation behaviour.
func (m *Model) Eval() { m.mu.Lock(); defer m.mu.Unlock(); m.s.SetTrain(false) }

// Params lists the parameters' names.
func (m *Model) Params() []string { return m.s.Names("param") }

// Param returns a parameter's values, Grad its gradient's, as float64s.
func (m *Model) Param(name string) ([]float64, error) { return m.named("param", name) }

// Grad returns a parameter's gradient from the last step.
func (m *Model) Grad(name string) ([]float64, error) { return m.named("grad", name) }

func (m *Model) named(role, name string) ([]float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, err := m.s.Lookup(role, name)
	if err != nil {
		return nil, err
	}
	return m.s.ReadFloats(i)
}

// Save writes a checkpoint; Load reads one (Session.Save, Session.Load).
func (m *Model) Save(w io.Writer) error {
	if m == nil {
		return errNilModel("Save")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s.Save(w)
}

// Load reads a checkpoint that Save wrote.
func (m *Model) Load(r io.Reader) error {
	if m == nil {
		return errNilModel("Load")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s.Load(r)
}

// Close frees the instance's device memory.
func (m *Model) Close() error {
	if m == nil {
		return nil // as closing a closed model
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s.Close()
}

// errNilModel is what a method called on a nil *Model returns (a failed
// Generated.New returns nil with its error).
func errNilModel(method string) error {
	return fmt.Errorf("runtime.Model.%s: the model is nil (did Generated.New fail?)", method)
}

// SampleInputs draws valid inputs for function fn at a batch of rows,
// from a seeded generator: floats uniform in [-1, 1), integers uniform
// below the input's Bound (embedding rows, classes, 2 for a mask). Tests
// and benchmarks that take any model feed it with them.
func (g *Generated) SampleInputs(fn string, rows int, seed uint64) (Inputs, error) {
	f := g.Plan.fn(fn)
	if f == nil {
		return nil, fmt.Errorf("%s: no function %s", g.Name, fn)
	}
	if rows < 1 {
		return nil, fmt.Errorf("%s: SampleInputs of %d rows; want at least 1", g.Name, rows)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6e67656e))
	in := Inputs{}
	// Draw in declaration order, so a seed gives one batch.
	names := make([]Named, len(f.Inputs))
	copy(names, f.Inputs)
	sort.SliceStable(names, func(i, j int) bool { return names[i].Buf < names[j].Buf })
	for _, n := range names {
		b := &g.Plan.Buffers[n.Buf]
		count := int(b.Elems.Eval(map[string]int{"B": rows}))
		switch b.DType {
		case F32:
			v := make([]float32, count)
			for i := range v {
				v[i] = 2*rng.Float32() - 1
			}
			in[n.Name] = v
		case F64:
			v := make([]float64, count)
			for i := range v {
				v[i] = 2*rng.Float64() - 1
			}
			in[n.Name] = v
		case I32:
			if b.Bound <= 0 {
				return nil, fmt.Errorf("%s: integer input %q has no recorded bound", g.Name, n.Name)
			}
			v := make([]int32, count)
			for i := range v {
				v[i] = int32(rng.Int64N(b.Bound))
			}
			in[n.Name] = v
		default:
			return nil, fmt.Errorf("%s: input %q has dtype %s", g.Name, n.Name, b.DType)
		}
	}
	return in, nil
}
