"""Gives a PyTorch peer the OpenBLAS kernels that dist gives itself on this CPU.

Imported before `import torch`, it sets OPENBLAS_CORETYPE (unless set) to the core of the CPU's
features, by the rule of dist/core/blas_core.h: OpenBLAS reads the variable once, as torch
loads it, and a CPU newer than its table otherwise runs its Prescott kernels (Debian 12's
OpenBLAS 0.3.21 on an Intel Xeon of model 207: torch.mm 2048^3 4x slower). dist switches
itself at its start; this puts the peers on the same kernels, so that a comparison measures the
frameworks, not the BLAS. BENCH_PEER_OPENBLAS=own leaves OpenBLAS's own choice (the peer as it
comes). The worker processes a peer spawns inherit the variable.
"""
import os


def core_for_this_cpu():
    """'Cooperlake', 'SkylakeX', 'Zen', 'Haswell' or None, from /proc/cpuinfo's first CPU."""
    flags, vendor = set(), ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "flags" and not flags:
                flags = set(value.split())
            elif key == "vendor_id" and not vendor:
                vendor = value.strip()
            if flags and vendor:
                break
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "Cooperlake" if "avx512_bf16" in flags else "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Zen" if vendor == "AuthenticAMD" else "Haswell"
    return None


def choose():
    if os.environ.get("BENCH_PEER_OPENBLAS") == "own" or os.environ.get("OPENBLAS_CORETYPE"):
        return
    core = core_for_this_cpu()
    if core is not None:
        os.environ["OPENBLAS_CORETYPE"] = core


choose()
