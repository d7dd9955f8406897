package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/codegen/graph"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/dsl/eval"
	"github.com/ngen-ml/ngen/internal/outfile"
)

// graphCmd is ngen graph: the training step's kernels as a picture
// (codegen/graph), written to -o or as DOT to stdout.
func graphCmd(args []string) error {
	fs := flag.NewFlagSet("graph", flag.ExitOnError)
	fuse := fuseFlag(fs)
	amp := ampFlag(fs)
	out := fs.String("o", "", "output file: .svg or .png (rendered with Graphviz's dot) or .dot (default: DOT on stdout)")
	name := fs.String("model", "", "model name when the file declares several")
	batch := fs.Int("batch", 128, "batch size for the bytes, FLOPs and modeled times")
	gpu := fs.String("gpu", "h100", "GPU whose modeled time labels the kernels: h100, h200 or a100")
	graphs := fs.Bool("graphs", true, "the step is one CUDA graph (the GPU backend's default), as ngen report -graphs")
	tf32 := fs.Bool("tf32", false, "f32 GEMMs on TF32 tensor cores, as ngen report -tf32")
	fold := fs.Bool("fold", true, "draw a run of identical layers once, with its count")
	fs.Parse(args)
	if err := oneFile("graph", fs); err != nil {
		return err
	}
	if *batch <= 0 {
		return fmt.Errorf("graph: -batch %d: want a positive batch size", *batch)
	}
	if _, ok := codegen.GPUs[strings.ToLower(*gpu)]; !ok {
		return fmt.Errorf("graph: -gpu %s: want h100, h200 or a100", *gpu)
	}
	on, err := parseFuse(*fuse)
	if err != nil {
		return err
	}
	ampMode, err := compiler.ParseAMP(*amp)
	if err != nil {
		return err
	}
	format := "dot"
	if *out != "" {
		if format, err = graph.FormatOf(*out); err != nil {
			return fmt.Errorf("graph -o: %v", err)
		}
		if err := outfile.Check("graph -o", *out); err != nil {
			return err
		}
	}
	m, err := pickModel(fs.Arg(0), *name)
	if err != nil {
		return fmt.Errorf("graph: %v", err)
	}
	p, err := compiler.Compile(m, compiler.Options{Fuse: on, AMP: ampMode, RefBatch: *batch})
	if err != nil {
		return err
	}
	dot, err := graph.DOT(p, graph.Options{GPU: strings.ToLower(*gpu), GPUOptions: codegen.GPUOptions{Graphs: *graphs, TF32: *tf32}, NoFold: !*fold})
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = os.Stdout.Write(dot)
		return err
	}
	data, err := graph.Render(dot, format)
	if err != nil {
		return err
	}
	if err := outfile.Write(*out, data); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "ngen: %s -> %s\n", m.Name, *out)
	return nil
}

// pickModel is the model of file named name, or its only model.
func pickModel(file, name string) (*ir.Model, error) {
	all, err := eval.Models(file)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range all {
		if m.Name == name || (name == "" && len(all) == 1) {
			return m, nil
		}
		names = append(names, m.Name)
	}
	if name == "" {
		return nil, fmt.Errorf("%s declares %d models (%s); pick one with -model", file, len(all), strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("%s declares no model named %q (have %s)", file, name, strings.Join(names, ", "))
}
