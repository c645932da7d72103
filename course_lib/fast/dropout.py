"""Dropout (Srivastava et al. 2014) drawn from 16-bit random numbers.

Each kept value is scaled by 1 / (1 - p) so the expectation is unchanged. torch's dropout draws one
Bernoulli sample per element, which on a CPU costs more than the matmuls around attention dropout at
L = 128. Here one 64-bit random integer gives four 16-bit uniforms, compared with a threshold: the drop
probability is p rounded to a multiple of 1/65536 (0.1 → 0.100006), and the scale uses that exact value.
"""
from __future__ import annotations

import torch
from torch import nn

_LEVELS = 1 << 16


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.is_cuda:  # GPUs draw Bernoulli samples fast; keep torch's kernel there
        return nn.functional.dropout(x, p, training=True)
    drop_levels = round(p * _LEVELS)
    n = x.numel()
    with torch.no_grad():
        bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-2**63, 2**63 - 1)
        uniform16 = bits.view(torch.int16)[:n].view(x.shape)  # four independent 16-bit lanes per draw
        keep = uniform16 >= drop_levels - _LEVELS // 2
    return x * keep * (_LEVELS / (_LEVELS - drop_levels))


class Dropout(nn.Dropout):
    """`nn.Dropout` drawing from 16-bit lanes (`dropout` above): the same attributes, so `optimize` swaps it in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
