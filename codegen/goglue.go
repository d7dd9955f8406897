package codegen

import (
	"fmt"
	"go/format"
	"go/token"
	"reflect"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/runtime"
)

const rtPath = "github.com/ngen-ml/ngen/runtime"

// GlueOptions name what the Go glue refers to.
type GlueOptions struct {
	Package     string
	Source      string // DSL file, for the header
	CUFile      string // embedded for the GPU backend
	EntrySymbol string // the C entry point kernels_cpu.go exposes as cpuEntry
	HasPTX      bool
}

// GoGlue writes the typed Go package for a plan with jennifer. User names
// reach it only as string literals or as sanitised identifiers.
func GoGlue(p *runtime.Plan, o GlueOptions) ([]byte, error) {
	f := jen.NewFile(o.Package)
	f.HeaderComment(Header(o.Source))
	f.PackageComment(fmt.Sprintf("Package %s is the ngen-generated model %q: typed training and\ninference on any runtime.Device. Regenerate with go generate; do not edit.", o.Package, p.Model))
	f.Anon("embed")
	f.Comment("//go:embed " + o.CUFile)
	f.Var().Id("cudaSource").String()
	if o.HasPTX {
		f.Comment("//go:embed " + strings.TrimSuffix(o.CUFile, ".cu") + ".ptx")
		f.Var().Id("ptx").String()
	}
	f.Comment("Plan is the compiled model: buffers, kernels with their launch\ndescriptions, and the steps of each function.")
	f.Var().Id("Plan").Op("=").Op("&").Add(literal(reflect.ValueOf(*p)))

	elem := map[runtime.DType]string{runtime.F32: "float32", runtime.F64: "float64", runtime.I32: "int32"}
	T := elem[p.DType]
	fn := func(name string) *runtime.Func {
		for i := range p.Funcs {
			if p.Funcs[i].Name == name {
				return &p.Funcs[i]
			}
		}
		return nil
	}

	f.Comment("Options size a model instance.")
	f.Type().Id("Options").Struct(
		jen.Id("Batch").Int().Comment("largest batch Step and Predict accept"),
		jen.Id("Seed").Uint64().Comment("parameter initialisation and dropout"),
	)
	f.Comment("Model is one instance of the model on a device.")
	f.Type().Id("Model").Struct(jen.Id("s").Op("*").Qual(rtPath, "Session"))

	ptx := jen.Lit("")
	if o.HasPTX {
		ptx = jen.Id("ptx")
	}
	f.Comment("New loads the kernels on dev and initialises the parameters.")
	f.Func().Id("New").Params(jen.Id("dev").Qual(rtPath, "Device"), jen.Id("opts").Id("Options")).Params(jen.Op("*").Id("Model"), jen.Error()).Block(
		jen.Id("mod").Op(":=").Op("&").Qual(rtPath, "Module").Values(jen.Dict{
			jen.Id("Name"):     jen.Lit(o.Package),
			jen.Id("Source"):   jen.Id("cudaSource"),
			jen.Id("PTX"):      ptx,
			jen.Id("Kernels"):  jen.Id("Plan").Dot("Kernels"),
			jen.Id("CPUEntry"): jen.Id("cpuEntry"),
		}),
		jen.List(jen.Id("s"), jen.Err()).Op(":=").Qual(rtPath, "NewSession").Call(jen.Id("dev"), jen.Id("Plan"), jen.Id("mod"),
			jen.Qual(rtPath, "SessionOptions").Values(jen.Dict{jen.Id("MaxBatch"): jen.Id("opts").Dot("Batch"), jen.Id("Seed"): jen.Id("opts").Dot("Seed")})),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Return(jen.Op("&").Id("Model").Values(jen.Dict{jen.Id("s"): jen.Id("s")}), jen.Nil()),
	)

	// feed writes typed inputs and returns the batch's rows.
	feed := func(fnName string, ins []runtime.Named, zero func() jen.Code) ([]jen.Code, []jen.Code) {
		var params, body []jen.Code
		used := map[string]bool{"m": true, "rows": true, "err": true, "out": true, "loss": true}
		for i, in := range ins {
			b := p.Buffers[in.Buf]
			id := goIdent(in.Name, used)
			params = append(params, jen.Id(id).Index().Id(elem[b.DType]))
			per := b.Elems.Mul
			if i == 0 {
				body = append(body,
					jen.If(jen.Len(jen.Id(id)).Op("==").Lit(0).Op("||").Len(jen.Id(id)).Op("%").Lit(int(per)).Op("!=").Lit(0)).Block(
						jen.Return(zero(), jen.Qual("fmt", "Errorf").Call(jen.Lit(fmt.Sprintf("%s.%s: input %%q has shape %s: got %%d values, not a whole number of rows of %d", p.Model, strings.Title(fnName), b.Shape, per)), jen.Lit(in.Name), jen.Len(jen.Id(id))))),
					jen.Id("rows").Op(":=").Len(jen.Id(id)).Op("/").Lit(int(per)),
				)
			}
			body = append(body, jen.If(jen.Err().Op(":=").Id("m").Dot("s").Dot("WriteInput").Call(jen.Lit(in.Name), jen.Id(id), jen.Id("rows")), jen.Err().Op("!=").Nil()).Block(
				jen.Return(zero(), jen.Err())))
		}
		return params, body
	}
	if st := fn("step"); st != nil && len(st.Inputs) > 0 {
		params, body := feed("step", st.Inputs, func() jen.Code { return jen.Lit(0) })
		body = append(body,
			jen.If(jen.Err().Op(":=").Id("m").Dot("s").Dot("Run").Call(jen.Lit("step"), jen.Id("rows")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Lit(0), jen.Err())),
			jen.Id("out").Op(":=").Make(jen.Index().Id(T), jen.Lit(1)),
			jen.If(jen.Err().Op(":=").Id("m").Dot("s").Dot("Read").Call(jen.Id("m").Dot("lossBuf").Call(), jen.Id("out")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Lit(0), jen.Err())),
			jen.Return(jen.Id("out").Index(jen.Lit(0)), jen.Nil()),
		)
		f.Comment("Step runs one fused training step (forward, backward, optimizer update)\non a batch and returns the loss. Each input holds whole rows; the batch\nsize is their row count.")
		f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("Step").Params(params...).Params(jen.Id(T), jen.Error()).Block(body...)
		lossBuf := -1
		for _, o := range st.Outputs {
			if o.Name == "loss" {
				lossBuf = o.Buf
			}
		}
		f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("lossBuf").Params().Int().Block(jen.Return(jen.Lit(lossBuf)))
	}
	if pr := fn("predict"); pr != nil && len(pr.Inputs) > 0 {
		params, body := feed("predict", pr.Inputs, func() jen.Code { return jen.Nil() })
		outBuf := pr.Outputs[0].Buf
		body = append(body,
			jen.If(jen.Err().Op(":=").Id("m").Dot("s").Dot("Run").Call(jen.Lit("predict"), jen.Id("rows")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
			jen.Id("out").Op(":=").Make(jen.Index().Id(T), jen.Id("m").Dot("s").Dot("Elems").Call(jen.Lit(outBuf))),
			jen.Return(jen.Id("out"), jen.Id("m").Dot("s").Dot("Read").Call(jen.Lit(outBuf), jen.Id("out"))),
		)
		f.Comment("Predict runs the forward pass (in the current train/eval mode) and\nreturns the output for every row.")
		f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("Predict").Params(params...).Params(jen.Index().Id(T), jen.Error()).Block(body...)
	}
	recv := func() *jen.Statement { return f.Func().Params(jen.Id("m").Op("*").Id("Model")) }
	f.Comment("Train selects training behaviour (dropout on), like torch's model.train().")
	recv().Id("Train").Params().Block(jen.Id("m").Dot("s").Dot("SetTrain").Call(jen.True()))
	f.Comment("Eval selects evaluation behaviour (dropout off), like model.eval().")
	recv().Id("Eval").Params().Block(jen.Id("m").Dot("s").Dot("SetTrain").Call(jen.False()))
	f.Comment("Training reports the mode.")
	recv().Id("Training").Params().Bool().Block(jen.Return(jen.Id("m").Dot("s").Dot("Training").Call()))
	f.Comment("SetLR changes the learning rate of later steps.")
	recv().Id("SetLR").Params(jen.Id("lr").Float64()).Block(jen.Id("m").Dot("s").Dot("SetLR").Call(jen.Id("lr")))
	f.Comment("Params lists the parameter names in declaration order.")
	recv().Id("Params").Params().Index().String().Block(jen.Return(jen.Id("m").Dot("s").Dot("Names").Call(jen.Lit("param"))))
	for _, acc := range []struct{ name, role, doc string }{
		{"Param", "param", "Param returns a copy of the named parameter."},
		{"Grad", "grad", "Grad returns the named parameter's gradient from the last Step."},
	} {
		f.Comment(acc.doc)
		recv().Id(acc.name).Params(jen.Id("name").String()).Params(jen.Index().Id(T), jen.Error()).Block(
			jen.List(jen.Id("i"), jen.Err()).Op(":=").Id("m").Dot("s").Dot("Lookup").Call(jen.Lit(acc.role), jen.Id("name")),
			jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
			jen.Id("out").Op(":=").Make(jen.Index().Id(T), jen.Id("m").Dot("s").Dot("Elems").Call(jen.Id("i"))),
			jen.Return(jen.Id("out"), jen.Id("m").Dot("s").Dot("Read").Call(jen.Id("i"), jen.Id("out"))),
		)
	}
	f.Comment("SetParam overwrites the named parameter.")
	recv().Id("SetParam").Params(jen.Id("name").String(), jen.Id("v").Index().Id(T)).Error().Block(
		jen.List(jen.Id("i"), jen.Err()).Op(":=").Id("m").Dot("s").Dot("Lookup").Call(jen.Lit("param"), jen.Id("name")),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
		jen.Id("f").Op(":=").Make(jen.Index().Float64(), jen.Len(jen.Id("v"))),
		jen.For(jen.List(jen.Id("k"), jen.Id("x")).Op(":=").Range().Id("v")).Block(jen.Id("f").Index(jen.Id("k")).Op("=").Float64().Parens(jen.Id("x"))),
		jen.Return(jen.Id("m").Dot("s").Dot("WriteFloats").Call(jen.Id("i"), jen.Id("f"))),
	)
	f.Comment("Save writes a checkpoint: parameters, optimizer state, step count.")
	recv().Id("Save").Params(jen.Id("w").Qual("io", "Writer")).Error().Block(jen.Return(jen.Id("m").Dot("s").Dot("Save").Call(jen.Id("w"))))
	f.Comment("Load restores a checkpoint written by Save; on error nothing changes.")
	recv().Id("Load").Params(jen.Id("r").Qual("io", "Reader")).Error().Block(jen.Return(jen.Id("m").Dot("s").Dot("Load").Call(jen.Id("r"))))
	f.Comment("Close frees the model's device memory.")
	recv().Id("Close").Params().Error().Block(jen.Return(jen.Id("m").Dot("s").Dot("Close").Call()))
	f.Comment("Session exposes the underlying runtime session.")
	recv().Id("Session").Params().Op("*").Qual(rtPath, "Session").Block(jen.Return(jen.Id("m").Dot("s")))

	var buf strings.Builder
	if err := f.Render(&buf); err != nil {
		return nil, fmt.Errorf("rendering Go glue: %w", err)
	}
	out, err := format.Source([]byte(buf.String()))
	if err != nil {
		return nil, fmt.Errorf("formatting Go glue: %w", err)
	}
	return out, nil
}

// goIdent sanitises a user name into a fresh Go identifier.
func goIdent(name string, used map[string]bool) string {
	id := compiler.Sanitize(name)
	if token.IsKeyword(id) || id == "_" {
		id += "_"
	}
	base := id
	for n := 2; used[id]; n++ {
		id = fmt.Sprintf("%s%d", base, n)
	}
	used[id] = true
	return id
}

// literal renders a value as a Go composite literal, naming runtime types
// and leaving zero fields out.
func literal(v reflect.Value) jen.Code {
	t := v.Type()
	switch v.Kind() {
	case reflect.Struct:
		d := jen.Dict{}
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() || v.Field(i).IsZero() {
				continue
			}
			d[jen.Id(t.Field(i).Name)] = literal(v.Field(i))
		}
		return jen.Qual(t.PkgPath(), t.Name()).Values(d)
	case reflect.Slice, reflect.Array:
		var items []jen.Code
		for i := 0; i < v.Len(); i++ {
			items = append(items, literalElem(v.Index(i)))
		}
		if v.Kind() == reflect.Array {
			return jen.Index(jen.Lit(v.Len())).Add(typeCode(t.Elem())).Values(items...)
		}
		return jen.Index().Add(typeCode(t.Elem())).Values(items...)
	case reflect.String:
		return jen.Lit(v.String())
	case reflect.Bool:
		return jen.Lit(v.Bool())
	case reflect.Float64:
		return jen.Lit(v.Float())
	case reflect.Int, reflect.Int64:
		if t.PkgPath() != "" {
			return jen.Qual(t.PkgPath(), t.Name()).Call(jen.Lit(int(v.Int())))
		}
		return jen.Lit(int(v.Int()))
	}
	panic("codegen: no literal for " + t.String())
}

// literalElem leaves the type off struct elements of slices (Go allows it).
func literalElem(v reflect.Value) jen.Code {
	if v.Kind() == reflect.Struct {
		d := jen.Dict{}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() || v.Field(i).IsZero() {
				continue
			}
			d[jen.Id(t.Field(i).Name)] = literal(v.Field(i))
		}
		return jen.Values(d)
	}
	return literal(v)
}

func typeCode(t reflect.Type) jen.Code {
	if t.PkgPath() != "" {
		return jen.Qual(t.PkgPath(), t.Name())
	}
	return jen.Id(t.Name())
}
