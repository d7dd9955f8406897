// Package probe finds NVIDIA GPUs without linking the CUDA driver, so any
// ngen binary, built with or without the cuda tag, can say whether the GPU
// backend would run and why not.
//
// Pipeline: DSL → IR → passes → kernels → glue → runtime. runtime/cuda runs
// kernels on a GPU, but it links libcuda and imports gorgonia.org/cu, whose
// package init calls cuInit and exits the process when that fails. This
// package opens libcuda.so.1 with dlopen instead and only reports: a
// missing driver, a stub driver or a machine without a GPU all come back as
// errors that wrap ErrNoDevice.
package probe

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>

// The driver API's types, declared here so that building this package needs
// neither cuda.h nor libcuda.
typedef int ngen_cu_result;

static void *ngen_libcuda;

static const char *ngen_probe_open(void) {
	if (ngen_libcuda == NULL) ngen_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	return ngen_libcuda == NULL ? dlerror() : NULL;
}

static void *ngen_sym(const char *name) { return dlsym(ngen_libcuda, name); }

// -1 means the driver lacks the symbol.
static ngen_cu_result ngen_init(void) {
	ngen_cu_result (*f)(unsigned) = ngen_sym("cuInit");
	return f ? f(0) : -1;
}
static ngen_cu_result ngen_driver_version(int *v) {
	ngen_cu_result (*f)(int *) = ngen_sym("cuDriverGetVersion");
	return f ? f(v) : -1;
}
static ngen_cu_result ngen_device_count(int *n) {
	ngen_cu_result (*f)(int *) = ngen_sym("cuDeviceGetCount");
	return f ? f(n) : -1;
}
static ngen_cu_result ngen_device_info(int ordinal, char *name, int name_len, int *major, int *minor, size_t *total) {
	ngen_cu_result (*get)(int *, int) = ngen_sym("cuDeviceGet");
	ngen_cu_result (*get_name)(char *, int, int) = ngen_sym("cuDeviceGetName");
	ngen_cu_result (*attr)(int *, int, int) = ngen_sym("cuDeviceGetAttribute");
	ngen_cu_result (*mem)(size_t *, int) = ngen_sym("cuDeviceTotalMem_v2");
	if (!get || !get_name || !attr || !mem) return -1;
	int dev;
	ngen_cu_result r;
	if ((r = get(&dev, ordinal)) != 0) return r;
	if ((r = get_name(name, name_len, dev)) != 0) return r;
	// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR and _MINOR.
	if ((r = attr(major, 75, dev)) != 0) return r;
	if ((r = attr(minor, 76, dev)) != 0) return r;
	return mem(total, dev);
}
static const char *ngen_error_name(ngen_cu_result r) {
	ngen_cu_result (*f)(ngen_cu_result, const char **) = ngen_sym("cuGetErrorName");
	const char *s = NULL;
	if (f) f(r, &s);
	return s;
}
static const char *ngen_error_string(ngen_cu_result r) {
	ngen_cu_result (*f)(ngen_cu_result, const char **) = ngen_sym("cuGetErrorString");
	const char *s = NULL;
	if (f) f(r, &s);
	return s;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
)

// ErrNoDevice is wrapped by every error that means "no usable CUDA device".
var ErrNoDevice = errors.New("no CUDA device")

// Info describes one device.
type Info struct {
	Ordinal int
	Name    string
	// Major and Minor are the compute capability, e.g. 9 and 0 for sm_90.
	Major, Minor int
	// TotalMem is the device memory in bytes.
	TotalMem int64
	// DriverVersion is cuDriverGetVersion's 1000*major + 10*minor, e.g. 12020.
	DriverVersion int
}

func (i Info) String() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %.1f GiB, driver %s)", i.Ordinal, i.Name, i.Major, i.Minor,
		float64(i.TotalMem)/(1<<30), DriverVersionString(i.DriverVersion))
}

// DriverVersionString formats cuDriverGetVersion's number as "12.2".
func DriverVersionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

var mu sync.Mutex // dlopen's handle and cuInit are process-wide

// Devices initialises the driver and lists its devices. When there is no
// driver, a stub driver or no device, the error wraps ErrNoDevice and says
// which.
func Devices() ([]Info, error) {
	mu.Lock()
	defer mu.Unlock()
	if msg := C.ngen_probe_open(); msg != nil {
		return nil, fmt.Errorf("%w: no CUDA driver: %s", ErrNoDevice, C.GoString(msg))
	}
	var v C.int
	if r := C.ngen_driver_version(&v); r != 0 {
		return nil, fmt.Errorf("%w: cuDriverGetVersion: %s", ErrNoDevice, resultText(r))
	}
	driver := int(v)
	if r := C.ngen_init(); r != 0 {
		return nil, fmt.Errorf("%w: cuInit (driver %s): %s", ErrNoDevice, DriverVersionString(driver), resultText(r))
	}
	var n C.int
	if r := C.ngen_device_count(&n); r != 0 {
		return nil, fmt.Errorf("%w: cuDeviceGetCount: %s", ErrNoDevice, resultText(r))
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the driver (%s) sees no devices", ErrNoDevice, DriverVersionString(driver))
	}
	infos := make([]Info, n)
	var name [256]C.char
	for i := range infos {
		var major, minor C.int
		var total C.size_t
		if r := C.ngen_device_info(C.int(i), &name[0], C.int(len(name)), &major, &minor, &total); r != 0 {
			return nil, fmt.Errorf("probe: device %d: %s", i, resultText(r))
		}
		infos[i] = Info{Ordinal: i, Name: C.GoString(&name[0]), Major: int(major), Minor: int(minor),
			TotalMem: int64(total), DriverVersion: driver}
	}
	return infos, nil
}

// resultText names a CUresult, e.g. "CUDA_ERROR_NO_DEVICE (no CUDA-capable
// device is detected)".
func resultText(r C.ngen_cu_result) string {
	if r == -1 {
		return "the driver lacks this entry point"
	}
	name, text := C.ngen_error_name(r), C.ngen_error_string(r)
	if name == nil {
		return fmt.Sprintf("CUresult %d", int(r))
	}
	s := C.GoString(name)
	if text != nil {
		s += " (" + C.GoString(text) + ")"
	}
	return s
}
