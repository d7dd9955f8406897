// Command ngen compiles models declared with package dsl into fused CUDA C
// kernels and a typed Go package.
//
//	ngen build [-o DIR] [-fuse=all|none] [-amp bf16|fp16|off] [-model NAME] [-suffix S] [-dump=PASS|all] [-batch N] [-memory-budget BYTES] model.go
//	ngen report [-fuse=all|none] [-amp bf16|fp16|off] [-json] [-batch N] [-model NAME] [-memory-budget BYTES] [-gpu h100|h200|a100 [-graphs=false] [-tf32]] model.go
//	ngen graph [-fuse=all|none] [-amp bf16|fp16|off] [-model NAME] [-o FILE.svg|.png|.dot] [-batch N] [-gpu h100|h200|a100] [-fold=false] model.go
//	ngen plot [-o FILE.png|.svg] [-smooth N] run.jsonl [other.jsonl ...]
//	ngen devices
//
// It parses flags and calls the library; the work is in dsl/eval,
// compiler, codegen, codegen/graph, runlog and runtime/cuda/probe.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/codegen/nvcc"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/dsl/eval"
	"github.com/ngen-ml/ngen/runtime/cuda/probe"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	case "graph":
		err = graphCmd(os.Args[2:])
	case "plot":
		err = plotCmd(os.Args[2:])
	case "devices":
		err = devices()
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ngen:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ngen build|report|graph|plot|devices [flags] [model.go | run.jsonl ...]  (ngen CMD -h for flags)")
	os.Exit(2)
}

func fuseFlag(fs *flag.FlagSet) *string {
	return fs.String("fuse", "all", "fusion: all, or none for one kernel per primitive op")
}

func parseFuse(s string) (bool, error) {
	switch s {
	case "all":
		return true, nil
	case "none":
		return false, nil
	}
	return false, fmt.Errorf("-fuse=%s: want all or none", s)
}

// attentionFormFlag is -attention-form (compiler.Options.TensorForm):
// whether 16-bit attention's GPU form runs its products on tensor cores.
func attentionFormFlag(fs *flag.FlagSet) *string {
	return fs.String("attention-form", "auto", "16-bit attention's GPU form: auto (its products on tensor cores where the head size is a multiple of 16) or cuda-cores")
}

// loopFormFlag is -loop-form (compiler.Options.StepForm): the GPU form of
// the recurrences, a time step a launch or the whole loop in one.
func loopFormFlag(fs *flag.FlagSet) *string {
	return fs.String("loop-form", "auto", "the recurrences' GPU form: stepped (a time step a launch), loop (the whole loop in one launch, a block per sequence), or auto (stepped where W_hh is at least 32 KiB)")
}

