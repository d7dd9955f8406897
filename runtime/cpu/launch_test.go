package cpu

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

func TestElementwiseSimpleAndSync(t *testing.T) {
	d, l := newTestDevice(t)
	const n = 10007 // not a multiple of the block
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i%11)-5, float32(i%3)-1
	}
	pa, pb := upload(t, d, a), upload(t, d, b)
	for _, k := range []int{kAddRelu, kAddReluSync} {
		py := upload(t, d, make([]float32, n+1)) // the extra element must stay 0
		launch(t, d, l, k, runtime.Dim3{X: (n + 255) / 256, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, 0,
			pa, pb, py, int32(n))
		y := download[float32](t, d, py, n+1)
		for i := range n {
			if want := max(a[i]+b[i], 0); y[i] != want {
				t.Fatalf("%s: y[%d] = %v, want %v", testKernels[k].fn, i, y[i], want)
			}
		}
		if y[n] != 0 {
			t.Fatalf("%s wrote past n", testKernels[k].fn)
		}
	}
}

func TestAxpy2DGridAndBlock(t *testing.T) {
	d, l := newTestDevice(t)
	const n = 5000
	x, y := make([]float64, n), make([]float64, n)
	for i := range x {
		x[i], y[i] = float64(i), 1
	}
	px, py := upload(t, d, x), upload(t, d, y)
	// 8×5 blocks of 16×8 threads: 5120 threads for 5000 elements.
	launch(t, d, l, kAxpyF64, runtime.Dim3{X: 8, Y: 5, Z: 1}, runtime.Dim3{X: 16, Y: 8, Z: 1}, 0,
		0.5, px, py, int64(n))
	got := download[float64](t, d, py, n)
	for i := range n {
		if want := 1 + 0.5*float64(i); got[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}

func TestSumRowsTree(t *testing.T) {
	d, l := newTestDevice(t)
	for _, tc := range []struct{ rows, cols, block int }{{37, 1001, 128}, {5, 3, 64}, {64, 4099, 1024}, {3, 100, 1}} {
		x := make([]float32, tc.rows*tc.cols)
		for i := range x {
			x[i] = float32(i%17) * 0.25 // exact in f32, so any summation order agrees
		}
		px, pout := upload(t, d, x), upload(t, d, make([]float32, tc.rows))
		launch(t, d, l, kSumRowsTree, runtime.Dim3{X: tc.rows, Y: 1, Z: 1}, runtime.Dim3{X: tc.block, Y: 1, Z: 1},
			4*tc.block, px, pout, int32(tc.cols))
		out := download[float32](t, d, pout, tc.rows)
		for r := range tc.rows {
			var want float32
			for _, v := range x[r*tc.cols : (r+1)*tc.cols] {
				want += v
			}
			if out[r] != want {
				t.Errorf("%+v: row %d sum = %v, want %v", tc, r, out[r], want)
			}
		}
	}
}

func TestSumWarpShuffle(t *testing.T) {
	d, l := newTestDevice(t)
	const n, blocks = 100003, 13
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i % 5)
	}
	px, pout := upload(t, d, x), upload(t, d, make([]float32, blocks))
	launch(t, d, l, kSumWarpShuffle, runtime.Dim3{X: blocks, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, 0,
		px, pout, int32(n))
	out := download[float32](t, d, pout, blocks)
	for b := range blocks {
		var want float64
		for i := b * 256; i < n; i += blocks * 256 {
			for j := i; j < min(i+256, n); j++ {
				want += float64(x[j])
			}
		}
		// Integer-valued partial sums below 2^24 are exact in f32.
		if float64(out[b]) != want {
			t.Errorf("block %d: sum = %v, want %v", b, out[b], want)
		}
	}
}

func TestShuffleProbe(t *testing.T) {
	d, l := newTestDevice(t)
	const threads = 80 // the third warp has 16 lanes
	pout, pd := upload(t, d, make([]int32, 4*threads)), upload(t, d, make([]float64, threads))
	launch(t, d, l, kShuffleProbe, runtime.Dim3{X: 2, Y: 1, Z: 1}, runtime.Dim3{X: threads, Y: 1, Z: 1}, 0, pout, pd)
	out := download[int32](t, d, pout, 4*threads)
	outd := download[float64](t, d, pd, threads)
	for tid := range threads {
		lane, base := tid%32, tid-tid%32
		live := min(32, threads-base) // lanes present in this warp
		o := out[4*tid : 4*tid+4]
		if want := int32(10 * (base + 3)); o[0] != want {
			t.Errorf("thread %d: __shfl_sync = %d, want %d", tid, o[0], want)
		}
		if want := int32(max(tid-1, base)); lane == 0 && o[1] != int32(tid) || lane > 0 && o[1] != want {
			t.Errorf("thread %d: __shfl_up_sync = %d", tid, o[1])
		}
		// Reading an absent lane is undefined on a GPU; only check present ones.
		if lane+1 < live && o[2] != int32(tid+1) {
			t.Errorf("thread %d: __shfl_down_sync = %d, want %d", tid, o[2], tid+1)
		}
		if lane^5 < live && o[3] != int32(base+lane^5) {
			t.Errorf("thread %d: __shfl_xor_sync = %d, want %d", tid, o[3], base+lane^5)
		}
		if lane+2 < live && outd[tid] != 0.5*float64(tid+2) {
			t.Errorf("thread %d: double __shfl_down_sync = %v, want %v", tid, outd[tid], 0.5*float64(tid+2))
		}
	}
}

// TestWarpReductions checks the emulation's one-barrier ngen_warp_sum and
// ngen_warp_max against the shuffle butterfly they stand for, bit for bit,
// in a block whose last warp is partial, over two blocks and two
// reductions in a row.
func TestWarpReductions(t *testing.T) {
	d, l := newTestDevice(t)
	const threads = 72 // the third warp has 8 lanes
	x := make([]float32, threads)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.7)) * float32(1+i%7)
	}
	x[40] = float32(math.NaN()) // the max rule (u > v) must treat NaN alike
	px, pout := upload(t, d, x), upload(t, d, make([]float32, 8*threads))
	launch(t, d, l, kWarpReduceProbe, runtime.Dim3{X: 2, Y: 1, Z: 1}, runtime.Dim3{X: threads, Y: 1, Z: 1}, 0, px, pout)
	out := download[float32](t, d, pout, 8*threads)
	for tid := range threads {
		for k := 0; k < 2; k++ {
			o := out[8*tid+4*k : 8*tid+4*k+4]
			if math.Float32bits(o[0]) != math.Float32bits(o[1]) {
				t.Errorf("thread %d, reduction %d: ngen_warp_sum %v, shuffles %v", tid, k, o[0], o[1])
			}
			if math.Float32bits(o[2]) != math.Float32bits(o[3]) {
				t.Errorf("thread %d, reduction %d: ngen_warp_max %v, shuffles %v", tid, k, o[2], o[3])
			}
		}
	}
	var want float32 // lane 0's sum of the first warp, in butterfly order
	lanes := append([]float32(nil), x[:32]...)
	for o := 16; o > 0; o >>= 1 {
		next := make([]float32, 32)
		for l := range lanes {
			next[l] = lanes[l] + lanes[l^o]
		}
		lanes = next
	}
	want = lanes[0]
	if out[0] != want {
		t.Errorf("first warp's sum %v, want %v", out[0], want)
	}
}

