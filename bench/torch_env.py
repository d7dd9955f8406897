"""The environment a PyTorch peer benchmark runs in: thread count, BLAS and
CPU, so that every number printed says what produced it.
"""

import os
import re


def pin_threads(n):
    """Use n threads everywhere. Call it before importing torch or numpy
    (numpy loads the same OpenBLAS).

    Debian's torch calls BLAS through libblas.so.3, which is OpenBLAS here.
    torch.set_num_threads does not reach OpenBLAS's own pthread pool, and
    OpenBLAS reads its thread count once, when it loads. Without this, a
    "1-thread" run does its GEMMs on every core.
    """
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    import torch
    torch.set_num_threads(n)


def blas_summary():
    """What torch.__config__ says about BLAS plus the library actually mapped
    into this process; Debian's build says only BLAS_INFO=generic."""
    import torch
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    info = m.group(1) if m else "unknown"
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))  # make sure BLAS is loaded
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                name = line.split()[-1].rsplit("/", 1)[-1]
                m = re.match(r"lib(openblas\w*|mkl_rt|blis)[.-]", name)
                if m:
                    libs.add(name)
    except OSError:
        pass
    return "BLAS_INFO=%s, loaded %s" % (info, ", ".join(sorted(libs)) or "no known BLAS")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.machine()
