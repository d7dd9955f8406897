package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestBatchNormOffCentre checks an f32 batch norm's first training step
// on channels whose mean is far from the running mean (0 at the first
// step) against float64 arithmetic, in every form the CPU runs: the host
// forms, the baseline forms and the GPU forms. The one-pass variance
// E[d²] − E[d]² loses log2(E[d]²/var) bits when E[d²] and E[d] are f32:
// a channel with mean 1000 and spread 1 kept about 4 of its variance's
// bits, whatever the summation (outputs 2–6% and dx 2–5% off), and fuzz seed
// 1164's channel, mean 18 times its spread, gave the GPU and baseline
// forms a conv weight's gradient 0.2% apart. The statistics are now
// summed and subtracted in f64 (ops.BatchNorm2d).
func TestBatchNormOffCentre(t *testing.T) {
	const n, c, h, w = 7, 3, 5, 6
	means := []float64{1000, -300, 18}
	rng := rand.New(rand.NewPCG(11, 64))
	m := n * c * h * w
	x, g := make([]float64, m), make([]float64, m)
	for i := range x {
		ch := i / (h * w) % c
		x[i] = float64(float32(means[ch] + rng.NormFloat64()))
		g[i] = float64(float32(rng.NormFloat64()))
	}
	gamma := []float64{1.5, 0.5, -1}
	beta := []float64{0.25, -0.5, 1}
	const eps = 1e-5
	// float64 reference: y and dx of loss = sum(y·g).
	wantY, wantDX := make([]float64, m), make([]float64, m)
	for k := range c {
		var idx []int
		for i := range x {
			if i/(h*w)%c == k {
				idx = append(idx, i)
			}
		}
		cnt := float64(len(idx))
		mean, v := 0.0, 0.0
		for _, i := range idx {
			mean += x[i]
		}
		mean /= cnt
		for _, i := range idx {
			v += (x[i] - mean) * (x[i] - mean)
		}
		v /= cnt
		rstd := 1 / math.Sqrt(v+eps)
		sg, sgx := 0.0, 0.0
		for _, i := range idx {
			xh := (x[i] - mean) * rstd
			wantY[i] = xh*gamma[k] + beta[k]
			sg += g[i]
			sgx += g[i] * xh
		}
		for _, i := range idx {
			xh := (x[i] - mean) * rstd
			wantDX[i] = gamma[k] * rstd / cnt * (cnt*g[i] - sg - xh*sgx)
		}
	}
	maxDX := 0.0
	for _, v := range wantDX {
		maxDX = max(maxDX, math.Abs(v))
	}
	for _, o := range []struct {
		name string
		opts cpu.Options
	}{
		{"host", cpu.Options{Threads: 2}},
		{"baseline", cpu.Options{Threads: 2, Baseline: true}},
		{"gpu forms", cpu.Options{Threads: 2, GPUForms: true}},
	} {
		t.Run(o.name, func(t *testing.T) {
			dev, err := cpu.New(o.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			s := bnSession(t, dev, bnModel(ir.F32, n, c, h, w), true, bnData{w: gamma, b: beta, g: g})
			defer s.Close()
			// predict in training mode normalises with the batch's
			// statistics, as the step does; the step gives dx.
			runBN(t, s, "predict", x)
			y := readNamed(t, s, "output", "output")
			runBN(t, s, "step", x)
			dx := readNamed(t, s, "grad", "x")
			// The statistics are now exact but for their rounding to
			// f32; the normalisation is y = d·a + (β − shift·a) with
			// d = x − running_mean = x, so y carries f32's rounding of
			// d·a and of the bias (an ulp of |mean·a| each) besides
			// rstd's: 4·2⁻²⁴·(|x·a| + |β|) + 2e-6·|y|. dx: 1e-5 of the
			// largest (sums of 210 products in f32).
			bad := 0
			for i := range y {
				k := i / (h * w) % c
				a := math.Abs(gamma[k]) / math.Sqrt(1+eps)
				tol := 4*0x1p-24*(math.Abs(x[i])*a+math.Abs(beta[k])) + 2e-6*math.Abs(wantY[i])
				if d := math.Abs(y[i] - wantY[i]); d > tol || math.IsNaN(y[i]) {
					if bad++; bad <= 3 {
						t.Errorf("y[%d] (channel mean %g) = %.9g, float64 %.9g: off by %.3g, tolerance %.3g", i, means[k], y[i], wantY[i], d, tol)
					}
				}
				if d := math.Abs(dx[i] - wantDX[i]); d > 1e-5*maxDX || math.IsNaN(dx[i]) {
					if bad++; bad <= 3 {
						t.Errorf("dx[%d] (channel mean %g) = %.9g, float64 %.9g: off by %.3g, tolerance %.3g", i, means[k], dx[i], wantDX[i], d, 1e-5*maxDX)
					}
				}
			}
			if bad > 3 {
				t.Error(fmt.Sprintf("%d values off in all", bad))
			}
		})
	}
}
