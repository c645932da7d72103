"""AG: attention guidance (Deshpande & Narasimhan, "Guiding Attention for Self-Supervised Learning with
Transformers", Findings of EMNLP 2020).

Pre-training adds an auxiliary loss that pulls some heads towards fixed attention patterns:

    L = L_MLM + alpha_t · L_AG,     L_AG = sum over guided (layer k, head j) of ||H_kj - P_j||²_F

H_kj is the (L, L) attention map of head j in layer k and P_j the pattern given to head index j, the same in
every layer; all layers are guided and gradients reach every parameter. alpha_t decays linearly to 0.

Paper text versus the authors' code (trainer_ag.py), and what we do (docs/methods.md, section 4, AG):
- reduction: the code takes a mean squared error per pattern type; the paper writes a Frobenius sum.
  `ag_reduction="mean"` (code, default; the only scale at which alpha_0 in {1, 10, 100} makes sense) or
  `"frobenius"` (paper).
- boundary rows: [Next] has nowhere to look from the last token, [Prev] from the first. The paper makes that
  row uniform, the code leaves it all zero: `ag_boundary="uniform"` (paper, default) or `"zero"` (code).
- padding: the code builds the patterns at the padded length without a mask; we build them per example
  from the attention mask, and padded rows and columns are left out of the loss.
- the code's first head type is identity (attend to self), which the paper never mentions; it is kept so
  that `ag_head_types="0,1,1,4"` means what it means there.
- [Delim] and [Period] are defined in the paper's Appendix A.2, which we do not have, and not in the code.
  Ours: uniform over the delimiter ([CLS], [SEP]) or '.' positions of the example, [First] if there are none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

import torch
from pydantic import Field

from course_lib.model.attention import at_least_fp32
from course_lib.runtime.errors import UsageError, choice_error
from course_lib.runtime.settings import Settings

PATTERNS = ("identity", "next", "prev", "first", "delim", "period")  # counts in this order, as the code's
BOUNDARIES = ("uniform", "zero")
REDUCTIONS = ("mean", "frobenius")


class GuidanceOptions(Settings):
    """The patterns a pre-training run's heads are scored against on the held-out blocks (an MLM run's too: how
    far its unguided heads are from them) and that AG trains them towards."""

    ag_head_types: str = Field("0,1,1,4", description="head counts for identity,next,prev,first[,delim,period], or "
                               "names")
    ag_reduction: Literal[REDUCTIONS] = Field("mean", description="mean (authors' code) | frobenius (paper)")
    ag_boundary: Literal[BOUNDARIES] = Field("uniform", description="last [Next] / first [Prev] row uniform (paper) | "
                                             "zero (code)")

    def check_heads(self, num_heads: int) -> None:
        """The one-line error when ag_head_types guides more heads than the model has."""
        assign_heads(self.ag_head_types, num_heads)


class AGOptions(GuidanceOptions):
    """AG's options: the patterns, and the weight alpha_t of L_AG in the training loss."""

    ag_scale: float = Field(10.0, description="alpha_0 (paper: 10 for 12/16 layers, 100 for 8; code default 10)", ge=0)
    ag_plateau_steps: int = Field(0, description="steps at alpha_0 before the linear decay (the code: 20000)", ge=0)


@dataclass(frozen=True)
class HeadGroup:
    """Heads [start, stop) of every layer, all guided towards one pattern."""

    pattern: str
    start: int
    stop: int

    @property
    def heads(self) -> slice:
        return slice(self.start, self.stop)

    @property
    def size(self) -> int:
        return self.stop - self.start


