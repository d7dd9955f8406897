package codegen

import (
	"fmt"
	"go/format"
	"go/token"
	"go/types"
	"regexp"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/runtime"
)

const rtPath = "github.com/ngen-ml/ngen/runtime"

// GlueOptions name what the Go glue refers to.
type GlueOptions struct {
	Package    string // Go package name; sanitised again here
	Source     string // DSL file, for the header
	CUFile     string // the .cu embedded for the GPU backend, e.g. "mlp.cu"
	HostImport string // import path of the host subpackage (cgo build of the kernels)
	HasFatbin  bool   // embed <package>.fatbin.gz (FatbinFile) beside the .cu
}

// plainFile is what a //go:embed line may name without quoting.
var plainFile = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// elemType is the Go element type of host slices for each device dtype.
var elemType = map[runtime.DType]string{runtime.F32: "float32", runtime.F64: "float64", runtime.I32: "int32"}

// GoGlue writes the typed Go package for a plan with jennifer. User names
// (inputs, parameters, the model) reach it only inside string literals or as
// sanitised identifiers, so no declaration can inject code.
func GoGlue(p *runtime.Plan, o GlueOptions) ([]byte, error) {
	pkg := goPackageName(o.Package)
	if !plainFile.MatchString(o.CUFile) {
		return nil, fmt.Errorf("go glue: CUDA file name %q is not a plain file name", o.CUFile)
	}
	T, ok := elemType[p.DType]
	if !ok {
		return nil, fmt.Errorf("go glue: model %q: no Go type for parameter dtype %s", p.Model, p.DType)
	}
	if o.HostImport == "" {
		return nil, fmt.Errorf("go glue: model %q: no import path for the host subpackage", p.Model)
	}
	g := &glue{plan: p, pkg: pkg, T: T}

	f := jen.NewFile(pkg)
	f.ImportName(rtPath, "runtime")
	f.HeaderComment(Header(o.Source))
	// One // comment per line: a block comment could be closed early by a
	// "*/" in a user-supplied name.
	for _, l := range []string{
		fmt.Sprintf("Package %s is the ngen-generated model %s: a typed training and", pkg, oneLine(fmt.Sprintf("%q", p.Model))),
		"inference API over the compiled plan, running on any runtime.Device",
		"(runtime/cpu executes the generated CUDA C on the host, runtime/cuda on a GPU).",
		"",
		"	m, err := " + pkg + ".New(dev, " + pkg + ".Options{Batch: 128})",
		"	loss, err := m.Step(inputs...) // forward, backward and optimizer update",
		"	out, err := m.Predict(inputs...)",
		"",
		"Regenerate it with go generate; do not edit.",
	} {
		f.PackageComment(strings.TrimRight(l, " "))
	}
	f.Anon("embed")

	f.Comment("cudaSource is the generated CUDA C; the GPU backend compiles it with NVRTC.")
	f.Comment("")
	f.Comment("//go:embed " + o.CUFile)
	f.Var().Id("cudaSource").String()
	fatbin := jen.Nil()
	if o.HasFatbin {
		f.Comment("fatbinGz is nvcc's sm_80 and sm_90 code (and compute_80 PTX) for")
		f.Comment("cudaSource, gzip-compressed, which the GPU backend loads.")
		f.Comment("")
		f.Comment("//go:embed " + FatbinFile(strings.TrimSuffix(o.CUFile, ".cu")))
		f.Var().Id("fatbinGz").Index().Byte()
		fatbin = jen.Id("fatbinGz")
	}
	f.Comment("planJSON is the compiled model as data (runtime.EncodePlan).")
	f.Comment("")
	f.Comment("//go:embed " + PlanFile)
	f.Var().Id("planJSON").Index().Byte()
	f.Comment("Plan is the compiled model: buffers, kernels with their launch")
	f.Comment("descriptions, and the steps of each function.")
	f.Var().Id("Plan").Op("=").Qual(rtPath, "MustDecodePlan").Call(jen.Id("planJSON"))

	f.Comment("module is the kernels in every form a backend may load: the CUDA")
	f.Comment("source and nvcc's fatbin for the GPU, the host subpackage's cgo")
	f.Comment("build for the CPU.")
	f.Func().Id("module").Params().Op("*").Qual(rtPath, "Module").Block(
		jen.Return(jen.Op("&").Qual(rtPath, "Module").Values(jen.Dict{
			jen.Id("Name"):     jen.Lit(pkg),
			jen.Id("Source"):   jen.Id("cudaSource"),
			jen.Id("FatbinGz"): fatbin,
			jen.Id("Kernels"):  jen.Id("Plan").Dot("Kernels"),
			jen.Id("CPUEntry"): jen.Qual(o.HostImport, "Entry"),
		})),
	)

	f.Comment("init registers the package with runtime.Register, so tools, tests and")
	f.Comment("benchmarks that take any model find it by name.")
	f.Func().Id("init").Params().Block(
		jen.Qual(rtPath, "Register").Call(jen.Qual(rtPath, "Generated").Values(jen.Dict{
			jen.Id("Path"):   jen.Lit(strings.TrimSuffix(o.HostImport, "/host")),
			jen.Id("Name"):   jen.Lit(pkg),
			jen.Id("Model"):  jen.Lit(p.Model),
			jen.Id("Source"): jen.Lit(o.Source),
			jen.Id("Plan"):   jen.Id("Plan"),
			jen.Id("Module"): jen.Id("module"),
		})),
	)

	g.constructor(f)
	g.lockHelper(f)
	if err := g.step(f); err != nil {
		return nil, err
	}
	if err := g.predict(f); err != nil {
		return nil, err
	}
	g.accessors(f)

	var buf strings.Builder
	if err := f.Render(&buf); err != nil {
		return nil, fmt.Errorf("go glue: rendering: %w", err)
	}
	out, err := format.Source([]byte(buf.String()))
	if err != nil {
		return nil, fmt.Errorf("go glue: formatting: %w", err)
	}
	return out, nil
}

