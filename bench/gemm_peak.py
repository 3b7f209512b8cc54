#!/usr/bin/env python3
"""This machine's float32 matrix-product peak as LibTorch reaches it: torch.mm of two 2048x2048
matrices (17.2 GFLOP), medians of ROUNDS timings after 3 warm-ups, on 1 and on 2 intra-op
threads. Debian's python3-torch is the same engine as the library's LibTorch and multiplies
with the same OpenBLAS (bench/lib/openblas_core.py gives it the kernels dist chooses; with
BENCH_PEER_OPENBLAS=own OpenBLAS's own choice).

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/bin/python3 bench/gemm_peak.py [ROUNDS=10]

Prints one line per thread count: "gemm_peak THREADS GFLOPS CORE".
"""
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import openblas_core  # noqa: E402,F401  OPENBLAS_CORETYPE set before torch loads OpenBLAS
import torch  # noqa: E402


def running_core():
    """The core OpenBLAS runs, read from the library torch loaded."""
    with open("/proc/self/maps") as maps:
        paths = [line.split()[-1] for line in maps if "libopenblas" in line]
    if not paths:
        return "not-openblas"
    corename = ctypes.CDLL(paths[0]).openblas_get_corename
    corename.restype = ctypes.c_char_p
    return corename().decode()


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
for threads in (1, 2):
    torch.set_num_threads(threads)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    print(f"gemm_peak {threads} {2 * 2048**3 / statistics.median(times) / 1e9:.1f} {running_core()}")
