#!/usr/bin/env python3
"""Prints the OpenBLAS core type the tests should name, or nothing.

OpenBLAS chooses its kernels by the CPU's model number.  One it does not
know (Debian 12's 0.3.21 on a newer Xeon, seen as a hypervisor's generic
"Intel(R) Xeon(R) Processor") gets its x86-64 fallback, Prescott: SSE3
kernels, without the AVX2 and AVX-512 the CPU has.  Where that happens,
this names the core type the CPU's features allow (SkylakeX with AVX-512,
Haswell with AVX2 and FMA) for $OPENBLAS_CORETYPE, which OpenBLAS reads
when it loads.  Every process of a test then runs the same kernels, as
they did before.  Anywhere else (OpenBLAS chose a core of its own, or
there is none) it prints nothing and the tests run what OpenBLAS chose.
"""
import ctypes


def chosen_core():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


def cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def main():
    if (chosen_core() or "").lower() != "prescott":
        return
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags:
        print("SKYLAKEX")
    elif {"avx2", "fma"} <= flags:
        print("HASWELL")


if __name__ == "__main__":
    main()