def assign_heads(ag_head_types: str, num_heads: int) -> tuple[HeadGroup, ...]:
    """Parse `ag_head_types` into consecutive head groups from head 0, as `--attn_head_types` in the code.

    Two spellings: counts in the order of PATTERNS ("0,1,1,4" = 0 identity, 1 next, 1 prev, 4 first heads:
    head 0 next, head 1 prev, heads 2-5 first; the code's default and the paper's lambda = 1/2 for 12 heads),
    or named counts in head order ("next,prev,first:4,period"; a bare name counts 1).
    """
    items = [item.strip() for item in ag_head_types.split(",")]
    if all(item.isdigit() for item in items):
        if len(items) > len(PATTERNS):
            raise UsageError(f"ag_head_types {ag_head_types!r} has {len(items)} counts; at most {len(PATTERNS)} "
                             f"({', '.join(PATTERNS)})")
        counts = list(zip(PATTERNS, map(int, items)))
    else:
        counts = []
        for item in items:
            name, _, count = item.partition(":")
            if name not in PATTERNS:
                raise choice_error("AG pattern", name, PATTERNS)
            if count and not count.isdigit():
                raise UsageError(f"ag_head_types item {item!r}: the count after ':' must be a whole number")
            counts.append((name, int(count) if count else 1))
    groups, start = [], 0
    for pattern, count in counts:
        if count:
            groups.append(HeadGroup(pattern, start, start + count))
            start += count
    if not groups:
        raise UsageError(f"ag_head_types {ag_head_types!r} guides no head (e.g. '0,1,1,4' or 'next,prev,first:4')")
    if start > num_heads:
        raise UsageError(f"ag_head_types {ag_head_types!r} guides {start} heads but the model has {num_heads}")
    return tuple(groups)


def ag_targets(pattern: str, attention_mask: torch.Tensor, input_ids: torch.Tensor | None = None,
               token_ids: Iterable[int] = (), ag_boundary: str = "uniform") -> torch.Tensor:
    """The target pattern P of every example: (B, L) mask (1 = real token) → (B, L, L), rows = queries.

    Positions count real tokens only, so the patterns do not depend on where the padding is; rows and
    columns of padding are all zero. `token_ids` are the ids [Delim] or [Period] attend to (needs input_ids).
    """
    if pattern not in PATTERNS:
        raise choice_error("AG pattern", pattern, PATTERNS)
    if ag_boundary not in BOUNDARIES:
        raise choice_error("ag_boundary", ag_boundary, BOUNDARIES)
    valid = attention_mask.bool()  # (B, L)
    dtype = torch.float32
    rank = valid.long().cumsum(-1) - 1  # index among real tokens, (B, L)
    n = valid.sum(-1)  # real length, (B,)
    rows = valid[:, :, None]  # (B, L, 1): real queries
    pairs = rows & valid[:, None, :]  # (B, L, L): real (query, key) pairs
    uniform = valid[:, None, :].to(dtype) / n.clamp_min(1)[:, None, None]  # (B, 1, L): 1/n on real keys
    first = (rows & (valid & (rank == 0))[:, None, :]).to(dtype)
    if pattern == "first":
        return first
    if pattern == "identity":
        return (pairs & (rank[:, :, None] == rank[:, None, :])).to(dtype)
    if pattern in ("next", "prev"):
        step, edge = (1, n[:, None] - 1) if pattern == "next" else (-1, torch.zeros_like(n)[:, None])
        target = (pairs & (rank[:, None, :] == rank[:, :, None] + step)).to(dtype)
        if ag_boundary == "uniform":  # the last (next) or first (prev) real token has no neighbour there
            target = target + (valid & (rank == edge))[:, :, None].to(dtype) * uniform
        return target
    if input_ids is None:
        raise ValueError(f"the {pattern} pattern depends on the tokens: pass input_ids")
    ids = torch.tensor(sorted(set(token_ids)), dtype=input_ids.dtype, device=input_ids.device)
    hits = valid & torch.isin(input_ids, ids)  # (B, L): the delimiter or period positions D
    spread = hits[:, None, :].to(dtype) / hits.sum(-1).clamp_min(1)[:, None, None]  # (B, 1, L): 1/|D| on D
    return torch.where(hits.any(-1)[:, None, None], rows.to(dtype) * spread, first)


def ag_scale_at(step: int, total_steps: int, ag_scale: float, ag_plateau_steps: int = 0) -> float:
    """alpha_t: alpha_0 for the plateau, then linear to 0 at the last step (the code's schedule).

    factor = max(0, (T - t) / max(1, T - plateau)) for t >= plateau (trainer_ag.py uses plateau = 20000,
    so a run of T <= 20000 steps never decays); plateau 0 is the paper's plain linear decay.
    """
    if step < ag_plateau_steps:
        return ag_scale
    return ag_scale * max(0.0, (total_steps - step) / max(1, total_steps - ag_plateau_steps))


