package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// TestRecipeFlagsRefused: each flag the run cannot honour is an error
// that says why, before any work.
func TestRecipeFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		r    recipe
		want string
	}{
		{recipe{lr: -1, set: map[string]bool{"lr": true}}, "-lr -1"},
		{recipe{lr: 2e6, set: map[string]bool{"lr": true}}, "-lr 2e+06"},
		{recipe{schedule: "poly"}, `-schedule "poly"`},
		{recipe{warmup: 10, set: map[string]bool{"warmup": true}}, "give -schedule"},
		{recipe{schedule: "step", warmup: 10, set: map[string]bool{"warmup": true}}, "step has no warm-up"},
		{recipe{schedule: "cosine", warmup: -1, set: map[string]bool{"warmup": true}}, "-warmup -1"},
		{recipe{clip: -1, set: map[string]bool{"clip": true}}, "-clip -1: want a max norm > 0 (+Inf or 0: no clipping)"},
		{recipe{clip: math.NaN(), set: map[string]bool{"clip": true}}, "-clip NaN"},
		{recipe{weightDecay: -0.1, set: map[string]bool{"weight-decay": true}}, "-weight-decay -0.1: want a finite decay ≥ 0"},
		{recipe{weightDecay: math.Inf(1), set: map[string]bool{"weight-decay": true}}, "-weight-decay +Inf"},
		{recipe{schedule: "cosine", minLR: -1e-5, set: map[string]bool{"min-lr": true}}, "-min-lr -1e-05: want a finite rate ≥ 0"},
		{recipe{schedule: "cosine", minLR: math.NaN(), set: map[string]bool{"min-lr": true}}, "-min-lr NaN"},
		{recipe{schedule: "step", minLR: 1e-5, set: map[string]bool{"min-lr": true}}, "only -schedule cosine"},
		{recipe{minLR: 1e-5, set: map[string]bool{"min-lr": true}}, "only -schedule cosine"},
	} {
		if c.r.set == nil {
			c.r.set = map[string]bool{}
		}
		if err := c.r.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.r, err, c.want)
		}
	}
	r := recipe{schedule: "cosine", warmup: 500, set: map[string]bool{"warmup": true}}
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.plan(1e-3, 400); err == nil || !strings.Contains(err.Error(), "warm-up 500, total 400") {
		t.Errorf("a warm-up longer than the run: %v", err)
	}
	// A floor above the peak is refused when the rate is known.
	r = recipe{schedule: "cosine", minLR: 2e-3, set: map[string]bool{"min-lr": true}}
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.plan(1e-3, 400); err == nil || !strings.Contains(err.Error(), "min 0.002: want in [0, lr 0.001]") {
		t.Errorf("-min-lr above -lr: %v", err)
	}
}

// TestRecipePlans: what each -schedule means over a run.
func TestRecipePlans(t *testing.T) {
	for _, c := range []struct {
		r    recipe
		want *schedule.Schedule
	}{
		{recipe{schedule: "constant"}, nil},
		{recipe{schedule: "constant", warmup: 4}, &schedule.Schedule{Kind: "linear", StartFactor: 0.25, EndFactor: 1, Iters: 4}},
		{recipe{schedule: "cosine", warmup: 10}, &schedule.Schedule{Kind: "warmup_cosine", Iters: 10, Total: 900, StartFactor: 0.1}},
		{recipe{schedule: "cosine"}, &schedule.Schedule{Kind: "warmup_cosine", Total: 900, StartFactor: 1}},
		{recipe{schedule: "cosine", warmup: 100, minLR: 1e-4}, &schedule.Schedule{Kind: "warmup_cosine", Iters: 100, Total: 900, StartFactor: 0.01, Min: 1e-4}},
		{recipe{schedule: "step"}, &schedule.Schedule{Kind: "step", StepSize: 300, Gamma: 0.1}},
		{recipe{schedule: "onecycle", warmup: 90}, &schedule.Schedule{Kind: "onecycle", Total: 900, PctStart: 0.1, DivFactor: 25, FinalDivFactor: 1e4}},
	} {
		got, err := c.r.plan(1e-3, 900)
		if err != nil {
			t.Fatalf("%+v: %v", c.r, err)
		}
		if (got == nil) != (c.want == nil) || got != nil && got.String() != c.want.String() {
			t.Errorf("%+v: %v, want %v", c.r, got, c.want)
		}
	}
}