type glue struct {
	plan *runtime.Plan
	pkg  string
	T    string // Go element type of parameters and outputs
}

func (g *glue) fn(name string) *runtime.Func {
	for i := range g.plan.Funcs {
		if g.plan.Funcs[i].Name == name {
			return &g.plan.Funcs[i]
		}
	}
	return nil
}

func recv(f *jen.File) *jen.Statement { return f.Func().Params(jen.Id("m").Op("*").Id("Model")) }

func ms() *jen.Statement { return jen.Id("m").Dot("s") }

// Every method body takes the model's mutex (errBody, plainBody in
// goglue_nil.go): a model is safe for concurrent use, each method running
// alone (README, "Concurrency").

func (g *glue) constructor(f *jen.File) {
	f.Comment("Options size a model instance.")
	f.Type().Id("Options").Struct(
		jen.Id("Batch").Int().Comment("largest batch Step and Predict accept; must be positive"),
		jen.Id("Seed").Uint64().Comment("parameter initialisation and dropout"),
		jen.Id("AccumulationSteps").Int().Comment("k > 1: Step sums the gradients of k calls and updates on every k-th"),
	)
	f.Comment("Model is one instance of the model on a device. It is safe for concurrent")
	f.Comment("use: each method runs alone. After Close every method returns an error.")
	f.Comment("A nil *Model or a zero Model (not made by New) does not panic: methods")
	f.Comment("with an error result return an error, the others their zero value.")
	f.Type().Id("Model").Struct(jen.Id("s").Op("*").Qual(rtPath, "Session"), jen.Id("mu").Qual("sync", "Mutex"))

	f.Comment("New loads the kernels on dev, allocates storage for batches of up to")
	f.Comment("opts.Batch rows and initialises the parameters as PyTorch would.")
	f.Func().Id("New").Params(jen.Id("dev").Qual(rtPath, "Device"), jen.Id("opts").Id("Options")).Params(jen.Op("*").Id("Model"), jen.Error()).Block(
		jen.If(jen.Id("opts").Dot("Batch").Op("<=").Lit(0)).Block(
			jen.Return(jen.Nil(), jen.Qual("fmt", "Errorf").Call(jen.Lit(g.pkg+".New: Options.Batch must be positive, got %d"), jen.Id("opts").Dot("Batch")))),
		jen.List(jen.Id("s"), jen.Err()).Op(":=").Qual(rtPath, "NewSession").Call(jen.Id("dev"), jen.Id("Plan"), jen.Id("module").Call(),
			jen.Qual(rtPath, "SessionOptions").Values(jen.Dict{jen.Id("MaxBatch"): jen.Id("opts").Dot("Batch"), jen.Id("Seed"): jen.Id("opts").Dot("Seed"),
				jen.Id("AccumulationSteps"): jen.Id("opts").Dot("AccumulationSteps")})),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Return(jen.Op("&").Id("Model").Values(jen.Dict{jen.Id("s"): jen.Id("s")}), jen.Nil()),
	)

	f.Comment("MaxBatch is the largest Options.Batch whose model fits in budget bytes of")
	f.Comment("dev (budget <= 0: what dev can still supply), computed from the plan's")
	f.Comment("sizes without allocating. Options.AccumulationSteps > 1 needs one more")
	f.Comment("gradient-sized vector; see runtime.MaxBatch.")
	f.Func().Id("MaxBatch").Params(jen.Id("dev").Qual(rtPath, "Device"), jen.Id("budget").Int64()).Params(jen.Int(), jen.Error()).Block(
		jen.Return(jen.Qual(rtPath, "MaxBatch").Call(jen.Id("dev"), jen.Id("Plan"), jen.Id("budget"), jen.Qual(rtPath, "SessionOptions").Values())),
	)
}

