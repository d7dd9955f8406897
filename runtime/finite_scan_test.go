package runtime

import (
	"math"
	"math/rand/v2"
	"testing"
)

// plainFirstNonFinite is what firstNonFinite32 and 64 must agree with.
func plainFirstNonFinite[T float32 | float64](d []T) int {
	for k, x := range d {
		if x-x != 0 {
			return k
		}
	}
	return -1
}

// TestFirstNonFinite: the word-at-a-time scans find the first NaN or ±Inf
// exactly where the plain loop does, at every length and alignment, among
// the largest finite values, subnormals and negative zeros (the values
// next to the exponent's all-ones pattern).
func TestFirstNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bad32 := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001)}
	edge32 := []float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Copysign(0, -1)), 1, -1}
	bad64 := []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Float64frombits(0xfff0000000000001)}
	edge64 := []float64{math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, math.Copysign(0, -1), 1}
	for trial := range 4000 {
		n := rng.IntN(70)
		if trial%50 == 0 {
			n = 1000 + rng.IntN(100)
		}
		off := rng.IntN(2) // a subslice that starts off the 8-byte alignment
		d32 := make([]float32, n+off)
		d64 := make([]float64, n+off)
		for i := range d32 {
			d32[i] = edge32[rng.IntN(len(edge32))] * float32(rng.Float64())
			d64[i] = edge64[rng.IntN(len(edge64))] * rng.Float64()
		}
		for range rng.IntN(3) {
			if n > 0 {
				d32[off+rng.IntN(n)] = bad32[rng.IntN(len(bad32))]
				d64[off+rng.IntN(n)] = bad64[rng.IntN(len(bad64))]
			}
		}
		s32, s64 := d32[off:], d64[off:]
		if got, want := firstNonFinite32(s32), plainFirstNonFinite(s32); got != want {
			t.Fatalf("float32 n=%d off=%d: %d, want %d", n, off, got, want)
		}
		if got, want := firstNonFinite64(s64), plainFirstNonFinite(s64); got != want {
			t.Fatalf("float64 n=%d off=%d: %d, want %d", n, off, got, want)
		}
	}
}

// BenchmarkFirstNonFinite: the seed MLP's batch of 128 images, finite.
func BenchmarkFirstNonFinite(b *testing.B) {
	d := make([]float32, 128*784)
	for i := range d {
		d[i] = float32(i%255) / 255
	}
	b.Run("words", func(b *testing.B) {
		for b.Loop() {
			if firstNonFinite32(d) != -1 {
				b.Fatal("found one")
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if plainFirstNonFinite(d) != -1 {
				b.Fatal("found one")
			}
		}
	})
}