// TestRecipeApplies: -lr and -schedule reach a generated model's session
// as run-time data, and the peer gets the same rate and schedule.
func TestRecipeApplies(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := models["mlp"](dev, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := m.Session()
	var none *recipe
	if err := none.apply(s, 100); err != nil || s.LR() != s.Plan().Optimizer.LR {
		t.Fatalf("no flags changed the rate to %g (%v)", s.LR(), err)
	}
	r := &recipe{lr: 3e-3, schedule: "cosine", warmup: 10, set: map[string]bool{"lr": true, "warmup": true}}
	if err := r.apply(s, 100); err != nil {
		t.Fatal(err)
	}
	base, sc := s.Schedule()
	if base != 3e-3 || sc == nil || sc.Kind != "warmup_cosine" || sc.Total != 100 || math.Abs(s.LR()-3e-4) > 1e-18 {
		t.Fatalf("after -lr 3e-3 -schedule cosine -warmup 10: base %g, schedule %v, first rate %g", base, sc, s.LR())
	}
	args, err := r.peerArgs(s.Plan(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 4 || args[1] != "0.003" || !strings.Contains(args[3], `"kind":"warmup_cosine"`) {
		t.Fatalf("peer arguments %q", args)
	}
	// -weight-decay: run-time data of every model (the MLP's Adam was
	// declared without decay), and the peer's decay too.
	r = &recipe{weightDecay: 0.02, set: map[string]bool{"weight-decay": true}}
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
	if err := r.apply(s, 100); err != nil || s.WeightDecay() != 0.02 {
		t.Fatalf("-weight-decay 0.02: the session's decay is %g (%v)", s.WeightDecay(), err)
	}
	if base, sc := s.Schedule(); base != 3e-3 || sc == nil {
		t.Fatalf("-weight-decay alone changed the rate or schedule: %g %v", base, sc)
	}
	args, err = r.peerArgs(s.Plan(), 100)
	if err != nil || strings.Join(args, " ") != "--lr 0.001 --weight-decay 0.02" {
		t.Fatalf("peer arguments %q (%v)", args, err)
	}
	// -clip: run-time data of every registered model (compiled in, off),
	// and the peer's clip_grad_norm_; -clip 0 turns it off again.
	if !math.IsInf(s.ClipNorm(), 1) {
		t.Fatalf("the MLP starts with max norm %v, want +Inf (off)", s.ClipNorm())
	}
	r = &recipe{clip: 0.5, set: map[string]bool{"clip": true}}
	if err := r.apply(s, 100); err != nil || s.ClipNorm() != 0.5 {
		t.Fatalf("-clip 0.5: the session's max norm is %v (%v)", s.ClipNorm(), err)
	}
	args, err = r.peerArgs(s.Plan(), 100)
	if err != nil || strings.Join(args, " ") != "--lr 0.001 --clip 0.5" {
		t.Fatalf("peer arguments %q (%v)", args, err)
	}
	r.clip = 0
	if err := r.apply(s, 100); err != nil || !math.IsInf(s.ClipNorm(), 1) {
		t.Fatalf("-clip 0: the session's max norm is %v (%v)", s.ClipNorm(), err)
	}
	if args, err = r.peerArgs(s.Plan(), 100); err != nil || strings.Join(args, " ") != "--lr 0.001" {
		t.Fatalf("peer arguments %q (%v)", args, err)
	}
}

// TestEveryModelClips: -clip works for every model cmd/train trains: each
// registered package it uses compiles the grad-norm kernel in.
func TestEveryModelClips(t *testing.T) {
	var pkgs []string
	for name := range models {
		pkgs = append(pkgs, name)
	}
	for _, task := range seqTasks {
		pkgs = append(pkgs, task.pkg)
	}
	for _, p := range pkgs {
		g, err := runtime.Registered(p)
		if err != nil {
			t.Fatal(err)
		}
		if !g.Plan.Optimizer.GradNorm() {
			t.Errorf("%s has no grad-norm kernel: declare Clip: dsl.ClipGradNorm(math.Inf(1)) on its optimizer", p)
		}
	}
}

// TestDefaultRecipe: gpt and transformer default to a warm-up, a cosine
// decay and clipping at 1, each part replaced by its flag; other models
// have no default. The peer gets the same recipe.
func TestDefaultRecipe(t *testing.T) {
	for _, c := range []struct {
		model string
		set   map[string]bool
		r     recipe
		want  string // the peer's arguments over 1000 steps at the gpt's rate
	}{
		// The gpt's default: peak 6e-4, floor half the peak.
		{"gpt", nil, recipe{}, `--lr 0.0006 --clip 1 --schedule {"kind":"warmup_cosine","start_factor":0.02,"iters":50,"min":0.0003,"total":1000}`},
		{"transformer", nil, recipe{}, `--lr 0.0003 --clip 1 --schedule {"kind":"warmup_cosine","start_factor":0.02,"iters":50,"total":1000}`},
		{"gpt", map[string]bool{"warmup": true}, recipe{warmup: 10}, `--lr 0.0006 --clip 1 --schedule {"kind":"warmup_cosine","start_factor":0.1,"iters":10,"min":0.0003,"total":1000}`},
		// -schedule constant is the model's declared rate.
		{"gpt", map[string]bool{"schedule": true, "clip": true}, recipe{schedule: "constant", clip: 0}, `--lr 0.0003`},
		{"gpt", map[string]bool{"clip": true}, recipe{clip: 0.5}, `--lr 0.0006 --clip 0.5 --schedule {"kind":"warmup_cosine","start_factor":0.02,"iters":50,"min":0.0003,"total":1000}`},
		// -lr moves the floor with it; -min-lr replaces it.
		{"gpt", map[string]bool{"lr": true}, recipe{lr: 1e-3}, `--lr 0.001 --clip 1 --schedule {"kind":"warmup_cosine","start_factor":0.02,"iters":50,"min":0.0005,"total":1000}`},
		{"gpt", map[string]bool{"min-lr": true}, recipe{minLR: 3e-5}, `--lr 0.0006 --clip 1 --schedule {"kind":"warmup_cosine","start_factor":0.02,"iters":50,"min":0.00003,"total":1000}`},
		{"gpt", map[string]bool{"min-lr": true}, recipe{minLR: 0}, `--lr 0.0006 --clip 1 --schedule {"kind":"warmup_cosine","start_factor":0.02,"iters":50,"total":1000}`},
		// An explicit -schedule cosine is the model's rate, to -min-lr (0).
		{"gpt", map[string]bool{"schedule": true}, recipe{schedule: "cosine"}, `--lr 0.0003 --clip 1 --schedule {"kind":"warmup_cosine","start_factor":1,"total":1000}`},
		{"mlp", nil, recipe{}, `--lr 0.0003`},
		{"lstm", map[string]bool{"clip": true}, recipe{clip: 2}, `--lr 0.0003 --clip 2`},
	} {
		r := c.r
		r.set = c.set
		r.defaults(c.model)
		if err := r.check(); err != nil {
			t.Fatalf("%s %v: %v", c.model, c.set, err)
		}
		args, err := r.peerArgs(&runtime.Plan{Optimizer: runtime.Optimizer{Kind: "adam", LR: 3e-4}}, 1000)
		if err != nil || strings.Join(args, " ") != c.want {
			t.Errorf("%s %v: peer arguments %q (%v), want %s", c.model, c.set, args, err, c.want)
		}
	}
	if w := autoWarmup(10); w != 1 {
		t.Errorf("the default warm-up of a 10-step run is %d steps, want 1", w)
	}
	if w := autoWarmup(1e6); w != 100 {
		t.Errorf("the default warm-up of a long run is %d steps, want 100", w)
	}
}

// TestSeqPeerGetsRecipe: the gpt's default recipe reaches its PyTorch
// peer, started after ngen's run and with -torch-concurrent: a stand-in
// peer records its arguments and prints epochs of the right length (no
// PyTorch, no -bench).
func TestSeqPeerGetsRecipe(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "peer.py")
	if err := os.WriteFile(script, []byte(`import json, os, sys
open(os.environ["NGEN_PEER_ARGS"], "a").write(json.dumps(sys.argv[1:]) + "\n")
a = sys.argv
epochs, steps = int(a[a.index("--epochs") + 1]), int(a[a.index("--epoch-steps") + 1])
for e in range(1, epochs + 1):
    print(json.dumps({"epoch": e, "train_loss": 1.0, "samples_per_s": 1.0, "steps": steps, "val_bpc": 1.0}))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, "args.jsonl")
	t.Setenv("NGEN_PEER_ARGS", record)
	fortunes := tinyFortunes(t, 16)
	for _, concurrent := range []bool{false, true} {
		rc := &recipe{set: map[string]bool{}}
		rc.defaults("gpt")
		o := seqOptions{epochs: 2, epochSteps: 3, seed: 2, threads: 1, device: "cpu", dir: fortunes, quiet: true, recipe: rc}
		if err := trainSeq("gpt", seqTasks["gpt"], o, "4", true, concurrent, script, sampleOptions{}); err != nil {
			t.Fatalf("concurrent %v: %v", concurrent, err)
		}
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("the peer ran %d times, want 2", len(lines))
	}
	for i, l := range lines {
		var args []string
		if err := json.Unmarshal([]byte(l), &args); err != nil {
			t.Fatal(err)
		}
		got := " " + strings.Join(args, " ") + " "
		// 2 epochs of 3 steps: a warm-up of 1 step, cosine from 6e-4 to
		// half of it at step 6.
		for _, want := range []string{" --lr 0.0006 ", " --clip 1 ", ` --schedule {"kind":"warmup_cosine","start_factor":1,"iters":1,"min":0.0003,"total":6} `, " --epoch-steps 3 ", " --batch 4 "} {
			if !strings.Contains(got, want) {
				t.Errorf("run %d (concurrent %v): the peer's arguments %s lack %s", i, i == 1, got, want)
			}
		}
	}
}

// TestPeerGetsGroups: a model's parameter groups reach the PyTorch peer
// (issue 29 item 5): peerArgs passes them as runtime.GroupsJSON with the
// parameter names in order, and bench/torch_train.py's optimizer builds
// torch.optim param_groups from them, paired with its model's
// parameters() (the seed MLP's layers; torch_optim.py then does what the
// optimizer oracle tests check). Without groups no argument is added.
func TestPeerGetsGroups(t *testing.T) {
	p := &runtime.Plan{Buffers: []runtime.Buffer{{Name: "params", Role: "params"},
		{Name: "fc1.weight", Role: "param"}, {Name: "fc1.weight", Role: "grad"}, {Name: "fc1.bias", Role: "param"},
		{Name: "fc2.weight", Role: "param"}, {Name: "fc2.bias", Role: "param"}},
		Optimizer: runtime.Optimizer{Kind: "adam", LR: 1e-3, WeightDecay: 0.1, Groups: []runtime.ParamGroup{
			{Params: []string{"fc1.bias", "fc2.bias"}, LRScale: 0.5, OwnDecay: true, Beta1: 0.9, Beta2: 0.999}}}}
	args, err := (&recipe{}).peerArgs(p, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := `--lr 0.001 --weight-decay 0.1 --groups [{"params":["fc1.bias","fc2.bias"],"lr_scale":0.5,"weight_decay":0,"own_decay":true,"beta1":0.9,"beta2":0.999,"momentum":0}] --param-names fc1.weight,fc1.bias,fc2.weight,fc2.bias`
	if got := strings.Join(args, " "); got != want {
		t.Fatalf("peer arguments\n%s\nwant\n%s", got, want)
	}
	p.Optimizer.Groups = nil
	if args, err := (&recipe{}).peerArgs(p, 10); err != nil || slices.Contains(args, "--groups") {
		t.Fatalf("no groups: %q, %v", args, err)
	}
	if exec.Command("/usr/bin/python3", "-c", "import torch").Run() != nil {
		t.Skip("no PyTorch under /usr/bin/python3: the peer's side is not checked")
	}
	script := `import argparse, json, sys
sys.path.insert(0, "../../bench")
import torch_models, torch_train
a = argparse.Namespace(groups=sys.argv[1], param_names=sys.argv[2], weight_decay=0.1, model="mlp")
opt = torch_train.adam(torch_models.mlp([4, 3, 2]), a, 1e-3)
print(json.dumps([[list(p.shape) for p in g["params"]] + [g["lr"], g["weight_decay"]] for g in opt.param_groups]))
`
	value := func(flag string) string { return args[slices.Index(args, flag)+1] }
	out, err := exec.Command("/usr/bin/python3", "-c", script, value("--groups"), value("--param-names")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The biases at half the rate without decay, the weights (the default
	// group) at the rate with the model's decay.
	if got, want := strings.TrimSpace(string(out)), "[[[3], [2], 0.0005, 0], [[3, 4], [2, 3], 0.001, 0.1]]"; got != want {
		t.Fatalf("PyTorch's param_groups %s, want %s", got, want)
	}
}
