"""Keep freed memory in the process, so a training step does not page-fault its activations in again.

glibc's malloc serves large blocks with fresh `mmap` pages and returns them to the kernel on `free`; it also
trims the top of its heap. A training step frees nearly all it allocated, so every step the kernel zero-fills
those pages again on first touch. A two-pass step (ASA, Bernoulli masking) of the MiniLM at batch 32 x 64 tokens
has 500-700 MiB of activations in blocks of a few MiB and took about 30,000 minor page faults a step; in
`python -m benchmarks methods` ASA's step went from 2.42-2.72x vanilla's to 2.14-2.26x once malloc kept them.

It has a cost: a heap that never gives pages back fragments when large blocks of slightly different sizes come
and go (torch aligns each block, so a freed block can be a few bytes short of the next one of the same size), and
the process keeps its peak for life. Measured by `python -m benchmarks memory` (`results/memory.md`, two runs): on SST-2 (batch
32, up to 128 tokens) keeping added 3-4% to the peak and made no consistent difference to the step time; on SQuAD
(batch 16 x 384 tokens, 113 MiB per attention map) it cut the step time to 0.55-0.57x but raised the peak
1.8-2.2x, more than a laptop has. So by default the command line keeps freed memory only for runs whose attention
maps are small:

    ATTENTION_LAB_KEEP_FREED_MEMORY=auto (default) keep when batch x length^2 <= 2^19, i.e. one layer's attention
                                         maps stay under 32 MiB in fp32 at up to 16 heads (the largest block
                                         glibc itself moves onto its heap); a multiple-choice batch counts its
                                         questions, not its choices
    ATTENTION_LAB_KEEP_FREED_MEMORY=1    always keep (fast; needs memory to spare on long sequences)
    ATTENTION_LAB_KEEP_FREED_MEMORY=0    leave malloc as it is

Other C libraries (musl, macOS, Windows) have no `mallopt`; nothing changes there. A notebook's kernel is never
changed: only the command line and the benches call `keep_freed_memory`.
"""
from __future__ import annotations

import ctypes
import os
import sys

from course_lib.runtime.errors import choice_error

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h> parameter numbers
SETTING = "ATTENTION_LAB_KEEP_FREED_MEMORY"
NEVER = 2**31 - 1  # as a trim threshold: never trim
KEEP_CALLS = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, NEVER))  # the mallopt calls that keep freed memory, in order
MODES = ("auto", "1", "0")
AUTO_LIMIT = 2**19  # batch x length^2 up to which `auto` keeps: 2^19 x 16 heads x 4 bytes = 32 MiB

_kept = False


def memory_mode() -> str:
    """The mode $ATTENTION_LAB_KEEP_FREED_MEMORY asks for (default "auto"); an unknown value is a one-line error."""
    mode = os.environ.get(SETTING, "auto")
    if mode not in MODES:
        raise choice_error(SETTING, mode, MODES)
    return mode


def auto_keeps(batch_size: int | None, max_len: int | None) -> bool:
    """What `auto` picks for a run of this batch and length (None: not a training run, nothing kept)."""
    return batch_size is not None and max_len is not None and batch_size * max_len**2 <= AUTO_LIMIT


def wants_kept(batch_size: int | None = None, max_len: int | None = None) -> bool:
    """Whether the setting keeps freed memory for a run of this batch and length (None: not a training run)."""
    mode = memory_mode()
    return auto_keeps(batch_size, max_len) if mode == "auto" else mode == "1"


def keep_freed_memory(batch_size: int | None = None, max_len: int | None = None) -> bool:
    """Ask glibc's malloc to reuse freed memory when `wants_kept` says so; True when it now does. Idempotent."""
    global _kept
    if _kept or not sys.platform.startswith("linux") or not wants_kept(batch_size, max_len):
        return _kept
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _kept = all([bool(mallopt(param, value)) for param, value in KEEP_CALLS])
    return _kept
