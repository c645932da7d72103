"""Scaled dot-product attention with a pluggable row normaliser.

Attention (Vaswani et al. 2017, Eq. 1) is  A = normalise(Q K^T / sqrt(d_h) + M),  out = A V,  where M is an
additive mask/bias on the logits and `normalise` maps each row of scores (over the key axis) to a probability
vector. Softmax is the classic choice; later methods swap it (SSAF's sparsegen-lin) or change M (ASA).

Shapes: B batch, H heads, L sequence length, d_h head size. q, k, v are (B, H, L, d_h); the bias broadcasts
to (B, H, L, L).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from .errors import choice_error


def softmax(scores: torch.Tensor) -> torch.Tensor:
    """The classic normaliser, computed in fp32 so half-precision logits do not overflow."""
    return torch.softmax(scores.float(), dim=-1).to(scores.dtype)


NORMALIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"softmax": softmax}


def get_normalizer(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in NORMALIZERS:
        raise choice_error("attention normaliser", name, NORMALIZERS)
    return NORMALIZERS[name]


def attention_probs(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None,
                    normalizer: str = "softmax") -> torch.Tensor:
    """A = normalise(Q K^T / sqrt(d_h) + bias): the readable reference, (B, H, L, L)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, L, L)
    if bias is not None:
        scores = scores + bias
    return get_normalizer(normalizer)(scores)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
           normalizer: str = "softmax", dropout_p: float = 0.0,
           need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return (A V, A or None). A is the pre-dropout distribution, the one papers plot and losses use.

    When the maps are not needed and the normaliser is softmax, the fused kernel
    `torch.nn.functional.scaled_dot_product_attention` computes the same thing without materialising A.
    """
    if normalizer == "softmax" and not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p), None
    probs = attention_probs(q, k, bias, normalizer)
    return F.dropout(probs, dropout_p, training=dropout_p > 0) @ v, probs
