package cpu

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	_ "github.com/ngen-ml/ngen/generated/all"
	"github.com/ngen-ml/ngen/runtime"
)

var (
	gemmLibs  = flag.Bool("gemmlibs", false, "TestGemmLibraries: time oneDNN's and OpenBLAS's sgemm on every f32 GEMM shape of the generated packages' training steps")
	gemmSteps = flag.String("gemmsteps", "", "TestGemmChoiceSteps: comma-separated packages whose training steps to time with the per-shape choice and with oneDNN alone (all: every package the choice changes)")
)

// gemmBatch is the batch a package's shapes are taken at: its benchmark's
// (bench/), else cmd/train's default.
func gemmBatch(pkg string) int {
	switch strings.TrimSuffix(pkg, "_unfused") {
	case "mlpbench":
		return 128
	case "lstmbench":
		return 32
	case "gpt", "transformer":
		return 16
	}
	return 64
}

// libShape is one library call's shape as the device makes it at one
// thread: a plan GEMM step after collapseBatch and skinnySum's
// transposition, per batch entry.
type libShape struct {
	TransA, TransB runtime.Transpose
	M, N, K        int
	LDA, LDB, LDC  int
	Beta           float64
}

func (s libShape) String() string {
	t := func(b runtime.Transpose) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s %dx%dx%d beta %g", t(s.TransA), t(s.TransB), s.M, s.N, s.K, s.Beta)
}

// stepShapes returns, for every f32 GEMM step of g's training step at
// batch b, the library calls the device makes (one thread) and how many
// of each per step.
func stepShapes(t testing.TB, g *runtime.Generated, b int) map[libShape]int {
	for _, y := range g.Plan.Symbols {
		if y != "B" {
			t.Fatalf("%s: symbol %s besides B", g.Name, y)
		}
	}
	out := map[libShape]int{}
	ptrs := make([]runtime.Ptr, len(g.Plan.Buffers))
	for i := range ptrs {
		ptrs[i] = 64 // any non-null pointer: only the shapes are used
	}
	for _, f := range g.Plan.Funcs {
		if f.Name != "step" {
			continue
		}
		for _, st := range f.Steps {
			if st.Kind != runtime.GemmStep || g.Plan.Buffers[st.Gemm.C].DType != runtime.F32 {
				continue
			}
			a := st.Gemm.Args(map[string]int{"B": b}, runtime.F32, ptrs)
			if err := normalizeGemm(&a); err != nil {
				t.Fatalf("%s %s: %v", g.Name, st.Label, err)
			}
			if a.M == 0 || a.N == 0 {
				continue
			}
			collapseBatch(&a)
			if skinnySum(a) {
				a = transposedSum(a, 64)
			}
			out[libShape{a.TransA, a.TransB, a.M, a.N, a.K, a.LDA, a.LDB, a.LDC, a.Beta}] += a.Batch
		}
	}
	return out
}

