package dist

// The MPI calls, through cgo against Debian's OpenMPI (libopenmpi-dev).
// Every collective is the nonblocking form (MPI_Iallreduce, MPI_Ibcast,
// MPI_Ibarrier) completed by ngen_wait, which polls MPI_Testall until a
// deadline: a blocking MPI call cannot be interrupted, so a peer that
// died or hangs would otherwise hang this rank for ever.

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <mpi-ext.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static MPI_Comm ngen_comm = MPI_COMM_NULL;

static int ngen_init(int *provided) {
	int inited = 0;
	MPI_Initialized(&inited);
	int rc = MPI_SUCCESS;
	if (!inited) {
		rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
		if (rc != MPI_SUCCESS) return rc;
	} else {
		MPI_Query_thread(provided);
	}
	// Errors come back as codes (turned into Go errors naming the rank)
	// instead of aborting inside the library.
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	rc = MPI_Comm_dup(MPI_COMM_WORLD, &ngen_comm);
	if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(ngen_comm, MPI_ERRORS_RETURN);
	return rc;
}

static int ngen_rank(void) { int r = -1; MPI_Comm_rank(ngen_comm, &r); return r; }
static int ngen_size(void) { int n = 0; MPI_Comm_size(ngen_comm, &n); return n; }

static int ngen_local_rank(int *local) {
	MPI_Comm shm;
	int rc = MPI_Comm_split_type(ngen_comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Comm_rank(shm, local);
	MPI_Comm_free(&shm);
	return MPI_SUCCESS;
}

// ngen_wait completes n requests, or returns -1 once timeout seconds
// (<= 0: none) have passed. OpenMPI moves a large message's fragments
// only inside MPI calls, so it polls back to back for the first second
// (yielding the core, for oversubscribed ranks); only a wait longer than
// that, for a slower rank, sleeps 50 µs between polls. (Sleeping from
// the start made a 12.6 MB all-reduce take 50 ms instead of a few.)
static int ngen_wait(int n, MPI_Request *req, double timeout) {
	double start = MPI_Wtime(), deadline = start + timeout;
	for (;;) {
		int done = 0;
		int rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS) return rc;
		if (done) return MPI_SUCCESS;
		double now = MPI_Wtime();
		if (timeout > 0 && now > deadline) return -1;
		if (now - start < 1.0) {
			sched_yield();
		} else {
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
		}
	}
}

// ngen_allreduce sums n elements (dt 0: float, 1: double) at p in place,
// in buckets of at most bucket elements started together.
static int ngen_allreduce(void *p, long long n, int dt, long long bucket, double timeout) {
	MPI_Datatype t = dt == 1 ? MPI_DOUBLE : MPI_FLOAT;
	size_t es = dt == 1 ? 8 : 4;
	int nb = (int)((n + bucket - 1) / bucket);
	if (nb == 0) return MPI_SUCCESS;
	MPI_Request *req = malloc(sizeof(MPI_Request) * nb);
	for (int i = 0; i < nb; i++) {
		long long off = (long long)i * bucket, cnt = n - off < bucket ? n - off : bucket;
		int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)p + off * es, (int)cnt, t, MPI_SUM, ngen_comm, &req[i]);
		if (rc != MPI_SUCCESS) { free(req); return rc; }
	}
	int rc = ngen_wait(nb, req, timeout);
	free(req);
	return rc;
}

static int ngen_allreduce_at(uintptr_t p, long long n, int dt, long long bucket, double timeout) {
	return ngen_allreduce((void *)p, n, dt, bucket, timeout);
}

static int ngen_bcast(void *p, int n, int root, double timeout) {
	MPI_Request req;
	int rc = MPI_Ibcast(p, n, MPI_BYTE, root, ngen_comm, &req);
	if (rc != MPI_SUCCESS) return rc;
	return ngen_wait(1, &req, timeout);
}

static int ngen_barrier(double timeout) {
	MPI_Request req;
	int rc = MPI_Ibarrier(ngen_comm, &req);
	if (rc != MPI_SUCCESS) return rc;
	return ngen_wait(1, &req, timeout);
}

static int ngen_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
	return MPIX_Query_cuda_support();
#else
	return 0;
#endif
}

static void ngen_error_string(int rc, char *buf) {
	int len = 0;
	if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
	buf[len] = 0;
}
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

func mpiInit() (threadLevel int, err error) {
	var provided C.int
	if rc := C.ngen_init(&provided); rc != C.MPI_SUCCESS {
		return 0, mpiError(rc)
	}
	return int(provided), nil
}

func threadMultiple() int { return int(C.MPI_THREAD_MULTIPLE) }

func mpiRank() int { return int(C.ngen_rank()) }
func mpiSize() int { return int(C.ngen_size()) }

func mpiLocalRank() (int, error) {
	var l C.int
	if rc := C.ngen_local_rank(&l); rc != C.MPI_SUCCESS {
		return 0, mpiError(rc)
	}
	return int(l), nil
}

func mpiAllreduce(p unsafe.Pointer, n int64, f64 bool, bucket int64, timeout time.Duration) C.int {
	dt := C.int(0)
	if f64 {
		dt = 1
	}
	return C.ngen_allreduce(p, C.longlong(n), dt, C.longlong(bucket), C.double(timeout.Seconds()))
}

func mpiAllreduceAt(addr uintptr, n int64, f64 bool, bucket int64, timeout time.Duration) C.int {
	dt := C.int(0)
	if f64 {
		dt = 1
	}
	return C.ngen_allreduce_at(C.uintptr_t(addr), C.longlong(n), dt, C.longlong(bucket), C.double(timeout.Seconds()))
}

func mpiBcast(b []byte, root int, timeout time.Duration) C.int {
	if len(b) == 0 {
		return C.MPI_SUCCESS
	}
	return C.ngen_bcast(unsafe.Pointer(&b[0]), C.int(len(b)), C.int(root), C.double(timeout.Seconds()))
}

func mpiBarrier(timeout time.Duration) C.int { return C.ngen_barrier(C.double(timeout.Seconds())) }

func mpiCUDAAware() bool { return C.ngen_cuda_aware() != 0 }

func mpiAbort(code int) { C.MPI_Abort(C.MPI_COMM_WORLD, C.int(code)) }

func mpiFinalize() error {
	if rc := C.MPI_Finalize(); rc != C.MPI_SUCCESS {
		return mpiError(rc)
	}
	return nil
}

// errTimeout is ngen_wait's code for a deadline that passed.
const errTimeout = -1

func mpiErrorCode(rc int) error { return mpiError(C.int(rc)) }

func mpiError(rc C.int) error {
	buf := make([]byte, C.MPI_MAX_ERROR_STRING+1)
	C.ngen_error_string(rc, (*C.char)(unsafe.Pointer(&buf[0])))
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return fmt.Errorf("MPI error %d: %s", int(rc), buf[:n])
}
