package cpu

import (
	"fmt"

	"github.com/ngen-ml/ngen/runtime"
)

func init() {
	runtime.RegisterBackend("cpu", func(ordinal, threads int) (runtime.Device, error) {
		if ordinal != 0 {
			// The host is one device: "cpu:7" opened it and ignored the 7.
			return nil, fmt.Errorf("cpu:%d: the CPU backend has one device, cpu (cpu:0)", ordinal)
		}
		return New(Options{Threads: threads})
	})
}
