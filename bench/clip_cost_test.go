package bench

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/generated/gpt"
	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

var (
	clipCost       = flag.Bool("clipcost", false, "TestClipCost: time the gpt's and the MLP's CPU steps with gradient clipping off and at max norm 1")
	clipCostModels = flag.String("clipcost-models", "gpt,mlp", "TestClipCost: the models to time (gpt, mlp)")
)

// TestClipCost times what run-time gradient clipping costs a step on the
// CPU: the generated gpt (batch 16) and seed MLP (batch 64), fused, with
// the max norm at +Inf (off: the session does not launch the grad-norm
// kernel) and at 1 (the reduction over every gradient), in alternating
// rounds on one session, and prints the medians and the ratio. A plan
// without the kernel (a package generated before it) times as "off".
//
//	go test ./bench -run TestClipCost -v -args -clipcost -threads 1 -steps 10 [-clipcost-models mlp]
func TestClipCost(t *testing.T) {
	if !*clipCost {
		t.Skip("pass -clipcost")
	}
	dev, err := cpu.New(cpu.Options{Threads: *threads})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ids := tokenIDs()
	rng := rand.New(rand.NewPCG(1, 1))
	const gb, mb = 16, 64
	gx, gy := ids(gb*gptPeer.T), ids(gb*gptPeer.T)
	mx, my := make([]float32, mb*784), make([]int32, mb)
	for i := range mx {
		mx[i] = rng.Float32()
	}
	for i := range my {
		my[i] = int32(rng.IntN(10))
	}
	g, err := gpt.New(dev, gpt.Options{Batch: gb, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m, err := mlp.New(dev, mlp.Options{Batch: mb, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		name string
		s    *runtime.Session
		step func() (float32, error)
	}{
		{"gpt (batch 16)", g.Session(), func() (float32, error) { return g.Step(gx, gy) }},
		{"mlp (batch 64)", m.Session(), func() (float32, error) { return m.Step(mx, my) }},
	} {
		if !slices.Contains(strings.Split(*clipCostModels, ","), strings.Fields(c.name)[0]) {
			continue
		}
		has := c.s.Plan().Optimizer.GradNorm()
		var off, on []time.Duration
		for round := 0; round < *steps; round++ {
			for _, norm := range []float64{math.Inf(1), 1} {
				if !has && norm == 1 {
					continue
				}
				if has {
					if err := c.s.SetClipNorm(norm); err != nil {
						t.Fatal(err)
					}
				}
				t0 := time.Now()
				if _, err := c.step(); err != nil {
					t.Fatal(err)
				}
				if d := time.Since(t0); round > 0 { // the first round warms up
					if norm == 1 {
						on = append(on, d)
					} else {
						off = append(off, d)
					}
				}
			}
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		fmt.Printf("%s, %s, %d thread(s), median of %d steps each:\n", c.name, machine(), *threads, len(off))
		if !has {
			fmt.Printf("  no grad-norm kernel  %8.3f ms\n", ms(median(off)))
			continue
		}
		a, b := median(off), median(on)
		fmt.Printf("  clipping off         %8.3f ms\n  max norm 1           %8.3f ms  (%+.2f%%)\n", ms(a), ms(b), 100*(ms(b)/ms(a)-1))
		// Step times move by more than the kernel costs on a shared
		// machine: the profile times the grad-norm kernel itself.
		for _, norm := range []float64{math.Inf(1), 1} {
			if err := c.s.SetClipNorm(norm); err != nil {
				t.Fatal(err)
			}
			c.s.SetProfiling(true)
			for range 3 {
				if _, err := c.step(); err != nil {
					t.Fatal(err)
				}
			}
			var all, gn time.Duration
			for _, p := range c.s.Profile() {
				if p.Func != "step" {
					continue
				}
				all += p.Total
				if p.Name == "ngen_grad_norm_float" {
					gn += p.Total
				}
			}
			c.s.SetProfiling(false)
			fmt.Printf("  profiled, max norm %v: grad-norm kernel %.3f ms of a %.3f ms step (%.2f%%)\n", norm, ms(gn/3), ms(all/3), 100*float64(gn)/float64(all))
		}
	}
}