func TestEarlyExitLeavesBarriers(t *testing.T) {
	d, l := newTestDevice(t)
	const block, n = 128, 100
	pout := upload(t, d, make([]int32, 2*block))
	launch(t, d, l, kEarlyExitSync, runtime.Dim3{X: 1, Y: 1, Z: 1}, runtime.Dim3{X: block, Y: 1, Z: 1}, 0, pout, int32(n))
	out := download[int32](t, d, pout, 2*block)
	for tid := range n {
		if out[2*tid] != int32(n-1-tid) || out[2*tid+1] != (n+2)/3 {
			t.Fatalf("thread %d: got (%d, %d), want (%d, %d)", tid, out[2*tid], out[2*tid+1], n-1-tid, (n+2)/3)
		}
	}
}

func TestHistogramAtomics(t *testing.T) {
	d, l := newTestDevice(t)
	const n, nbins = 1 << 18, 7 // few bins: heavy contention across workers
	x := make([]int32, n)
	want := make([]uint32, nbins)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = int32(r.IntN(nbins))
		want[x[i]]++
	}
	px, pbins := upload(t, d, x), upload(t, d, make([]uint32, nbins))
	for range 3 {
		if err := d.Memset(pbins, 0, 4*nbins); err != nil {
			t.Fatal(err)
		}
		launch(t, d, l, kHistogram, runtime.Dim3{X: n / 128, Y: 1, Z: 1}, runtime.Dim3{X: 128, Y: 1, Z: 1}, 0, px, pbins, int32(n))
		got := download[uint32](t, d, pbins, nbins)
		for b := range nbins {
			if got[b] != want[b] {
				t.Fatalf("bin %d = %d, want %d", b, got[b], want[b])
			}
		}
	}
}

