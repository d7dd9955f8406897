//go:build cuda

// gorgonia.org/cu's package init calls cuInit(0) and calls os.Exit(1) when it
// fails, which on a machine without a GPU kills every binary that links
// runtime/cuda before main or TestMain runs. This definition of cuInit is
// part of the executable, so the static linker binds cu's call to it rather
// than to libcuda's; it forwards to the driver, records the real result for
// initguard.go, and reports success so that cu's init returns. Every entry
// point of runtime/cuda checks the recorded result first, so nothing runs on
// an uninitialised driver. See docs/GPU.md.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <cuda.h>

static CUresult ngen_cuinit_result = CUDA_ERROR_NOT_INITIALIZED;
static int ngen_cuinit_called;

CUresult CUDAAPI cuInit(unsigned int flags) {
	CUresult (*real)(unsigned int) = (CUresult (*)(unsigned int))dlsym(RTLD_NEXT, "cuInit");
	if (real == NULL) {
		void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (lib != NULL) real = (CUresult (*)(unsigned int))dlsym(lib, "cuInit");
	}
	ngen_cuinit_result = real != NULL ? real(flags) : CUDA_ERROR_NOT_FOUND;
	ngen_cuinit_called = 1;
	return CUDA_SUCCESS;
}

int ngen_cuinit_status(int *called) {
	*called = ngen_cuinit_called;
	return (int)ngen_cuinit_result;
}
