"""sparsemax and sparsegen-lin: row normalisers that give exact zeros (SSAF's attention, Cui et al. 2019).

sparsemax (Martins & Astudillo 2016) is the Euclidean projection of a row of scores onto the probability
simplex: p = max(z - tau, 0) with the threshold tau chosen so that p sums to 1. sparsegen-lin (Laha et al. 2018)
is sparsemax of the scores scaled by 1 / (1 - lambda). `course_lib.model.attention` offers it as a normaliser by
name; this module holds the mathematics, its vector-Jacobian product, and the partial sort that makes it fast.
"""
from __future__ import annotations

import math

import torch

from course_lib.model.host_reads import may_branch
from course_lib.runtime.errors import UsageError


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """Upcast half precision for sums and sorts that lose accuracy there; leave fp32/fp64 alone."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def sparsemax_forward(z: torch.Tensor, dim: int) -> torch.Tensor:
    """[q3a] sparsemax(z) = argmin_{p in simplex} ||p - z||^2 along `dim` (Martins & Astudillo 2016, Alg. 1).

    The solution is p = max(z - tau, 0), with the threshold tau chosen so that p sums to 1.

    Hints:
      1. Subtract the maximum along `dim` first: sparsemax is translation invariant and the sums stay small.
      2. Sort z along `dim` in descending order, z_(1) >= z_(2) >= ..., and take cumulative sums c_k - 1.
      3. The support size is K = #{k : k · z_(k) > c_k - 1} (always >= 1); build k = 1..n as a tensor shaped
         to broadcast along `dim` (1 everywhere except n at `dim`).
      4. tau = (c_K - 1) / K: `gather` picks entry K - 1 of the cumulative sums along `dim`.
      5. Return (z - tau) clamped at 0: same shape as z, and every slice along `dim` sums to 1.
    """
    ### BEGIN SOLUTION
    z = z - z.amax(dim, keepdim=True)  # translation invariant; keeps the cumulative sums small
    z_sorted = z.sort(dim, descending=True).values
    cumsum = z_sorted.cumsum(dim) - 1
    shape = [1] * z.ndim
    shape[dim] = -1
    k = torch.arange(1, z.shape[dim] + 1, device=z.device, dtype=z.dtype).view(shape)
    support_size = (k * z_sorted > cumsum).sum(dim, keepdim=True)  # the strict support condition, >= 1
    tau = cumsum.gather(dim, support_size - 1) / support_size.to(z.dtype)
    return (z - tau).clamp_min(0)
    ### END SOLUTION


def sparsemax_backward(p: torch.Tensor, grad: torch.Tensor, dim: int) -> torch.Tensor:
    """[q3a] The vector-Jacobian product of sparsemax, from its output p (Martins & Astudillo 2016).

    On the support S = {i : p_i > 0} the Jacobian is J = diag(s) - s s^T / |S| (s the 0/1 indicator of S).

    Hints:
      1. J is symmetric, so J^T g = J g: inside S it is g_i minus the mean of g over S, outside S it is 0.
      2. The mean over S is (sum of g over S) / |S|, both along `dim` with keepdim=True.
      3. Return a tensor shaped like grad, exactly 0 outside S. Keep s as a float tensor (p >= 0, so p.sign()
         is s): on a CPU, float products are several times faster than boolean masks with torch.where.
    """
    ### BEGIN SOLUTION
    s = p.sign()  # (..., n): the 0/1 indicator of S, as floats
    g = grad * s
    mean = g.sum(dim, keepdim=True) / s.sum(dim, keepdim=True)
    return torch.addcmul(g, s, mean, value=-1)  # s * (g - mean)
    ### END SOLUTION


SPARSEMAX_TOP_K = 16  # keys per row that sparsemax's threshold is first sought among (see _sparsemax_threshold)


def _sparsemax_threshold(z: torch.Tensor, k: int = SPARSEMAX_TOP_K) -> torch.Tensor:
    """sparsemax's tau for each row of z (rows along the last axis), from the row's k largest entries: (..., 1).

    The support is always the |S| largest entries, so sparsemax of the top-k sub-vector has the same tau as
    the whole row whenever its own solution gives the k-th entry 0: the entries left out are no larger, so
    they get 0 too and the KKT conditions hold for the whole row. Rows where the k-th entry is still positive
    are redone with 4k entries, up to the full row. Exact, like the full sort, but a top-k is a partial sort:
    at L = 128, forward + backward run about 2.5 times faster than with a full sort (`python -m benchmarks sparsemax`).
    The redo is a branch on the data, so on an accelerator (`may_branch`) every row is sorted whole instead.
    """
    n = z.shape[-1]
    k = min(k, n) if may_branch(z) else n
    top = z.topk(k, dim=-1).values  # (..., k), descending
    p_top = sparsemax_forward(top, -1)
    tau = top[..., :1] - p_top[..., :1]  # the largest entry is always in the support: p_1 = z_1 - tau
    if k < n:
        redo = p_top[..., -1] > 0  # (...): the support may reach past the k-th entry
        if redo.any():
            tau[redo] = _sparsemax_threshold(z[redo], 4 * k)
    return tau


class _SparsegenLin(torch.autograd.Function):
    """sparsemax((e - max e) / temperature) with its closed-form VJP (`sparsemax_backward`), clamp-free.

    sparsemax is translation invariant (Martins & Astudillo 2016, Prop. 2), so subtracting each row's maximum
    changes nothing, yet it puts the maximum at 0 and tau in [-1, 0): every logit keeps its exact offset from
    the top one however large or small the scores are. Masked keys need no floor: -inf (or finfo.min far
    below the row's maximum) lands far below tau and gets exactly 0 weight and, being outside the support,
    0 gradient. Only rows whose maximum is not finite are special (`_nonfinite_rows`).
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, dim: int, temperature: float) -> torch.Tensor:
        row_max = scores.amax(dim, keepdim=True)  # (..., 1, ...): NaN/+inf if a row holds one, -inf if all masked
        masked_rows, nan_rows = _nonfinite_rows(row_max)
        z = scores - row_max  # one fresh tensor, so the steps below may work in place
        if masked_rows is not None:
            z.masked_fill_(masked_rows | nan_rows, 0.0)  # all-equal logits: sparsemax is uniform there
        if temperature != 1.0:
            z.div_(temperature)
        tau = _sparsemax_threshold(z.movedim(dim, -1)).movedim(-1, dim)  # (..., 1, ...) along dim
        p = z.sub_(tau).clamp_min_(0)
        if nan_rows is not None:
            p.masked_fill_(nan_rows, math.nan)
        ctx.masked_rows, ctx.dim, ctx.temperature = masked_rows, dim, temperature
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (p,) = ctx.saved_tensors
        grad_scores = sparsemax_backward(p, grad, ctx.dim)
        if ctx.temperature != 1.0:
            grad_scores = grad_scores / ctx.temperature
        if ctx.masked_rows is not None:  # -inf logits are constants: no gradient, even where the row is uniform
            grad_scores = grad_scores.masked_fill(ctx.masked_rows, 0.0)
        return grad_scores, None, None


