"""Keep freed memory in the process, so a training step does not page-fault its activations in again.

glibc's malloc serves large blocks (by default above a threshold that adapts up to 32 MiB) with fresh `mmap`
pages and returns them to the kernel on `free`; it also trims the top of its heap. A training step frees
nearly all it allocated, so every step the kernel zero-fills those pages again on first touch. A two-pass
step (ASA, Bernoulli masking) of the MiniLM at batch 32 x 64 tokens has 500-700 MiB of activations and took
about 30,000 minor page faults a step; in `bench methods` ASA's step went from 2.42-2.72x vanilla's to
2.14-2.26x once malloc was told never to use `mmap` and never to trim. Freed memory is then reused by the
next step (most steps fault nothing; 64-byte-aligned blocks sometimes leave a freed one too small to reuse).

The cost is that the process keeps its peak memory until it exits. Set ATTENTION_LAB_KEEP_FREED_MEMORY=0 to
leave malloc as it is. Other C libraries (musl, macOS, Windows) have no `mallopt`; nothing changes there.
"""
from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h> parameter numbers
OPT_OUT = "ATTENTION_LAB_KEEP_FREED_MEMORY"

_kept = False


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to reuse freed memory instead of returning it; True when it now does. Idempotent."""
    global _kept
    if _kept or not sys.platform.startswith("linux") or os.environ.get(OPT_OUT, "1") == "0":
        return _kept
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _kept = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    return _kept