class AttentionGuidance:
    """L_AG of one forward pass: builds each batch's targets and scores the guided heads against them."""

    def __init__(self, num_heads: int, ag_head_types: str = "0,1,1,4", ag_reduction: str = "mean",
                 ag_boundary: str = "uniform", delimiter_ids: Iterable[int] = (), period_ids: Iterable[int] = ()):
        if ag_reduction not in REDUCTIONS:
            raise choice_error("ag_reduction", ag_reduction, REDUCTIONS)
        if ag_boundary not in BOUNDARIES:
            raise choice_error("ag_boundary", ag_boundary, BOUNDARIES)
        self.groups = assign_heads(ag_head_types, num_heads)
        self.reduction, self.boundary = ag_reduction, ag_boundary
        self.token_ids = {"delim": tuple(delimiter_ids), "period": tuple(period_ids)}
        for pattern, ids in self.token_ids.items():
            if not ids and any(g.pattern == pattern for g in self.groups):
                raise UsageError(f"the {pattern} pattern needs the ids of its tokens ({pattern}_ids)")

    def targets(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """One (B, L, L) target per pattern in use; built once per batch and shared by every layer."""
        return {g.pattern: ag_targets(g.pattern, attention_mask, input_ids, self.token_ids.get(g.pattern, ()),
                                      self.boundary) for g in self.groups}

    def loss(self, attentions: Sequence[torch.Tensor], input_ids: torch.Tensor,
             attention_mask: torch.Tensor) -> torch.Tensor:
        """[q3d] The attention-guidance loss L_AG, summed over layers and head groups, each group reduced as
        `ag_reduction` says.

        mean: squared error averaged over the group's real (query, key) entries, h·sum_b n_b² of them (the
        code's MSELoss over B·h·n·n when nothing is padded); frobenius: ||H - P||²_F summed over the group's
        heads, averaged over the batch (the paper's per-example sum). Both are summed over layers and groups.

        Shapes: attentions, one (B, H, L, L) map per layer; input_ids and attention_mask (B, L);
        targets[pattern] (B, L, L), the same for every layer and every head of the group.

        Hints:
          1. pairs (B, 1, L, L) = 1 where both the query and the key are real tokens: only those entries count.
          2. For each layer and each group g in self.groups: take the group's heads probs[:, g.heads]
             (B, h, L, L), upcast with at_least_fp32, and sum the squared error to targets[g.pattern][:, None]
             over the real pairs.
          3. "mean": divide by g.size · pairs.sum(); "frobenius": divide by the batch size B.
          4. Start from a float32 zero, attentions[0].new_zeros((), dtype=torch.float32), and return the
             scalar sum.
        """
        targets = self.targets(input_ids, attention_mask)
        ### BEGIN SOLUTION
        valid = attention_mask.bool()
        pairs = (valid[:, :, None] & valid[:, None, :]).float()[:, None]  # (B, 1, L, L)
        total = attentions[0].new_zeros((), dtype=torch.float32)
        for probs in attentions:  # (B, H, L, L) per layer
            for g in self.groups:
                guided = at_least_fp32(probs[:, g.heads])  # (B, h, L, L): only these heads enter the loss
                squared = ((guided - targets[g.pattern][:, None]) ** 2 * pairs).sum()
                if self.reduction == "mean":
                    total = total + squared / (g.size * pairs.sum())
                else:
                    total = total + squared / probs.shape[0]
        return total
        ### END SOLUTION


class GuidedObjective:
    """AG's term of the pre-training loss, alpha_t · L_AG, which the pre-training job adds to L_MLM, and what a
    run logs of it: L_AG's mean over each logging window and alpha_t at the window's end."""

    def __init__(self, options: AGOptions, guidance: AttentionGuidance, max_steps: int):
        self.options, self.guidance, self.max_steps = options, guidance, max_steps

    def loss(self, step: int, output, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """(alpha_t · L_AG, the record a logging window sums); `output` holds every layer's attention maps."""
        alpha = ag_scale_at(step, self.max_steps, self.options.ag_scale, self.options.ag_plateau_steps)
        ag = self.guidance.loss(output.attentions, input_ids, attention_mask)
        return alpha * ag, {"ag": ag, "alpha": alpha}

    def add_to_window(self, totals, state: dict, record: dict, taken) -> None:
        """Add L_AG to the window's sum on the device (`totals`: the loop's DeviceTotals); alpha_t is a number."""
        totals.add(state, ("window", "ag"), record["ag"], taken)
        state["window"]["alpha"] = record["alpha"]

    def summary(self, window: dict) -> dict:
        return {"ag_loss": window["ag"] / window["steps"], "ag_alpha": window["alpha"]}
