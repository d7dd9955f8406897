package probe

import (
	"errors"
	"testing"
)

// TestDevices runs on every machine: it either lists devices or explains,
// through ErrNoDevice, why there are none; it must never crash the process.
func TestDevices(t *testing.T) {
	infos, err := Devices()
	if err != nil {
		if !errors.Is(err, ErrNoDevice) {
			t.Fatalf("Devices: %v, which does not wrap ErrNoDevice", err)
		}
		t.Logf("no device: %v", err)
		return
	}
	for _, in := range infos {
		if in.Name == "" || in.Major == 0 || in.TotalMem <= 0 {
			t.Errorf("implausible device %+v", in)
		}
		t.Log(in)
	}
}