// TestGemmLibraries times oneDNN's sgemm against OpenBLAS's on every f32
// GEMM shape the generated packages' training steps hand the libraries
// (one thread), alternating the two several times per shape, and prints
// each shape's times and each package's GEMM time per step with either
// library and with the faster per shape. A measurement, not a test:
//
//	go test ./runtime/cpu -run TestGemmLibraries -v -args -gemmlibs
func TestGemmLibraries(t *testing.T) {
	if !*gemmLibs {
		t.Skip("measurement: go test ./runtime/cpu -run TestGemmLibraries -v -args -gemmlibs")
	}
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	type use struct {
		pkg   string
		calls int
	}
	shapes := map[libShape][]use{}
	var pkgs []string
	for _, g := range runtime.RegisteredAll() {
		if !strings.HasPrefix(g.Path, "github.com/ngen-ml/ngen/generated/") {
			continue
		}
		pkgs = append(pkgs, g.Name)
		for s, n := range stepShapes(t, g, gemmBatch(g.Name)) {
			shapes[s] = append(shapes[s], use{g.Name, n})
		}
	}
	// The host forms' own GEMMs (compiler/ops recur_fast.go,
	// attention_fast.go) call oneDNN through the emulation header, not
	// Device.Gemm; their shapes are timed too, for the record.
	for _, k := range []struct {
		pkg   string
		s     libShape
		calls int
	}{
		// lstmbench (B 32, H 256, T 64, 2 layers): gates = h·W_hhᵀ and
		// dh = dgates·W_hh per time step, one chunk of 32 sequences.
		{"lstmbench in-kernel", libShape{false, true, 32, 1024, 256, 64 * 512, 256, 1024, 0}, 128},
		{"lstmbench in-kernel", libShape{false, false, 32, 256, 1024, 65 * 1024, 256, 256, 0}, 128},
		// charlm (B 64, H 128): the same, one chunk of 64.
		{"charlm in-kernel", libShape{false, true, 64, 512, 128, 64 * 256, 128, 512, 0}, 128},
		{"charlm in-kernel", libShape{false, false, 64, 128, 512, 65 * 512, 128, 128, 0}, 128},
		// gpt (B 16, 4 heads of 64, T 128, 4 layers): per (batch, head)
		// Q·Kᵀ and P·V forward; Q·Kᵀ, dO·Vᵀ, dS·K, dSᵀ·Q, Pᵀ·dO backward.
		{"gpt in-kernel", libShape{false, true, 128, 128, 64, 768, 768, 128, 0}, 3 * 256},
		{"gpt in-kernel", libShape{false, false, 128, 64, 128, 128, 768, 768, 0}, 2 * 256},
		{"gpt in-kernel", libShape{true, false, 128, 64, 128, 128, 768, 768, 0}, 2 * 256},
	} {
		shapes[k.s] = append(shapes[k.s], use{k.pkg, k.calls})
	}
	rounds := 7
	if s := os.Getenv("NGEN_GEMMLIBS_ROUNDS"); s != "" {
		fmt.Sscan(s, &rounds)
	}
	// The calls run on this thread (oneDNN's team and OpenBLAS's pool
	// are one thread), whose CPU time is what is measured: on a shared
	// machine, wall time counts the other processes' turns.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	rng := rand.New(rand.NewPCG(1, 2))
	type timing struct{ dnn, blas time.Duration } // per call, min over rounds
	times := map[libShape]timing{}
	var order []libShape
	for s := range shapes {
		order = append(order, s)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].String() < order[j].String() })
	for _, s := range order {
		rowsA, rowsB := s.M, s.K
		if s.TransA {
			rowsA = s.K
		}
		if s.TransB {
			rowsB = s.N
		}
		fill := func(n int) runtime.Ptr {
			v := make([]float32, n)
			for i := range v {
				v[i] = rng.Float32() - 0.5
			}
			return upload(t, d, v)
		}
		g := runtime.GemmArgs{DType: runtime.F32, TransA: s.TransA, TransB: s.TransB, M: s.M, N: s.N, K: s.K,
			Alpha: 1, Beta: s.Beta, A: fill(rowsA * s.LDA), LDA: s.LDA, B: fill(rowsB * s.LDB), LDB: s.LDB,
			C: fill(s.M * s.LDC), LDC: s.LDC, Batch: 1}
		// reps calls make one timing of about 2 ms.
		flops := 2 * float64(s.M) * float64(s.N) * float64(s.K)
		reps := max(1, int(2e-3*20e9/max(flops, 1)))
		run := func(lib sgemmLib) time.Duration {
			t0 := threadTime(t)
			for range reps {
				if err := sgemmOnce(lib, g); err != nil {
					t.Fatal(err)
				}
			}
			return (threadTime(t) - t0) / time.Duration(reps)
		}
		run(oneDNN) // warm both: first calls pack and JIT
		run(openBLAS)
		best := timing{time.Hour, time.Hour}
		for r := range rounds {
			first, second := oneDNN, openBLAS
			if r%2 == 1 {
				first, second = openBLAS, oneDNN
			}
			for _, lib := range []sgemmLib{first, second} {
				dt := run(lib)
				if lib == oneDNN {
					best.dnn = min(best.dnn, dt)
				} else {
					best.blas = min(best.blas, dt)
				}
			}
		}
		times[s] = best
		for _, p := range []runtime.Ptr{g.A, g.B, g.C} {
			d.Free(p)
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	fmt.Printf("f32 GEMM shapes of the generated packages' training steps, per call (thread CPU time), min of %d alternated rounds, 1 thread\n", rounds)
	fmt.Printf("OPENBLAS_CORETYPE=%q\n", os.Getenv("OPENBLAS_CORETYPE"))
	// chosen is what sgemmLibrary picks for s on this host.
	chosen := func(s libShape) sgemmLib {
		return sgemmLibrary(runtime.GemmArgs{DType: runtime.F32, TransA: s.TransA, TransB: s.TransB, M: s.M, N: s.N, K: s.K})
	}
	fmt.Printf("OpenBLAS %s; the per-shape rule applies on this host: %v\n", blasCore(), avx2Libraries())
	fmt.Printf("%-32s %10s %10s %8s %-8s  %s\n", "shape (op(A) op(B) MxNxK)", "oneDNN µs", "OpenBLAS µs", "BLAS/DNN", "chosen", "calls per step")
	for _, s := range order {
		tm := times[s]
		var where []string
		for _, u := range shapes[s] {
			where = append(where, fmt.Sprintf("%s %d", u.pkg, u.calls))
		}
		sort.Strings(where)
		fmt.Printf("%-32s %10.1f %10.1f %8.2f %-8s  %s\n", s, us(tm.dnn), us(tm.blas), float64(tm.blas)/float64(tm.dnn), chosen(s), strings.Join(where, ", "))
	}
	fmt.Printf("\nGEMM time per training step (sum of calls × per-call min), ms:\n%-24s %8s %9s %9s %9s\n", "package (batch)", "oneDNN", "OpenBLAS", "faster", "chosen")
	for _, p := range pkgs {
		var dnn, blas, best, rule time.Duration
		for s, uses := range shapes {
			for _, u := range uses {
				if u.pkg == p {
					tm := times[s]
					dnn += time.Duration(u.calls) * tm.dnn
					blas += time.Duration(u.calls) * tm.blas
					best += time.Duration(u.calls) * min(tm.dnn, tm.blas)
					if chosen(s) == openBLAS {
						rule += time.Duration(u.calls) * tm.blas
					} else {
						rule += time.Duration(u.calls) * tm.dnn
					}
				}
			}
		}
		fmt.Printf("%-24s %8.2f %9.2f %9.2f %9.2f\n", fmt.Sprintf("%s (%d)", p, gemmBatch(p)), us(dnn)/1e3, us(blas)/1e3, us(best)/1e3, us(rule)/1e3)
	}
}

// threadTime is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadTime(t testing.TB) time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		t.Fatalf("clock_gettime: %v", e)
	}
	return time.Duration(ts.Nano())
}