// ampFlag is -amp, which overrides the model's mixed-precision policy
// as -fuse=none overrides fusion (compiler.Options.AMP).
func ampFlag(fs *flag.FlagSet) *string {
	return fs.String("amp", "", "mixed precision: bf16 or fp16 (dsl.AMP with its default scaling: fp16 scales the loss, bf16 does not), or off; overrides the model's m.Precision (default: the model's)")
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	out := fs.String("o", "", "output directory (default: generated/ at the model's module root)")
	fuse := fuseFlag(fs)
	amp := ampFlag(fs)
	loopForm := loopFormFlag(fs)
	attnForm := attentionFormFlag(fs)
	name := fs.String("model", "", "build only the model of this name when the file declares several")
	suffix := fs.String("suffix", "", "suffix for the generated package names, e.g. _unfused")
	dump := fs.String("dump", "", "print the IR to stderr after this pass (or all): "+strings.Join(compiler.PassNames(), ", "))
	batch := fs.Int("batch", 128, "batch size for the planned peak memory")
	budget := fs.Int64("memory-budget", 0, "checkpoint forward segments until the planned peak at -batch fits in this many bytes")
	fs.Parse(args)
	if err := oneFile("build", fs); err != nil {
		return err
	}
	if *batch <= 0 {
		return fmt.Errorf("build: -batch %d: want a positive batch size", *batch)
	}
	on, err := parseFuse(*fuse)
	if err != nil {
		return err
	}
	ampMode, err := compiler.ParseAMP(*amp)
	if err != nil {
		return err
	}
	form, err := ops.ParseStepForm(*loopForm)
	if err != nil {
		return fmt.Errorf("build: -loop-form: %v", err)
	}
	tform, err := ops.ParseTensorForm(*attnForm)
	if err != nil {
		return fmt.Errorf("build: -attention-form: %v", err)
	}
	file := fs.Arg(0)
	models, err := eval.Models(file)
	if err != nil {
		return err
	}
	if models, err = namedModels(models, file, *name); err != nil {
		return fmt.Errorf("build: %v", err)
	}
	dir := *out
	if dir == "" {
		if dir, err = moduleRoot(file); err != nil {
			return err
		}
		dir = filepath.Join(dir, "generated")
	}
	pkgs, err := packageNames(models, *suffix)
	if err != nil {
		return err
	}
	root, err := moduleImportPath(dir)
	if err != nil {
		return err
	}
	// A plan.json the index cannot read failed the build after it had
	// written the packages: read them all before writing anything.
	if _, err := os.Stat(dir); err == nil {
		if _, err := indexSets(dir, root); err != nil {
			return err
		}
	}
	// The emulation header, once for every package in dir (their host
	// subpackages include it from two levels up).
	for name, data := range codegen.SharedFiles() {
		if err := codegen.WriteFile(filepath.Join(dir, name), data); err != nil {
			return err
		}
	}
	for i, m := range models {
		p, err := compiler.Compile(m, compiler.Options{Fuse: on, AMP: ampMode, StepForm: form, TensorForm: tform, Dump: *dump, DumpTo: os.Stderr, RefBatch: *batch, MemoryBudget: *budget})
		if err != nil {
			return err
		}
		pkg := pkgs[i]
		opts := codegen.Options{Package: pkg, Source: m.Source, ImportPath: path.Join(root, pkg)}
		files, err := codegen.Generate(p, opts)
		if err != nil {
			return err
		}
		bins, note, err := nvcc.ForPackage(filepath.Join(dir, pkg), pkg, codegen.Header(m.Source), string(files[pkg+".cu"]))
		if err != nil {
			return err
		}
		if note != "" {
			fmt.Fprintf(os.Stderr, "ngen: %s: %s\n", pkg, note)
		}
		if bins != nil {
			opts.Fatbin, opts.FatbinStamp = bins.Fatbin, bins.Stamp
			if files, err = codegen.Generate(p, opts); err != nil {
				return err
			}
		}
		if err := codegen.WriteDir(filepath.Join(dir, pkg), files); err != nil {
			return err
		}
		var f32 string
		if p.F32 != nil {
			f32 = fmt.Sprintf("; %s, the f32 plan's %d", p.Model.Precision.Type, p.F32.PeakBytes)
		}
		fmt.Fprintf(os.Stderr, "ngen: %s -> %s (%d kernels, planned peak %d bytes at batch %d%s)\n", m.Name, filepath.Join(dir, pkg), countKernels(files), p.PeakBytes, *batch, f32)
	}
	return writeIndex(dir, root)
}

// namedModels is the model of that name among the file's, or all of them
// when name is empty (build -model).
func namedModels(all []*ir.Model, file, name string) ([]*ir.Model, error) {
	if name == "" {
		return all, nil
	}
	var names []string
	for _, m := range all {
		if m.Name == name {
			return []*ir.Model{m}, nil
		}
		names = append(names, m.Name)
	}
	return nil, fmt.Errorf("%s declares no model named %q (have %s)", file, name, strings.Join(names, ", "))
}

