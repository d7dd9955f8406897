package mlp_test

import (
	"fmt"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// BenchmarkAccumulate measures the cost of gradient accumulation on the
// seed MLP: one update over k micro-batches of 64 rows against one step on
// the k·64 rows (docs/PERF.md). ns/op is per update; rows/s per sample.
//
//	go test ./models/mlp -run '^$' -bench Accumulate -benchtime 40x
func BenchmarkAccumulate(b *testing.B) {
	const micro = 64
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	for _, k := range []int{1, 4, 8} {
		for _, large := range []bool{false, true} {
			if k == 1 && large {
				continue
			}
			name := fmt.Sprintf("k=%d/micro=%d", k, micro)
			rows, calls, opts := micro, k, mlp.Options{Batch: micro, Seed: 1, AccumulationSteps: k}
			if large {
				name = fmt.Sprintf("k=1/batch=%d", k*micro)
				rows, calls, opts = k*micro, 1, mlp.Options{Batch: k * micro, Seed: 1}
			}
			b.Run(name, func(b *testing.B) {
				m, err := mlp.New(dev, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				x, y := batch(rows, 2)
				for i := 0; i < calls; i++ { // warm up
					if _, err := m.Step(x, y); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := 0; j < calls; j++ {
						if _, err := m.Step(x, y); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.N*calls*rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}
