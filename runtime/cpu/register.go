package cpu

import "github.com/ngen-ml/ngen/runtime"

func init() {
	runtime.RegisterBackend("cpu", func(ordinal, threads int) (runtime.Device, error) {
		return New(Options{Threads: threads})
	})
}
