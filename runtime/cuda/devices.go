//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime/cuda/probe"
)

// Info describes one device. It is probe.Info, so code built without the
// cuda tag can print the same thing from probe.Devices.
type Info = probe.Info

// Devices lists the GPUs the driver sees: name, compute capability, memory
// and driver version. Without a usable device the error wraps ErrNoDevice.
func Devices() ([]Info, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: cuDeviceGetCount: %v", err)
	}
	driver := cu.Version()
	infos := make([]Info, n)
	for i := range infos {
		dev, err := cu.GetDevice(i)
		if err != nil {
			return nil, fmt.Errorf("cuda: cuDeviceGet(%d): %v", i, err)
		}
		in := Info{Ordinal: i, DriverVersion: driver}
		if in.Name, err = dev.Name(); err != nil {
			return nil, fmt.Errorf("cuda: device %d: name: %v", i, err)
		}
		if in.Major, err = dev.Attribute(cu.ComputeCapabilityMajor); err != nil {
			return nil, fmt.Errorf("cuda: device %d: compute capability: %v", i, err)
		}
		if in.Minor, err = dev.Attribute(cu.ComputeCapabilityMinor); err != nil {
			return nil, fmt.Errorf("cuda: device %d: compute capability: %v", i, err)
		}
		if in.TotalMem, err = dev.TotalMem(); err != nil {
			return nil, fmt.Errorf("cuda: device %d: total memory: %v", i, err)
		}
		infos[i] = in
	}
	return infos, nil
}

// PeakBandwidth is the device's theoretical memory bandwidth in bytes per
// second: twice (double data rate) the memory clock times the bus width,
// the figure achieved GB/s is judged against.
func (d *Device) PeakBandwidth() (float64, error) {
	dev, err := cu.GetDevice(d.info.Ordinal)
	if err != nil {
		return 0, fmt.Errorf("cuda: cuDeviceGet(%d): %v", d.info.Ordinal, err)
	}
	khz, err := dev.Attribute(cu.MemoryClockRate)
	if err != nil {
		return 0, fmt.Errorf("cuda: memory clock: %v", err)
	}
	bits, err := dev.Attribute(cu.GlobalMemoryBusWidth)
	if err != nil {
		return 0, fmt.Errorf("cuda: memory bus width: %v", err)
	}
	return 2 * float64(khz) * 1e3 * float64(bits) / 8, nil
}
