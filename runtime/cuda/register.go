//go:build cuda

package cuda

import (
	"os"

	"github.com/ngen-ml/ngen/runtime"
)

// OpenDevice("cuda") reads two switches from the environment, so that
// cmd/train and the benchmarks need no flag: NGEN_CUDA_GRAPHS=0 turns CUDA
// graphs off and NGEN_CUDA_TF32=1 turns TF32 GEMMs on (Options).
func init() {
	runtime.RegisterBackend("cuda", func(ordinal, threads int) (runtime.Device, error) {
		return New(Options{Ordinal: ordinal, NoGraphs: os.Getenv("NGEN_CUDA_GRAPHS") == "0", TF32: os.Getenv("NGEN_CUDA_TF32") == "1"})
	})
}