// feed declares one typed slice parameter per input of fn and the body that
// infers the batch's rows from the first batch-sized input and writes every
// input. zero is the function's zero result besides the error.
func (g *glue) feed(fn *runtime.Func, method string, zero jen.Code) (params, body []jen.Code, err error) {
	used := map[string]bool{"m": true, "rows": true, "err": true, "out": true, "loss": true, "fn": true, "buf": true}
	ids := make([]string, len(fn.Inputs))
	rowsFrom := -1
	for i, in := range fn.Inputs {
		b := g.plan.Buffers[in.Buf]
		et, ok := elemType[b.DType]
		if !ok {
			return nil, nil, fmt.Errorf("go glue: input %q: no Go type for %s", in.Name, b.DType)
		}
		ids[i] = goIdent(in.Name, used)
		params = append(params, jen.Id(ids[i]).Index().Id(et))
		if rowsFrom < 0 && len(b.Elems.Syms) == 1 && b.Elems.Syms[0] == "B" {
			rowsFrom = i
		}
	}
	if rowsFrom < 0 {
		// No input is batch-sized: the function runs on one "row".
		body = append(body, jen.Id("rows").Op(":=").Lit(1))
	} else {
		in, b := fn.Inputs[rowsFrom], g.plan.Buffers[fn.Inputs[rowsFrom].Buf]
		x, per := jen.Id(ids[rowsFrom]), int(b.Elems.Mul)
		// The message is a format string: user text in it must not hold verbs.
		where := ""
		if b.Pos != "" {
			where = " (" + escapeVerbs(b.Pos) + ")"
		}
		msg := fmt.Sprintf("%s.%s: input %%q%s has shape %s: got %%d values, not a positive whole number of rows of %d",
			g.pkg, method, where, escapeVerbs(b.Shape), per)
		body = append(body,
			jen.If(jen.Len(x.Clone()).Op("==").Lit(0).Op("||").Len(x.Clone()).Op("%").Lit(per).Op("!=").Lit(0)).Block(
				jen.Return(zero, jen.Qual("fmt", "Errorf").Call(jen.Lit(msg), jen.Lit(in.Name), jen.Len(x.Clone())))),
			jen.Id("rows").Op(":=").Len(x.Clone()).Op("/").Lit(per),
		)
	}
	// A training step's inputs skip the host's scan for NaN and ±Inf,
	// which only inference uses (runtime.Session.WriteStepInput).
	write := "WriteInput"
	if fn.Name == "step" {
		write = "WriteStepInput"
	}
	for i, in := range fn.Inputs {
		body = append(body, jen.If(jen.Err().Op(":=").Add(ms()).Dot(write).Call(jen.Lit(in.Name), jen.Id(ids[i]), jen.Id("rows")), jen.Err().Op("!=").Nil()).Block(
			jen.Return(zero, jen.Err())))
	}
	return params, body, nil
}

