package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/dist"
)

// TestDistScaling compares data-parallel training on this machine with one
// process: 2 ranks × 1 thread (each a batch of the case's size, the global
// batch twice that) against 1 rank × 1 thread, in samples per second, with
// the gradient all-reduce's time per step and its share of the step. The
// ranks are this test binary started under mpirun (TestMain runs
// distWorker instead of the tests).
//
//	go test ./bench -run TestDistScaling -v -args -bench
func TestDistScaling(t *testing.T) {
	if !*run {
		t.Skip("benchmark: go test ./bench -run TestDistScaling -v -args -bench")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatalf("mpirun not on PATH (scripts/setup.sh installs openmpi-bin): %v", err)
	}
	host, _ := os.Hostname()
	t.Logf("machine %s: %s; %d timed steps (median)", host, machine(), *steps)
	for _, c := range cases {
		if c.name != "mlpbench" && c.name != "convnet" || (*only != "" && *only != c.name) {
			continue
		}
		one := distTime(t, c, nil)
		out, err := mpirunBench(c.name)
		if err != nil {
			t.Fatalf("%s: mpirun: %v\n%s", c.name, err, out)
		}
		var two distResult
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "{") {
				if err := json.Unmarshal([]byte(line), &two); err != nil {
					t.Fatal(err)
				}
			}
		}
		if two.Step == 0 {
			t.Fatalf("%s: no result from rank 0:\n%s", c.name, out)
		}
		t.Logf("%-9s 1 rank × 1 thread: %7.1f ms/step, %6.0f samples/s (batch %d)", c.name, ms(one.Step), float64(c.batch)/one.Step.Seconds(), c.batch)
		t.Logf("%-9s 2 ranks × 1 thread: %7.1f ms/step, %6.0f samples/s (batch %d per rank), all-reduce %.1f ms/step (%.0f%% of the step): %.2fx",
			c.name, ms(two.Step), float64(2*c.batch)/two.Step.Seconds(), c.batch, ms(two.Reduce), 100*two.Reduce.Seconds()/two.Step.Seconds(),
			(float64(2*c.batch)/two.Step.Seconds())/(float64(c.batch)/one.Step.Seconds()))
	}
}

type distResult struct {
	Step   time.Duration // median step
	Reduce time.Duration // mean all-reduce per step
}

// distTime times steps of case c on one thread, as a rank of comm when
// comm is not nil.
func distTime(t *testing.T, c benchCase, comm *dist.Comm) distResult {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := c.fused(dev, c.batch)
	if err != nil {
		t.Fatal(err)
	}
	s := m.(interface{ Session() *runtime.Session }).Session()
	if comm != nil {
		if err := s.SetCommunicator(comm); err != nil {
			t.Fatal(err)
		}
	}
	x, y := input(t, c)
	r0 := s.ReduceTime()
	step := timeSteps(t, m, x, y)
	return distResult{Step: step, Reduce: (s.ReduceTime() - r0) / time.Duration(5+*steps)}
}

func mpirunBench(name string) (string, error) {
	cmd := exec.Command("mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2",
		"-x", "NGEN_BENCH_DIST", os.Args[0], "-test.run=^TestDistWorker$", "-test.v", "-steps", fmt.Sprint(*steps))
	cmd.Env = append(os.Environ(), "NGEN_BENCH_DIST="+name)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestDistWorker is one rank of TestDistScaling (skipped unless started by
// it): rank 0 prints its result as a JSON line.
func TestDistWorker(t *testing.T) {
	name := os.Getenv("NGEN_BENCH_DIST")
	if name == "" {
		t.Skip("a rank of TestDistScaling")
	}
	comm, err := dist.Init(dist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.name == name {
			r := distTime(t, c, comm)
			if comm.Rank() == 0 {
				b, _ := json.Marshal(r)
				fmt.Printf("\n%s\n", b)
			}
		}
	}
	if err := comm.Finalize(); err != nil {
		t.Fatal(err)
	}
}