// processTime is the process's CPU time, every thread's (getrusage).
func processTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestGemmChoiceSteps times training steps of generated packages, one
// thread, with the per-shape library choice (sgemmLibrary) and with
// oneDNN alone, alternating the two in rounds within one process: the
// before and after of the choice on the same machine state. A
// measurement, not a test:
//
//	go test ./runtime/cpu -run TestGemmChoiceSteps -v -args -gemmsteps all
func TestGemmChoiceSteps(t *testing.T) {
	if *gemmSteps == "" {
		t.Skip("measurement: go test ./runtime/cpu -run TestGemmChoiceSteps -v -args -gemmsteps all|pkg,pkg")
	}
	if !avx2Libraries() {
		t.Skipf("the per-shape choice does not apply on this host (oneDNN's ISA or OpenBLAS's %s kernels): nothing to compare", blasCore())
	}
	defer byShape.Store(true)
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want := map[string]bool{}
	for _, p := range strings.Split(*gemmSteps, ",") {
		want[p] = true
	}
	rounds, steps := 5, 5
	if s := os.Getenv("NGEN_GEMMSTEPS_ROUNDS"); s != "" {
		fmt.Sscan(s, &rounds, &steps)
	}
	fmt.Printf("training step, 1 thread, OpenBLAS %s, median over %d rounds of the median of %d steps (wall; process CPU time)\n", blasCore(), rounds, steps)
	fmt.Printf("%-24s %22s %22s %7s\n", "package (batch)", "oneDNN alone ms", "per-shape choice ms", "after/before")
	for _, g := range runtime.RegisteredAll() {
		if !strings.HasPrefix(g.Path, "github.com/ngen-ml/ngen/generated/") {
			continue
		}
		b := gemmBatch(g.Name)
		changed := 0
		for s, n := range stepShapes(t, g, b) {
			if openBLASShape(runtime.GemmArgs{TransA: s.TransA, TransB: s.TransB, M: s.M, N: s.N, K: s.K}) {
				changed += n
			}
		}
		if !want[g.Name] && !(want["all"] && changed > 0) {
			continue
		}
		in, err := g.SampleInputs("step", b, 1)
		if err != nil {
			t.Fatal(err)
		}
		m, err := g.New(d, runtime.SessionOptions{MaxBatch: b, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		step := func() {
			if _, err := m.Step(in); err != nil {
				t.Fatal(err)
			}
		}
		step()
		var wall, cpu [2][]time.Duration // [0]: oneDNN alone, [1]: the choice
		for r := range rounds {
			for _, on := range []bool{r%2 == 1, r%2 == 0} {
				byShape.Store(on)
				step()
				var ws, cs []time.Duration
				for range steps {
					w0, c0 := time.Now(), processTime(t)
					step()
					ws, cs = append(ws, time.Since(w0)), append(cs, processTime(t)-c0)
				}
				i := map[bool]int{false: 0, true: 1}[on]
				wall[i], cpu[i] = append(wall[i], medianDur(ws)), append(cpu[i], medianDur(cs))
			}
		}
		m.Close()
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
		fmt.Printf("%-24s %10.2f; %9.2f %10.2f; %9.2f %7.2f  (%d calls per step change library)\n", fmt.Sprintf("%s (%d)", g.Name, b),
			ms(medianDur(wall[0])), ms(medianDur(cpu[0])), ms(medianDur(wall[1])), ms(medianDur(cpu[1])),
			float64(medianDur(cpu[1]))/float64(medianDur(cpu[0])), changed)
	}
}

func medianDur(ts []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