func output(fn *runtime.Func, name string) (int, error) {
	for _, o := range fn.Outputs {
		if o.Name == name {
			return o.Buf, nil
		}
	}
	return 0, fmt.Errorf("go glue: function %s has no output %q", fn.Name, name)
}

func (g *glue) step(f *jen.File) error {
	st := g.fn("step")
	if st == nil {
		return nil
	}
	loss, err := output(st, "loss")
	if err != nil {
		return err
	}
	if lt := g.plan.Buffers[loss].DType; lt != g.plan.DType {
		return fmt.Errorf("go glue: loss is %s, parameters %s", lt, g.plan.DType)
	}
	for _, m := range []struct {
		name, run string
		doc       []string
	}{
		{"Step", "Run", []string{
			"Step runs one training step (forward, backward, optimizer update) on a",
			"batch and returns the loss. Each input holds whole rows, row-major; the",
			"batch size is their row count and must not exceed Options.Batch. With",
			"Options.AccumulationSteps k > 1, each call is a micro-batch and every",
			"k-th successful one also runs the update (see Accumulate).",
		}},
		{"Accumulate", "RunGrads", []string{
			"Accumulate runs forward and backward on a micro-batch, adds its gradient",
			"to the pending ones and returns its loss; Update then applies their mean",
			"(as scaling each micro-batch's loss by 1/k). On error nothing is added.",
			"Batch norm uses each micro-batch's own statistics, as PyTorch does.",
		}},
	} {
		params, body, err := g.feed(st, m.name, jen.Lit(0))
		if err != nil {
			return err
		}
		call := ms().Dot(m.run).Call(jen.Id("rows"))
		if m.run == "Run" {
			call = ms().Dot("Run").Call(jen.Lit("step"), jen.Id("rows"))
		}
		body = append(body,
			jen.If(jen.Err().Op(":=").Add(call), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Lit(0), jen.Err())),
			// The step's check read the loss with the status block.
			jen.List(jen.Id("out"), jen.Err()).Op(":=").Add(ms()).Dot("StepLoss").Call(),
			jen.Return(jen.Id(g.T).Call(jen.Id("out")), jen.Err()),
		)
		for _, l := range m.doc {
			f.Comment(l)
		}
		recv(f).Id(m.name).Params(params...).Params(jen.Id("loss").Id(g.T), jen.Err().Error()).Block(errBody(m.name, []jen.Code{jen.Lit(0)}, body...)...)
	}
	f.Comment("Update runs the optimizer update with the mean gradient of the micro-batches")
	f.Comment("accumulated since the last update.")
	recv(f).Id("Update").Params().Error().Block(errBody("Update", nil, jen.Return(ms().Dot("RunUpdate").Call()))...)
	return nil
}