def _nonfinite_rows(row_max: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(fully masked rows, NaN rows): boolean masks shaped like row_max, or (None, None) if every max is finite.

    A row whose maximum is -inf has every key masked: subtracting the maximum would give -inf - (-inf) = NaN, so
    it becomes uniform instead, the limit of sparsemax(c, ..., c) as c -> -inf. A NaN or +inf maximum means a
    real logit is broken: that row is NaN (not an exception from the threshold search), so the loss turns
    non-finite and the training loop's non-finite guard can act. The checks run on one value per row; the
    all-finite shortcut is taken where the code may branch on values (`may_branch`), the masks kept elsewhere.
    """
    finite = torch.isfinite(row_max)
    if may_branch(row_max) and bool(finite.all()):
        return None, None
    masked_rows = row_max == -math.inf
    return masked_rows, ~finite & ~masked_rows


def sparsegen_lin(scores: torch.Tensor, lam: float, dim: int = -1) -> torch.Tensor:
    """sparsegen-lin (Laha et al. 2018; SSAF, Cui et al. 2019, Eq. 7): argmin_p ||p - e||^2 - lam ||p||^2.

    It equals sparsemax(e / (1 - lam)): lam = 0 is sparsemax, larger lam is sparser, lam -> -inf tends to
    uniform. Exact at every scale (a partial sort, `_sparsemax_threshold`, after subtracting the row maximum),
    computed in fp32 under mixed precision. Masked keys get exactly 0 weight and 0 gradient: -inf ones whenever
    the row has a finite logit, finite ones (BertModel's finfo.min padding) whenever it has a real key, far
    above them. A fully masked row (all -inf, or all finfo.min) is uniform instead of NaN; a row holding NaN
    or +inf comes out NaN rather than raising, so the loss turns non-finite and the loop's guard acts.
    """
    if not lam < 1:
        raise UsageError(f"sparsegen_lambda must be < 1 (the problem is strongly convex only then), got {lam!r}")
    return _SparsegenLin.apply(at_least_fp32(scores), dim, 1.0 - lam).to(scores.dtype)
