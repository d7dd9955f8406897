//go:build cuda

package cuda

import "github.com/ngen-ml/ngen/runtime"

func init() {
	runtime.RegisterBackend("cuda", func(ordinal, threads int) (runtime.Device, error) {
		return New(Options{Ordinal: ordinal})
	})
}