func (g *glue) predict(f *jen.File) error {
	pr := g.fn("predict")
	if pr == nil {
		return nil
	}
	out, err := output(pr, "output")
	if err != nil {
		return err
	}
	et, ok := elemType[g.plan.Buffers[out].DType]
	if !ok {
		return fmt.Errorf("go glue: output is %s", g.plan.Buffers[out].DType)
	}
	params, body, err := g.feed(pr, "Predict", jen.Nil())
	if err != nil {
		return err
	}
	// In eval mode the plan's predict_eval, when it has one, skips what
	// only training mode reads.
	body = append(body, jen.List(jen.Id("fn"), jen.Id("buf")).Op(":=").List(jen.Lit("predict"), jen.Lit(out)))
	if pe := g.fn("predict_eval"); pe != nil {
		outE, err := output(pe, "output")
		if err != nil {
			return err
		}
		if g.plan.Buffers[outE].DType != g.plan.Buffers[out].DType {
			return fmt.Errorf("go glue: predict and predict_eval outputs differ in type")
		}
		body = append(body, jen.If(jen.Op("!").Add(ms()).Dot("Training").Call()).Block(
			jen.List(jen.Id("fn"), jen.Id("buf")).Op("=").List(jen.Lit("predict_eval"), jen.Lit(outE))))
	}
	body = append(body,
		jen.If(jen.Err().Op(":=").Add(ms()).Dot("Run").Call(jen.Id("fn"), jen.Id("rows")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Id("out").Op(":=").Make(jen.Index().Id(et), ms().Dot("Elems").Call(jen.Id("buf"))),
		jen.If(jen.Err().Op(":=").Add(ms()).Dot("Read").Call(jen.Id("buf"), jen.Id("out")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Return(jen.Id("out"), jen.Nil()),
	)
	f.Comment("Predict runs the forward pass (in the current Train/Eval mode) and")
	f.Comment("returns the model's output for every row, row-major.")
	recv(f).Id("Predict").Params(params...).Params(jen.Index().Id(et), jen.Error()).Block(errBody("Predict", []jen.Code{jen.Nil()}, body...)...)
	return nil
}

func (g *glue) accessors(f *jen.File) {
	T := g.T
	f.Comment("Train selects training behaviour (dropout on), like torch's model.train().")
	recv(f).Id("Train").Params().Block(plainBody("Train", nil, ms().Dot("SetTrain").Call(jen.True()))...)
	f.Comment("Eval selects evaluation behaviour (dropout off), like model.eval().")
	recv(f).Id("Eval").Params().Block(plainBody("Eval", nil, ms().Dot("SetTrain").Call(jen.False()))...)
	f.Comment("Training reports whether the model is in training mode.")
	recv(f).Id("Training").Params().Bool().Block(plainBody("Training", []jen.Code{jen.False()}, jen.Return(ms().Dot("Training").Call()))...)
	f.Comment("SetLR changes the learning rate of later steps; NaN, ±Inf and negative")
	f.Comment("rates are rejected and leave the rate as it was.")
	recv(f).Id("SetLR").Params(jen.Id("lr").Float64()).Error().Block(errBody("SetLR", nil, jen.Return(ms().Dot("SetLR").Call(jen.Id("lr"))))...)
	f.Comment("Params lists the parameter names in declaration order.")
	recv(f).Id("Params").Params().Index().String().Block(plainBody("Params", []jen.Code{jen.Nil()}, jen.Return(ms().Dot("Names").Call(jen.Lit("param"))))...)
	for _, acc := range []struct{ name, role, doc string }{
		{"Param", "param", "Param returns a copy of the named parameter."},
		{"Grad", "grad", "Grad returns a copy of the named parameter's gradient from the last Step."},
	} {
		f.Comment(acc.doc)
		recv(f).Id(acc.name).Params(jen.Id("name").String()).Params(jen.Index().Id(T), jen.Error()).Block(errBody(acc.name, []jen.Code{jen.Nil()},
			jen.List(jen.Id("i"), jen.Err()).Op(":=").Add(ms()).Dot("Lookup").Call(jen.Lit(acc.role), jen.Id("name")),
			jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
			jen.Id("out").Op(":=").Make(jen.Index().Id(T), ms().Dot("Elems").Call(jen.Id("i"))),
			jen.If(jen.Err().Op(":=").Add(ms()).Dot("Read").Call(jen.Id("i"), jen.Id("out")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
			jen.Return(jen.Id("out"), jen.Nil()),
		)...)
	}
	f.Comment("SetParam overwrites the named parameter; v must have its element count.")
	recv(f).Id("SetParam").Params(jen.Id("name").String(), jen.Id("v").Index().Id(T)).Error().Block(errBody("SetParam", nil,
		jen.List(jen.Id("i"), jen.Err()).Op(":=").Add(ms()).Dot("Lookup").Call(jen.Lit("param"), jen.Id("name")),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
		jen.Id("f").Op(":=").Make(jen.Index().Float64(), jen.Len(jen.Id("v"))),
		jen.For(jen.List(jen.Id("k"), jen.Id("x")).Op(":=").Range().Id("v")).Block(jen.Id("f").Index(jen.Id("k")).Op("=").Float64().Parens(jen.Id("x"))),
		jen.Return(ms().Dot("WriteFloats").Call(jen.Id("i"), jen.Id("f"))),
	)...)
	f.Comment("Save writes a safetensors checkpoint: parameters and state under their")
	f.Comment("PyTorch state_dict names, optimizer state, step count, with a SHA-256.")
	recv(f).Id("Save").Params(jen.Id("w").Qual("io", "Writer")).Error().Block(errBody("Save", nil, jen.Return(ms().Dot("Save").Call(jen.Id("w"))))...)
	f.Comment("Load restores a checkpoint written by Save (or from PyTorch through")
	f.Comment("scripts/safetensors_io.py); it checks everything first, and on error")
	f.Comment("nothing changes.")
	recv(f).Id("Load").Params(jen.Id("r").Qual("io", "Reader")).Error().Block(errBody("Load", nil, jen.Return(ms().Dot("Load").Call(jen.Id("r"))))...)
	f.Comment("MemStats reports the device's memory: bytes allocated, reserved (held from")
	f.Comment("the driver, including a caching allocator's cache) and the peak allocated,")
	f.Comment("as torch.cuda.memory_allocated, memory_reserved and max_memory_allocated.")
	recv(f).Id("MemStats").Params().Qual(rtPath, "MemStats").Block(plainBody("MemStats", []jen.Code{jen.Qual(rtPath, "MemStats").Values()}, jen.Return(ms().Dot("Device").Call().Dot("MemStats").Call()))...)
	f.Comment("ResetPeak restarts the device's peak from what is allocated now, like")
	f.Comment("torch.cuda.reset_peak_memory_stats; false when the backend cannot.")
	recv(f).Id("ResetPeak").Params().Bool().Block(plainBody("ResetPeak", []jen.Code{jen.False()}, jen.Return(jen.Qual(rtPath, "ResetPeak").Call(ms().Dot("Device").Call())))...)
	f.Comment("Close frees the model's device memory.")
	recv(f).Id("Close").Params().Error().Block(errBody("Close", nil, jen.Return(ms().Dot("Close").Call()))...)
	f.Comment("Session exposes the underlying runtime session, which is not safe for")
	f.Comment("concurrent use: calls on it bypass the model's mutex.")
	recv(f).Id("Session").Params().Op("*").Qual(rtPath, "Session").Block(
		jen.If(jen.Id("m").Op("==").Nil()).Block(jen.Return(jen.Nil())), jen.Return(ms()))
}

// reserved are the identifiers a generated method body uses besides its
// parameters; an input sanitised to one of them gets a suffix.
var reserved = map[string]bool{"fmt": true, "io": true, "runtime": true, "embed": true, "cudaSource": true, "ptx": true, "fatbin": true, "fatbinGz": true, "Plan": true, "module": true, "cpuEntry": true}

// goIdent sanitises a user name into a fresh Go identifier: ASCII letters,
// digits and underscores, not a keyword, not starting with a digit, and not
// shadowing a predeclared or package-level name the glue uses.
func goIdent(name string, used map[string]bool) string {
	id := compiler.Sanitize(name)
	if token.IsKeyword(id) || id == "_" || reserved[id] || types.Universe.Lookup(id) != nil {
		id += "_"
	}
	base := id
	for n := 2; used[id]; n++ {
		id = fmt.Sprintf("%s_%d", base, n)
	}
	used[id] = true
	return id
}

// goPackageName sanitises a package name (compiler.PackageName).
func goPackageName(s string) string { return compiler.PackageName(s) }

// escapeVerbs makes s safe inside a fmt format string.
func escapeVerbs(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// oneLine keeps a user string on one comment line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029' || r == '\u0085' {
			return ' '
		}
		return r
	}, s)
}