// oneFile checks that fs's arguments are one model file. The flag package
// stops at the first argument that is not a flag, so a flag written after
// the file ("build model.go -batch 3") was reported as "want one model
// file", although there was one.
func oneFile(cmd string, fs *flag.FlagSet) error {
	switch {
	case fs.NArg() == 0:
		return fmt.Errorf("%s: want one model file", cmd)
	case fs.NArg() > 1 && strings.HasPrefix(fs.Arg(1), "-"):
		return fmt.Errorf("%s: %s after the model file %s: flags go before the file", cmd, fs.Arg(1), fs.Arg(0))
	case fs.NArg() > 1:
		return fmt.Errorf("%s: want one model file, got %d: %s", cmd, fs.NArg(), strings.Join(fs.Args(), " "))
	}
	return nil
}

// writeIndex rewrites dir's index packages (codegen.IndexPackages), which
// import the generated packages in dir: the ones this build wrote and the
// ones earlier builds did.
func writeIndex(dir, root string) error {
	sets, err := indexSets(dir, root)
	if err != nil {
		return err
	}
	for name := range codegen.IndexPackages {
		if err := codegen.WriteDir(filepath.Join(dir, name), map[string][]byte{name + ".go": codegen.Index(name, sets[name])}); err != nil {
			return err
		}
	}
	return nil
}

// indexSets are the import paths each index package lists: the generated
// packages in dir, found by their plan.json.
func indexSets(dir, root string) (map[string][]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	sets := map[string][]string{}
	for _, e := range entries {
		if _, index := codegen.IndexPackages[e.Name()]; !e.IsDir() || index {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), codegen.PlanFile))
		if err != nil {
			continue // not a generated package
		}
		var plan struct{ Fused bool }
		if err := json.Unmarshal(data, &plan); err != nil {
			return nil, fmt.Errorf("build: %s: %v", filepath.Join(dir, e.Name(), codegen.PlanFile), err)
		}
		p := path.Join(root, e.Name())
		sets["all"] = append(sets["all"], p)
		if plan.Fused {
			sets["fused"] = append(sets["fused"], p)
		}
	}
	return sets, nil
}

// packageNames are the models' package names; two models of one file that
// would share a package (a-b and a_b) are an error rather than one silently
// overwriting the other.
func packageNames(models []*ir.Model, suffix string) ([]string, error) {
	var pkgs []string
	seen := map[string]*ir.Model{}
	for _, m := range models {
		pkg := compiler.PackageName(m.Name + suffix)
		if _, index := codegen.IndexPackages[pkg]; index {
			return nil, fmt.Errorf("model %q (%s) would become package %q, the name of an index of generated packages: rename it or pass -suffix", m.Name, m.Pos, pkg)
		}
		if o := seen[pkg]; o != nil {
			return nil, fmt.Errorf("model %q (%s) and model %q (%s) both become package %q: rename one", o.Name, o.Pos, m.Name, m.Pos, pkg)
		}
		seen[pkg] = m
		pkgs = append(pkgs, pkg)
	}
	return pkgs, nil
}

// moduleImportPath is dir's import path: a generated package imports its
// host subpackage by path, so the output directory must lie inside a Go
// module (the one whose go.mod is nearest above it).
func moduleImportPath(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			mod := modfile.ModulePath(data)
			if mod == "" {
				return "", fmt.Errorf("build: %s has no module line", filepath.Join(d, "go.mod"))
			}
			rel, err := filepath.Rel(d, abs)
			if err != nil {
				return "", err
			}
			return path.Join(mod, filepath.ToSlash(rel)), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("build: output directory %s is not inside a Go module: a generated package imports its host subpackage by import path, so -o must name a directory under a go.mod", dir)
		}
	}
}

func countKernels(files map[string][]byte) int {
	n := 0
	for name, b := range files {
		if strings.HasSuffix(name, ".cu") {
			n += strings.Count(string(b), "__global__ void")
		}
	}
	return n
}

// moduleRoot is the root of the module holding file.
func moduleRoot(file string) (string, error) {
	cmd := exec.Command("go", "env", "GOMOD")
	cmd.Dir = filepath.Dir(file)
	out, err := cmd.Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("%s is not inside a Go module: pass -o", file)
	}
	return filepath.Dir(mod), nil
}

