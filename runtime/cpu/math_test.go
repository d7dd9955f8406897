package cpu

import (
	"math"
	goruntime "runtime"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

func TestMathProbe(t *testing.T) {
	d, l := newTestDevice(t)
	xs := []float32{-2.5, -1, -0.25, 0, 0.3, 1, 2.75, 5}
	n := len(xs)
	px := upload(t, d, xs)
	pf, pd, pu := upload(t, d, make([]float32, 24*n)), upload(t, d, make([]float64, 10*n)), upload(t, d, make([]uint32, 4*n))
	launch(t, d, l, kMathProbe, runtime.Dim3{X: 2, Y: 1, Z: 1}, runtime.Dim3{X: 4, Y: 1, Z: 1}, 0, px, pf, pd, pu, int32(n))
	f, dd, u := download[float32](t, d, pf, 24*n), download[float64](t, d, pd, 10*n), download[uint32](t, d, pu, 4*n)
	for i, x32 := range xs {
		x := float64(x32)
		a := math.Abs(x)
		wantF := []float64{math.Exp(x), math.Log(a + 1), math.Sqrt(a), 1 / math.Sqrt(a+1),
			math.Tanh(x), math.Max(x, 0.5), math.Min(x, 0.5), math.Pow(a, 1.5),
			math.Erf(x), math.Log1p(a), math.Expm1(x), x*2 + 1,
			math.Floor(x), math.Ceil(x), math.Exp(x), math.Log(a + 1),
			x / 3, 1 / (x + 10), x, 0,
			1, 1, float64(max(i, 3) + min(7, i)), 0}
		if x == 0 {
			wantF[19], wantF[20] = 1, 0 // 0/0 is NaN, not Inf
		}
		for j, w := range wantF {
			// f32 libm: a few ulps.
			if got := float64(f[24*i+j]); math.Abs(got-w) > 4e-7*math.Max(1, math.Abs(w)) {
				t.Errorf("x=%v: float result %d = %v, want %v", x, j, got, w)
			}
		}
		wantD := []float64{math.Exp(x), math.Log(a + 1), math.Sqrt(a), 1 / math.Sqrt(a+1),
			math.Tanh(x), math.Max(x, 0.5) + math.Min(x, 0.5), math.Pow(a, 1.5), math.Erf(x), math.Log1p(a), a}
		for j, w := range wantD {
			// glibc and Go's math may differ in the last ulp.
			if got := dd[10*i+j]; math.Abs(got-w) > 1e-15*math.Max(1, math.Abs(w)) {
				t.Errorf("x=%v: double result %d = %v, want %v", x, j, got, w)
			}
		}
		wantU := []uint32{uint32((uint64(0x80000001) * uint64(i+3)) >> 32), uint32(uint64(i + 4)), 1, 7}
		for j, w := range wantU {
			if got := u[4*i+j]; got != w {
				t.Errorf("thread %d: unsigned result %d = %d, want %d", i, j, got, w)
			}
		}
	}
}

// TestSpanSqrt runs a grid-stride kernel in span mode over an odd-sized
// range split between two workers, with inputs of every float class, and
// checks that every element was computed once and that the vectorised
// sqrtf is IEEE sqrt exactly, as CUDA's sqrtf is, with denormal inputs
// read as zero (nvcc --ftz=true, emulated by the MXCSR mode on x86).
func TestSpanSqrt(t *testing.T) {
	d, l := newTestDevice(t)
	const n = 100003
	xs := make([]float32, n)
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, 4, 2, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.SmallestNonzeroFloat32, math.MaxFloat32, 1e-40}
	bits := uint32(12345)
	for i := range xs {
		if i < len(specials) {
			xs[i] = specials[i]
			continue
		}
		bits = bits*1664525 + 1013904223 // any bit pattern: normals, subnormals, NaNs, negatives
		xs[i] = math.Float32frombits(bits)
	}
	sentinel := make([]float32, n)
	for i := range sentinel {
		sentinel[i] = 12345
	}
	px, py := upload(t, d, xs), upload(t, d, sentinel)
	launch(t, d, l, kSpanSqrt, runtime.Dim3{X: 7, Y: 1, Z: 1}, runtime.Dim3{X: 128, Y: 1, Z: 1}, 0, px, py, int64(n))
	ys := download[float32](t, d, py, n)
	bad := 0
	for i, x := range xs {
		in := float64(x)
		if goruntime.GOARCH == "amd64" && x != 0 && math.Abs(in) < 0x1p-126 {
			in = math.Copysign(0, in) // denormals are zero
		}
		want := float32(math.Sqrt(in)) // correctly rounded: double has more than 2*24+2 bits
		got := ys[i]
		if math.IsNaN(float64(want)) && math.IsNaN(float64(got)) {
			continue
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			if bad++; bad <= 5 {
				t.Errorf("sqrtf(%g [%#08x]) = %g [%#08x], want %g", x, math.Float32bits(x), got, math.Float32bits(got), want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d results differ", bad, n)
	}
}
