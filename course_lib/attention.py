"""Scaled dot-product attention with a pluggable row normaliser.

Attention (Vaswani et al. 2017, Eq. 1) is  A = normalise(Q K^T / sqrt(d_h) + M),  out = A V,  where M is an
additive mask/bias on the logits and `normalise` maps each row of scores (over the key axis) to a probability
vector. Softmax is the classic choice; SSAF (Cui et al. 2019) swaps in sparsegen-lin, ASA changes M.

Shapes: B batch, H heads, L sequence length, d_h head size. q, k, v are (B, H, L, d_h); the bias broadcasts
to (B, H, L, L).
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import torch
import torch.nn.functional as F

from .dropout import dropout
from .errors import UsageError, choice_error

MASK_FLOOR = -1e4  # logits below this are masked keys: classic BERT's -10000, kept finite for sorting


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """Upcast half precision for sums and sorts that lose accuracy there; leave fp32/fp64 alone."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def softmax(scores: torch.Tensor) -> torch.Tensor:
    """The classic normaliser, computed in fp32 so half-precision logits do not overflow."""
    return torch.softmax(scores.float(), dim=-1).to(scores.dtype)


class _Sparsemax(torch.autograd.Function):
    """sparsemax(z) = argmin_{p in simplex} ||p - z||^2 (Martins & Astudillo 2016), with its closed-form VJP."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, dim: int) -> torch.Tensor:
        z = z - z.amax(dim, keepdim=True)  # translation invariant; keeps the cumulative sums small
        z_sorted = z.sort(dim, descending=True).values
        cumsum = z_sorted.cumsum(dim) - 1
        shape = [1] * z.ndim
        shape[dim] = -1
        k = torch.arange(1, z.shape[dim] + 1, device=z.device, dtype=z.dtype).view(shape)
        support_size = (k * z_sorted > cumsum).sum(dim, keepdim=True)  # the strict support condition, >= 1
        tau = cumsum.gather(dim, support_size - 1) / support_size.to(z.dtype)
        p = (z - tau).clamp_min(0)
        ctx.dim = dim
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """J = diag(s) - s s^T / |S|, so J^T g = s * (g - mean of g over the support S)."""
        (p,) = ctx.saved_tensors
        support = p > 0
        g = grad * support
        mean = g.sum(ctx.dim, keepdim=True) / support.sum(ctx.dim, keepdim=True)
        return torch.where(support, grad - mean, 0.0), None


def sparsegen_lin(scores: torch.Tensor, lam: float, dim: int = -1) -> torch.Tensor:
    """sparsegen-lin (Laha et al. 2018; SSAF, Cui et al. 2019, Eq. 7): argmin_p ||p - e||^2 - lam ||p||^2.

    It equals sparsemax(e / (1 - lam)): lam = 0 is sparsemax, larger lam is sparser, lam -> -inf tends to
    uniform. Exact (sort-based), computed in fp32 under mixed precision; masked logits (<= MASK_FLOOR) get
    exactly 0, and a fully masked row becomes uniform instead of NaN.
    """
    if not lam < 1:
        raise UsageError(f"sparsegen_lambda must be < 1 (the problem is strongly convex only then), got {lam!r}")
    return _Sparsemax.apply(at_least_fp32(scores).clamp_min(MASK_FLOOR) / (1.0 - lam), dim).to(scores.dtype)


NORMALIZERS: dict[str, Callable[..., torch.Tensor]] = {"softmax": softmax, "sparsegen_lin": sparsegen_lin}


def get_normalizer(name: str, **params) -> Callable[[torch.Tensor], torch.Tensor]:
    """The row normaliser `name` with its parameters bound, e.g. get_normalizer("sparsegen_lin", lam=-4)."""
    if name not in NORMALIZERS:
        raise choice_error("attention normaliser", name, NORMALIZERS)
    return functools.partial(NORMALIZERS[name], **params) if params else NORMALIZERS[name]


def attention_probs(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None,
                    normalize: Callable[[torch.Tensor], torch.Tensor] = softmax) -> torch.Tensor:
    """A = normalise(Q K^T / sqrt(d_h) + bias): the readable reference, (B, H, L, L)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, L, L)
    if bias is not None:
        scores = scores + bias
    return normalize(scores)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
           normalize: Callable[[torch.Tensor], torch.Tensor] = softmax, dropout_p: float = 0.0,
           need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return (A V, A or None). A is the pre-dropout distribution, the one papers plot and losses use.

    When the maps are not needed and the normaliser is softmax, the fused kernel
    `torch.nn.functional.scaled_dot_product_attention` computes the same thing without materialising A.
    """
    # On a CPU, SDPA with dropout falls back to an unfused path with a slow Bernoulli draw: ours is faster.
    if normalize is softmax and not need_weights and (dropout_p == 0.0 or q.is_cuda):
        if bias is not None and bias.dtype != q.dtype:  # under autocast q is half precision, the mask fp32
            bias = bias.to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p), None
    probs = attention_probs(q, k, bias, normalize)
    return dropout(probs, dropout_p) @ v, probs


def sparsity(probs: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Fraction of exact zeros per head among real (query, key) pairs: (B, H, L, L) maps → (H,)."""
    zeros = (probs == 0).float()
    if attention_mask is None:
        return zeros.mean(dim=(0, 2, 3))
    real = attention_mask.float()
    pairs = real[:, None, :, None] * real[:, None, None, :]  # (B, 1, L, L)
    return (zeros * pairs).sum(dim=(0, 2, 3)) / pairs.sum()