func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	fuse := fuseFlag(fs)
	amp := ampFlag(fs)
	loopForm := loopFormFlag(fs)
	attnForm := attentionFormFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	batch := fs.Int("batch", 128, "batch size")
	name := fs.String("model", "", "model name when the file declares several")
	budget := fs.Int64("memory-budget", 0, "as ngen build -memory-budget")
	gpu := fs.String("gpu", "", "model the step's time on this GPU: h100, h200 or a100")
	graphs := fs.Bool("graphs", true, "with -gpu: the step is one CUDA graph (the GPU backend's default)")
	pipelined := fs.Bool("pipelined", false, "with -gpu: the session reads each step's status a step late (runtime.Session.SetPipelined, cmd/train's default on cuda), so the host's part of a step overlaps the device's part of the step before")
	tf32 := fs.Bool("tf32", false, "with -gpu: f32 GEMMs on TF32 tensor cores (cuda.Options.TF32)")
	fs.Parse(args)
	if err := oneFile("report", fs); err != nil {
		return err
	}
	if *gpu == "" {
		// -graphs and -tf32 shape -gpu's model of the step; without it
		// they were read by nothing.
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "graphs" || f.Name == "tf32" || f.Name == "pipelined" {
				given = append(given, "-"+f.Name)
			}
		})
		if len(given) > 0 {
			return fmt.Errorf("report: %s model the step on a GPU: give -gpu h100, h200 or a100 too", strings.Join(given, " and "))
		}
	}
	if *batch <= 0 {
		return fmt.Errorf("report: -batch %d: want a positive batch size", *batch)
	}
	on, err := parseFuse(*fuse)
	if err != nil {
		return err
	}
	ampMode, err := compiler.ParseAMP(*amp)
	if err != nil {
		return err
	}
	form, err := ops.ParseStepForm(*loopForm)
	if err != nil {
		return fmt.Errorf("report: -loop-form: %v", err)
	}
	tform, err := ops.ParseTensorForm(*attnForm)
	if err != nil {
		return fmt.Errorf("report: -attention-form: %v", err)
	}
	all, err := eval.Models(fs.Arg(0))
	if err != nil {
		return err
	}
	var models []*ir.Model
	for _, m := range all {
		if *name == "" || m.Name == *name {
			models = append(models, m)
		}
	}
	switch {
	case len(models) == 0:
		return fmt.Errorf("report: %s declares no model named %q", fs.Arg(0), *name)
	case *asJSON && len(models) > 1:
		return fmt.Errorf("report -json: %s declares %d models; pick one with -model", fs.Arg(0), len(models))
	}
	for i, m := range models {
		p, err := compiler.Compile(m, compiler.Options{Fuse: on, AMP: ampMode, StepForm: form, TensorForm: tform, RefBatch: *batch, MemoryBudget: *budget})
		if err != nil {
			return err
		}
		r, err := codegen.MakeReport(p)
		if err != nil {
			return err
		}
		if *gpu != "" {
			if err := r.ModelGPU(*gpu, codegen.GPUOptions{Graphs: *graphs, TF32: *tf32, Pipelined: *pipelined}); err != nil {
				return fmt.Errorf("report -gpu: %v", err)
			}
		}
		if *asJSON {
			err = r.WriteJSON(os.Stdout)
		} else {
			if i > 0 {
				fmt.Println()
			}
			err = r.WriteText(os.Stdout)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func devices() error {
	switch v, err := nvcc.Version(); {
	case err == nil:
		fmt.Println("nvcc:", v)
	case errors.Is(err, exec.ErrNotFound):
		fmt.Println("nvcc: not on PATH (the GPU backend compiles kernels with NVRTC at start-up)")
	default:
		fmt.Printf("nvcc: %v (the GPU backend compiles kernels with NVRTC at start-up)\n", err)
	}
	ds, err := probe.Devices()
	if errors.Is(err, probe.ErrNoDevice) {
		fmt.Println(err)
		return nil
	}
	if err != nil {
		return err
	}
	for _, d := range ds {
		fmt.Println(d)
	}
	return nil
}
