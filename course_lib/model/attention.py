"""Scaled dot-product attention with a pluggable row normaliser.

Attention (Vaswani et al. 2017, Eq. 1) is  A = normalise(Q K^T / sqrt(d_h) + M),  out = A V,  where M is an
additive mask/bias on the logits and `normalise` maps each row of scores (over the key axis) to a probability
vector. Softmax is the classic choice; SSAF (Cui et al. 2019) swaps in sparsegen-lin, ASA changes M.

Shapes: B batch, H heads, L sequence length, d_h head size. q, k, v are (B, H, L, d_h); the bias broadcasts
to (B, H, L, L). A bias may also be a `ScoreCut`, which replaces cut units' scores instead of shifting them.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.model.sparsemax import at_least_fp32, sparsegen_lin
from course_lib.runtime.errors import choice_error


def softmax(scores: torch.Tensor) -> torch.Tensor:
    """The classic normaliser, computed in at least fp32 so half-precision logits do not overflow (fp64 stays)."""
    return torch.softmax(at_least_fp32(scores), dim=-1).to(scores.dtype)


NORMALIZERS: dict[str, Callable[..., torch.Tensor]] = {"softmax": softmax, "sparsegen_lin": sparsegen_lin}


def get_normalizer(name: str, **params) -> Callable[[torch.Tensor], torch.Tensor]:
    """The row normaliser `name` with its parameters bound, e.g. get_normalizer("sparsegen_lin", lam=-4)."""
    if name not in NORMALIZERS:
        raise choice_error("attention normaliser", name, NORMALIZERS)
    return functools.partial(NORMALIZERS[name], **params) if params else NORMALIZERS[name]


@dataclass
class ScoreCut:
    """Attention units removed by replacing their score with `fill` rather than adding it: ASA's cut as the
    authors' code applies it (adversarialSA, modeling/bert.py: scores * 1[mask >= 0] + mask). A row whose every
    key is cut, padding included, then has equal logits and becomes uniform over all L positions, where an added
    bias would leave the row's softmax over its real keys unchanged. keep: 0/1, broadcasting to (B, H, Lq, L);
    its gradient flows through the `fill` term only, and no gradient reaches a cut unit's score."""

    keep: torch.Tensor
    fill: float = -1e4

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        keep = self.keep.to(scores.dtype)
        return scores * keep.detach() + (1.0 - keep) * self.fill

    def __getitem__(self, index) -> "ScoreCut":
        """The cut of some rows (a layer computed for the [CLS] row only slices its bias)."""
        return ScoreCut(self.keep[index], self.fill)


def _normalize_cut(normalize: Callable, cut: ScoreCut, scores: torch.Tensor) -> torch.Tensor:
    return normalize(cut(scores))


def attention_probs(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None,
                    normalize: Callable[[torch.Tensor], torch.Tensor] = softmax) -> torch.Tensor:
    """[q1a] Scaled dot-product attention weights with masking: A = normalise(Q K^T / sqrt(d_h) + bias).

    The readable reference (Vaswani et al. 2017, Eq. 1); `attend` uses it whenever the maps are needed.

    Hints:
      1. q and k are (B, H, L, d_h): Q K^T multiplies the last two axes and gives scores (B, H, L, L),
         row i holding query i's logit for every key j.
      2. Divide by sqrt(d_h), where d_h = q.shape[-1], so the logits' variance does not grow with the head size.
      3. bias is None or broadcasts to (B, H, L, L): padding keys carry a large negative logit (BertModel
         builds it from the attention mask), so adding it gives them (almost) zero weight.
      4. normalize maps each row of scores (the last axis, over keys) to a probability vector; call it last.

    Returns: A, (B, H, L, L).
    """
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, L, L)
    if bias is not None:
        scores = scores + bias
    return normalize(scores)
    ### END SOLUTION


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
           normalize: Callable[[torch.Tensor], torch.Tensor] = softmax, dropout: nn.Module | None = None,
           need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return (A V, A or None). A is the pre-dropout distribution, the one papers plot and losses use;
    `dropout` (an `nn.Dropout`, active in training mode) applies to A before it weighs the values.

    When the maps are not needed and the normaliser is softmax, the fused kernel
    `torch.nn.functional.scaled_dot_product_attention` computes the same thing without materialising A.
    """
    p = dropout.p if dropout is not None and dropout.training else 0.0
    # On a CPU, SDPA with dropout falls back to an unfused path; the module's own dropout is as fast or faster.
    fused = normalize is softmax and not isinstance(bias, ScoreCut)
    if fused and not need_weights and (p == 0.0 or q.is_cuda):
        if bias is not None and bias.dtype != q.dtype:  # under autocast q is half precision, the mask fp32
            bias = bias.to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p), None
    if isinstance(bias, ScoreCut):  # the cut edits the scores before the normaliser sees them
        normalize, bias = functools.partial(_normalize_cut, normalize, bias), None
    probs = attention_probs(q, k, bias, normalize)
    return (dropout(probs) if p else probs) @ v, probs


def sparsity(probs: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Fraction of exact zeros per head among real (query, key) pairs: (B, H, L, L) maps → (H,)."""
    zeros = (probs == 0).float()
    if attention_mask is None:
        return zeros.mean(dim=(0, 2, 3))
    real = attention_mask.float()
    pairs = real[:, None, :, None] * real[:, None, None, :]  # (B, 1, L, L)
    return (zeros * pairs).sum(dim=(0, 2, 3)) / pairs.sum()
