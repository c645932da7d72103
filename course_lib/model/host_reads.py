"""Where model code may branch on a tensor's values (`if x.any():`, `int(x.max())`).

On a CPU such a read costs nothing: the value is already in memory. On a GPU it makes the host wait for every
kernel queued before it, so it cannot queue the next step ahead, and neither a compiled graph nor a CUDA graph
can hold the branch. Model code that would read a value asks `may_branch` and, where it may not, takes a
branch-free path that computes the same function (a static shape, a mask, `torch.where`).
"""
from __future__ import annotations

import torch

READ_ON_CPU = True  # tests set it to False to run the accelerators' branch-free paths on a CPU


def may_branch(x: torch.Tensor) -> bool:
    """Whether code may read values of `x` on the host: on a CPU, outside `torch.compile`."""
    return READ_ON_CPU and x.device.type == "cpu" and not torch.compiler.is_compiling()