func TestFloatAtomics(t *testing.T) {
	d, l := newTestDevice(t)
	const n = 1 << 16
	x := make([]float64, n)
	var sum float64
	for i := range x {
		x[i] = float64(i % 1000) // integers: the sum is exact in any order
		sum += x[i]
	}
	px, ptotal, pmax := upload(t, d, x), upload(t, d, []float64{0}), upload(t, d, []int32{-1})
	launch(t, d, l, kAtomicSumMax, runtime.Dim3{X: n / 64, Y: 1, Z: 1}, runtime.Dim3{X: 64, Y: 1, Z: 1}, 0, px, ptotal, pmax, int32(n))
	if got := download[float64](t, d, ptotal, 1)[0]; got != sum {
		t.Errorf("atomicAdd(double) total = %v, want %v", got, sum)
	}
	if got := download[int32](t, d, pmax, 1)[0]; got != 999 {
		t.Errorf("atomicMax = %d, want 999", got)
	}
}

func TestDeadlocksAreErrors(t *testing.T) {
	d, l := newTestDevice(t)
	pout := upload(t, d, make([]float32, 256))
	for _, tc := range []struct {
		k    int
		want string
	}{
		{kDivergentSync, "cpu: launch divergent_sync: deadlock in __syncthreads"},
		{kWarpBlockDeadlock, "cpu: launch warp_block_deadlock: deadlock"},
		{kSyncInSimple, "KernelInfo.Sync is false"},
	} {
		err := d.Launch(l.Function(tc.k), runtime.Dim3{X: 4, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, 0, pout)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kernel %d: err = %v, want it to contain %q", tc.k, err, tc.want)
		}
	}
	// The worker threads' fiber pools must be usable after an abandoned block.
	TestSumRowsTree(t)
}

func TestLaunchValidation(t *testing.T) {
	d, l := newTestDevice(t)
	f := l.Function(kAddRelu)
	g, b := runtime.Dim3{X: 1, Y: 1, Z: 1}, runtime.Dim3{X: 32, Y: 1, Z: 1}
	for _, tc := range []struct {
		grid, block runtime.Dim3
		args        []runtime.Arg
		want        string
	}{
		{g, b, []runtime.Arg{runtime.Ptr(8), runtime.Ptr(8), runtime.Ptr(8), float32(1)},
			"cpu: launch add_relu_fwd: arg 3: want int32, got float32"},
		{g, b, []runtime.Arg{runtime.Ptr(8), runtime.Ptr(8), 3, int32(1)},
			"cpu: launch add_relu_fwd: arg 2: want runtime.Ptr, got int"},
		{g, b, []runtime.Arg{runtime.Ptr(8)}, "cpu: launch add_relu_fwd: got 1 args, want 4"},
		{g, runtime.Dim3{X: 2048, Y: 1, Z: 1}, []runtime.Arg{runtime.Ptr(8), runtime.Ptr(8), runtime.Ptr(8), int32(1)},
			"more than 1024"},
		{runtime.Dim3{X: 0, Y: 1, Z: 1}, b, []runtime.Arg{runtime.Ptr(8), runtime.Ptr(8), runtime.Ptr(8), int32(1)},
			"every dimension"},
	} {
		err := d.Launch(f, tc.grid, tc.block, 0, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want it to contain %q", err, tc.want)
		}
	}
	if err := d.Launch(l.Function(99), g, b, 0); err == nil || !strings.Contains(err.Error(), "no kernel 99") {
		t.Errorf("out-of-range kernel: err = %v", err)
	}
	if _, err := d.Load(&runtime.Module{Name: "m"}); err == nil || !strings.Contains(err.Error(), "no CPUEntry") {
		t.Errorf("Load without CPUEntry: err = %v", err)
	}
}

func TestMemStats(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p1, _ := d.Alloc(100)
	p2, _ := d.Alloc(1000)
	if p1%64 != 0 || p2%64 != 0 {
		t.Errorf("allocations %#x %#x not 64-byte aligned", p1, p2)
	}
	if err := d.Free(p1); err != nil {
		t.Fatal(err)
	}
	if s := d.MemStats(); s.Allocated != 1000 || s.Reserved != 1000 || s.Peak != 1100 {
		t.Errorf("MemStats = %+v, want 1000/1000/1100", s)
	}
	if err := d.Free(p1); err == nil {
		t.Error("double free succeeded")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Alloc(8); err == nil {
		t.Error("Alloc after Close succeeded")
	}
}

// A SoloBlocks kernel runs with one-thread blocks, unless the device was
// asked for the GPU's launch shapes.
func TestSoloBlocks(t *testing.T) {
	for _, gpu := range []bool{false, true} {
		d, l := newTestDeviceOpts(t, Options{Threads: 2, GPUBlocks: gpu})
		const grid = 5
		pout := upload(t, d, make([]int32, grid))
		launch(t, d, l, kBlockWidth, runtime.Dim3{X: grid, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, 0, pout)
		want := int32(1)
		if gpu {
			want = 256
		}
		for b, w := range download[int32](t, d, pout, grid) {
			if w != want {
				t.Errorf("GPUBlocks %v: block %d ran %d wide, want %d", gpu, b, w, want)
			}
		}
	}
}
