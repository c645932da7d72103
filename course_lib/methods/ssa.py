"""SSA: self-supervised attention (Kou et al. 2020), and the BERT-mask augmentation baseline.

Each epoch, the current model probes which tokens matter: it classifies a sentence and a copy with a few
wordpieces replaced by [MASK]. If the prediction survives (and was right), the masked tokens evidently did
not matter. Those judgements become per-token labels for an auxiliary token head trained alongside the task
(SSA-Co). SSA-Hybrid also pools the final hidden states by the token head's importance scores (paper Eq. 1).

Defaults follow the authors' code where it differs from the paper (docs/methods.md, section 1, SSA):
labels are generated at the start of every epoch with the current weights; a qualifying probe labels its
masked tokens 0 and every other real token 1 (`ssa_label_mode="code"`; "paper" labels masked tokens 1 when
the prediction flips, 0 when it holds, and ignores the rest); the model trains on the original sentence; the
share of the epoch replaced by labelled copies ramps 0, .2, .4, .6, .8 (`aug_ratio`).
"""
from __future__ import annotations

import math
import random
from typing import Callable, Literal, NamedTuple

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from course_lib.model.heads import ClassifierOutput, SequenceClassifier
from course_lib.runtime.settings import Settings
from course_lib.tasks.batching import special_token_ids

IGNORE = -1  # token label of [CLS], [SEP], padding and (paper mode) unmasked tokens
RAMP_STEP, RAMP_MAX = 0.2, 0.8  # the code's aug_ratio_each and its ceiling


def aug_ratio(epoch: int) -> float:
    """Share of an epoch's examples replaced by probed copies: 0, .2, .4, .6, .8, .8, ... (0-based epoch)."""
    return round(min(RAMP_STEP * epoch, RAMP_MAX), 6)


def _bert_init(dense: nn.Linear, positions: int) -> torch.Tensor:
    nn.init.normal_(dense.weight, std=0.02)
    nn.init.zeros_(dense.bias)
    return torch.randn(positions, 2, dense.in_features) * 0.02


def _torch_init(dense: nn.Linear, positions: int) -> torch.Tensor:
    return (torch.randn(2, dense.in_features) * 0.02).repeat(positions, 1, 1)


# How the token head starts (`ssa_head_init`). bert: the authors' (init_bert_weights over BertTokenAug, ssa_BERT
# modeling.py): the dense layer N(0, 0.02) with zero bias, and every position's output layer its own N(0, 0.02)
# draw. torch: this project's first reading: PyTorch's default init of the dense layer, one output draw that
# every position copies. Returns the output weights for `positions` positions, (positions, 2, d).
HEAD_INITS = {"bert": _bert_init, "torch": _torch_init}


class TokenHead(nn.Module):
    """Per-token importance logits (B, L, 2): dense → GELU → LayerNorm, then a 2-way output.

    shared=True uses one output layer at every position (like BERT's MLM head); shared=False gives each
    position index its own (the paper's w^i_SSA; the authors use it for RTE and STS-B).
    """

    def __init__(self, hidden_size: int, max_len: int, eps: float = 1e-12, shared: bool = True,
                 init: str = "bert"):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        self.shared = shared
        weight = HEAD_INITS[init](self.dense, 1 if shared else max_len)  # (n, 2, d)
        self.weight = nn.Parameter(weight[0] if shared else weight)  # (2, d) or (L_max, 2, d)
        self.bias = nn.Parameter(torch.zeros(2))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.dense(hidden)))  # (B, L, d)
        if self.shared:
            return h @ self.weight.T + self.bias
        return torch.einsum("bld,lkd->blk", h, self.weight[: h.shape[1]])  # no bias, as in the authors' code


class SSAClassifier(SequenceClassifier):
    """SSA-Co (`hybrid=False`) or SSA-Hybrid: the task head plus the token head, trained jointly with
    loss = ssa_target_weight · L_target + (1 - ssa_target_weight) · L_SSA (paper's alpha; code w = 1 - alpha)."""

    def __init__(self, encoder, num_labels: int, dropout: float, special_ids: list[int], max_len: int,
                 hybrid: bool = False, ssa_target_weight: float = 0.7, ssa_cls_weight: float = 0.5,
                 ssa_threshold: float = 0.3, ssa_share_weight: bool = True, ssa_head_init: str = "bert"):
        super().__init__(encoder, num_labels, dropout)
        cfg = encoder.config
        self.token_head = TokenHead(cfg.hidden_size, max_len, cfg.layer_norm_eps, ssa_share_weight, ssa_head_init)
        self.register_buffer("special_ids", torch.tensor(special_ids), persistent=False)
        self.hybrid, self.target_weight = hybrid, ssa_target_weight
        self.cls_weight, self.threshold = ssa_cls_weight, ssa_threshold

    def token_scores(self, token_logits: torch.Tensor) -> torch.Tensor:
        """s_i = P(token i is important) from the token head: (B, L) in [0, 1]."""
        return token_logits.float().softmax(-1)[..., 1]

    def pool(self, hidden, pooled, scores, input_ids, attention_mask) -> torch.Tensor:
        """[q3c] The SSA pooling layer (Eq. 1 as released): beta·P + (1 - beta)·Σ_i a_i H_i.

        The weights are a = softmax_i(s_i - 1e4·[not kept]). Kept: real, non-special tokens with
        s_i >= threshold. The softmax runs over probabilities, so kept weights differ by at most
        e^(1 - threshold): nearly a mean over the important tokens. A row with no kept token falls back to
        beta = 1 (the pooled output alone) instead of averaging over padding.

        Shapes: hidden (B, L, d) final hidden states H; pooled (B, d) BERT's pooler output P; scores (B, L)
        token importances s in [0, 1]; input_ids (B, L); attention_mask (B, L), 1 = real token, or None.

        Hints:
          1. kept (B, L) = real & not special & (scores >= self.threshold); special ids are in
             self.special_ids (torch.isin), and attention_mask None means every token is real.
          2. a = softmax over L of scores - 1e4 on the tokens that are not kept.
          3. The context Σ_i a_i H_i is (B, d): a batched weighted sum (einsum "bl,bld->bd"); cast a to
             hidden's dtype first.
          4. beta is self.cls_weight in rows with at least one kept token, 1.0 elsewhere: shape (B, 1).
        """
        ### BEGIN SOLUTION
        real = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        kept = real & ~torch.isin(input_ids, self.special_ids) & (scores >= self.threshold)  # (B, L)
        weights = torch.softmax(scores + (~kept) * -1e4, dim=-1)  # (B, L)
        context = torch.einsum("bl,bld->bd", weights.to(hidden.dtype), hidden)  # (B, d)
        beta = torch.full((len(kept), 1), self.cls_weight, dtype=hidden.dtype, device=hidden.device)
        beta = beta.masked_fill(~kept.any(-1, keepdim=True), 1.0)  # beta in hidden's dtype: 0.9 stays 0.9 in fp64
        return beta * pooled + (1 - beta) * context
        ### END SOLUTION

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                token_labels=None) -> ClassifierOutput:
        out = self.encoder(input_ids, attention_mask, token_type_ids)
        token_logits = self.token_head(out.last_hidden_state)  # (B, L, 2)
        if self.hybrid:  # no dropout on this path, as released
            pooled = self.pool(out.last_hidden_state, out.pooler_output, self.token_scores(token_logits),
                               input_ids, attention_mask)
            logits = self.classifier(pooled)
        else:
            logits = self.classifier(self.dropout(out.pooler_output))
        result = ClassifierOutput(logits, token_logits=token_logits)
        if labels is not None:
            loss = self.loss(logits, labels)
            if token_labels is not None:  # a batch without a labelled token keeps the task loss alone
                labelled = (token_labels != IGNORE).any()  # on the device: no branch waits for it
                ssa_loss = F.cross_entropy(token_logits.float().flatten(0, 1), token_labels.flatten(),
                                           ignore_index=IGNORE)  # NaN without a labelled token, then not used
                loss = torch.where(labelled, self.target_weight * loss + (1 - self.target_weight) * ssa_loss, loss)
                result.stats = {"ssa_loss": (torch.where(labelled, ssa_loss.detach(), 0.0), labelled)}
            result.loss = loss
        return result


def mask_positions(segments: list[range], rng: random.Random, trigger_p: float = 0.1,
                   long_span_p: float = 0.7) -> set[int]:
    """This project's first sampler (`ssa_sampler="rounded"`), shaped like the authors': per segment, each
    position triggers, with probability `trigger_p`, a cut at a random index r of its own quartile of the
    segment; the cut masks r, r-1, ... backwards for a span of 3 (u > 0.7), 2 (0.4 < u <= 0.7) or 1 wordpieces.
    Quartile bounds are rounded and never narrower than one position, so about 16% of wordpieces are masked
    whatever the segment's length; the authors' sampler (`authors_mask_positions`) masks less on short ones."""
    masked: set[int] = set()
    for seg in segments:
        n = len(seg)
        if n == 0:
            continue
        bounds = [0, *(round(n * q) for q in (0.25, 0.5, 0.75)), n]
        for i in range(n):
            if rng.random() >= trigger_p:
                continue
            quartile = max(q for q in range(4) if bounds[q] <= i)
            lo, hi = bounds[quartile], max(bounds[quartile + 1], bounds[quartile] + 1)
            r = rng.randrange(lo, min(hi, n))
            u = rng.random()
            span = 3 if u > long_span_p else 2 if u > 0.4 else 1
            masked.update(seg[j] for j in range(max(0, r - span + 1), r + 1))
    return masked


def _authors_cut(lo: float, hi: float, rng: random.Random, long_span_p: float) -> range:
    """One cut in the quartile [lo, hi) as the authors' `rand_rm` makes it (ssa_BERT, data_util.py): nothing
    when the quartile spans one position or less; r drawn as numpy's randint(lo, hi) does with float bounds
    (both truncated); a span of 3 (u > 0.7) or 2 (0.4 < u < 0.7) only when r is that far inside the quartile."""
    if hi - lo <= 1:
        return range(0)
    r, u = rng.randrange(int(lo), int(hi)), rng.random()
    if u > long_span_p and r >= lo + 2:
        span = 3
    elif 2 * long_span_p - 1 < u < long_span_p and r >= lo + 1:
        span = 2
    else:
        span = 1
    return range(r - span + 1, r + 1)


def authors_mask_positions(segments: list[range], rng: random.Random, trigger_p: float = 0.1,
                           long_span_p: float = 0.7) -> set[int]:
    """The authors' sampler (`ssa_sampler="authors"`, data_util.py `aug_func`): the same triggers and spans as
    `mask_positions`, with the quartile bounds numpy's float percentiles of 0..n-1 (q · (n - 1)). A quartile no
    wider than one position never masks, so short segments are masked far less (3-5 wordpieces: 2-5%), and a
    segment of one wordpiece never; a probe may mask nothing."""
    masked: set[int] = set()
    for seg in segments:
        n = len(seg)
        bounds = [0.0, *(q * (n - 1) for q in (0.25, 0.5, 0.75)), float(n)]
        for i in range(n):
            if rng.random() > trigger_p:
                continue
            quartile = max(q for q in range(4) if bounds[q] <= i)
            cut = _authors_cut(bounds[quartile], bounds[quartile + 1], rng, long_span_p)
            masked.update(seg[j] for j in cut)
    return masked


class Sampler(NamedTuple):
    masks: Callable[[list[range], random.Random], set[int]]
    keeps_empty_probes: bool  # a probe that masks nothing: kept as an all-ones copy (its prediction holds) or dropped


# How probes are masked (`ssa_sampler`): the authors' sampler, whose probes that mask nothing join the pool as
# all-ones copies as in their code (data_util.py, aug_func to the qualifying check), or this project's first one
# (rounded quartiles, empty probes dropped).
SAMPLERS = {"authors": Sampler(authors_mask_positions, True), "rounded": Sampler(mask_positions, False)}


def segments_of(feature: dict, special_ids: set[int]) -> list[range]:
    """Positions of text_a and text_b wordpieces (specials excluded), each a range."""
    ids, types = feature["input_ids"], feature["token_type_ids"]
    segs = []
    for t in sorted(set(types)):
        pos = [i for i, (tok, ty) in enumerate(zip(ids, types)) if ty == t and tok not in special_ids]
        if pos:
            segs.append(range(pos[0], pos[-1] + 1))
    return segs


def default_token_labels(feature: dict, special_ids: set[int]) -> list[int]:
    """Epoch-0 labels (and labels of unprobed originals): every real token 1, specials ignored."""
    return [IGNORE if tok in special_ids else 1 for tok in feature["input_ids"]]


def masked_copy(feature: dict, positions: set[int], mask_id: int) -> dict:
    ids = [mask_id if i in positions else tok for i, tok in enumerate(feature["input_ids"])]
    return {**feature, "input_ids": ids}


def agree(task_is_regression: bool, a: float, b: float, tolerance: float = 0.3) -> bool:
    """Same prediction: equal classes, or regression scores within 0.3 (the authors' tolerance)."""
    return abs(a - b) <= tolerance if task_is_regression else a == b


def ssa_epoch_features(features: list[dict], predict, epoch: int, seed: int, special_ids: set[int], mask_id: int,
                       is_regression: bool, label_mode: str = "code", max_rounds: int = 3,
                       first_epoch_loss: bool = True, sampler: str = "authors") -> tuple[list, dict]:
    """The epoch's training set: N examples, a share `aug_ratio(epoch)` of them carrying probed token labels.

    `predict(features) -> list of predictions` runs the current model in eval mode. The authors probe every
    example, then sample the qualifying probes they need; we probe examples in a random order and stop once
    enough qualify, which picks a uniform sample of qualifying probes too, at about half the forward passes
    in early epochs. Rounds repeat (at most `max_rounds`, fresh masks each) while too few qualify. The inputs
    are always the original sentences; only the labels come from the probes.

    first_epoch_loss=False: the unprobed first epoch (ratio 0) gets no token labels instead of the code's
    all-ones, so the token loss starts with the first probed epoch. In short runs the all-ones epoch can pull
    the shared encoder away from the task (SSA-Co at the majority class in notebook 01 and `python -m benchmarks reproduce`).
    """
    n, ratio = len(features), aug_ratio(epoch)
    # paper mode: unprobed tokens carry no SSA signal; nor, when asked, the code's all-ones first epoch
    default = IGNORE if label_mode == "paper" or (ratio == 0 and not first_epoch_loss) else 1
    base = [{**f, "token_labels": [IGNORE if t in special_ids else default for t in f["input_ids"]]}
            for f in features]
    stats = {"aug_ratio": ratio, "originals": 0, "probes": 0, "labelled": 0}
    if ratio == 0:
        return base, stats
    rng = random.Random(seed * 100_003 + epoch)
    masks, keeps_empty = SAMPLERS[sampler]
    wanted = int(n * ratio)
    order = rng.sample(range(n), n)
    original: dict[int, float] = {}  # prediction on the unmasked sentence, computed once per example
    labelled: dict[tuple, dict] = {}
    for _ in range(max_rounds):
        start = 0
        while start < n and len(labelled) < wanted:
            rate = len(labelled) / stats["probes"] if stats["probes"] else 1.0  # qualifying share so far
            size = max(32, math.ceil((wanted - len(labelled)) / max(rate, 0.1)))
            block, start = order[start:start + size], start + size
            fresh = [i for i in block if i not in original]
            original.update(zip(fresh, predict([features[i] for i in fresh])))
            stats["originals"] += len(fresh)
            correct = [i for i in block if agree(is_regression, original[i], features[i]["label"])]
            probes = [(i, frozenset(masks(segments_of(features[i], special_ids), rng))) for i in correct]
            probes = [(i, pos) for i, pos in probes if (pos or keeps_empty and label_mode == "code")
                      and (i, pos) not in labelled]  # paper labels: a probe that masks nothing labels nothing
            masked = iter(predict([masked_copy(features[i], pos, mask_id) for i, pos in probes if pos]))
            stats["probes"] += len(probes)
            for i, pos in probes:  # a probe that masks nothing is the original: its prediction holds
                held = agree(is_regression, next(masked), original[i]) if pos else True
                if label_mode == "code" and not held:
                    continue  # the authors discard probes whose prediction flips
                labels = [IGNORE if t in special_ids else (int(not held) if j in pos else default)
                          for j, t in enumerate(features[i]["input_ids"])]
                labelled[(i, pos)] = {**features[i], "token_labels": labels}
        if len(labelled) >= wanted:
            break
    chosen = list(labelled)[:wanted]  # the first qualifying probes in a random order: a uniform sample
    rest = rng.sample(range(n), n - len(chosen))
    stats["labelled"] = len(chosen)
    return [labelled[k] for k in chosen] + [base[i] for i in rest], stats


def bert_mask_epoch_features(features: list[dict], epoch: int, seed: int, special_ids: set[int],
                             mask_id: int, sampler: str = "authors") -> tuple[list, dict]:
    """BERT-mask baseline (Kou et al. 2020, Sec. 4): the same share of the epoch replaced by randomly masked
    copies that keep their gold label; no model, no filtering, no auxiliary loss."""
    n, ratio = len(features), aug_ratio(epoch)
    rng = random.Random(seed * 100_003 + epoch)
    chosen = rng.sample(range(n), int(n * ratio))
    rest = rng.sample(range(n), n - len(chosen))
    masks = SAMPLERS[sampler].masks
    copies = [masked_copy(features[i], masks(segments_of(features[i], special_ids), rng), mask_id) for i in chosen]
    return copies + [features[i] for i in rest], {"aug_ratio": ratio, "labelled": len(copies)}


# ----------------------------------------------------------------------------------------------
# The method registry's hooks (course_lib.methods.registry): ssa-co, ssa-hybrid and bert-mask

LABEL_MODES = ("code", "paper")  # whose token labels: the authors' code's or the paper's


class SamplerOptions(Settings):
    """`--method bert-mask`'s option, the sampler of the masked copies; SSA's probes use it too."""

    ssa_sampler: Literal[tuple(SAMPLERS)] = Field("authors", description=
        "authors = the authors' masking sampler (float quartiles, so short segments are masked less; probes that mask "
        "nothing kept as all-ones copies); rounded = ours before")


class SSAOptions(SamplerOptions):
    """`--method ssa-co`'s options (Kou et al. 2020), also a multitask run's for its SSA tasks."""

    ssa_target_weight: float = Field(0.7, description="alpha, loss = alpha L_target + (1 - alpha) L_SSA (Kou et al. "
                                     "2020)", ge=0, le=1)
    ssa_label_mode: Literal[LABEL_MODES] = Field("code", description="code = the authors' labels (default); paper = "
                                                 "the paper's")
    ssa_share_weight: bool = Field(True, description="one token-head output layer for every position (False: per "
                                   "position)")
    ssa_head_init: Literal[tuple(HEAD_INITS)] = Field("bert", description=
        "the token head's init: bert = N(0, 0.02), zero bias, each position its own draw (the authors'); torch = "
        "PyTorch's default for the dense layer, one draw copied to every position")
    ssa_first_epoch_loss: bool = Field(True, description=
        "code labels: epoch 1 trains the token head on all-ones labels (the authors' code); False leaves epoch 1 to "
        "the task loss, until probed labels exist")
    ssa_probe_bf16: bool = Field(False, description=
        "probe under bfloat16 autocast (about 2x faster on CPUs with AVX512-BF16 or AMX, and on GPUs); a borderline "
        "prediction may then differ from the fp32 probe's")


class SSAHybridOptions(SSAOptions):
    """`--method ssa-hybrid`'s options: SSA-Co's and the pooling layer's."""

    ssa_cls_weight: float = Field(0.5, description="beta, the pooled [CLS] share of the SSA layer (paper Eq. 1)",
                                  ge=0, le=1)
    ssa_threshold: float = Field(0.3, description="tokens with importance below this are left out of the pooling",
                                 ge=0, lt=1)


def _build_ssa(cfg, encoder, task, tokenizer, hybrid: bool) -> SSAClassifier:
    o = cfg.options
    pooling = dict(ssa_cls_weight=o.ssa_cls_weight, ssa_threshold=o.ssa_threshold) if hybrid else {}
    return SSAClassifier(encoder, task.num_labels, cfg.classifier_dropout, sorted(special_token_ids(tokenizer)),
                         cfg.max_len, hybrid=hybrid, ssa_target_weight=o.ssa_target_weight,
                         ssa_share_weight=o.ssa_share_weight, ssa_head_init=o.ssa_head_init, **pooling)


def build_ssa_co(cfg, encoder, task, tokenizer) -> SSAClassifier:
    return _build_ssa(cfg, encoder, task, tokenizer, hybrid=False)


def build_ssa_hybrid(cfg, encoder, task, tokenizer) -> SSAClassifier:
    return _build_ssa(cfg, encoder, task, tokenizer, hybrid=True)


def ssa_epoch_data(cfg, features: list[dict], context) -> tuple[list[dict], dict]:
    """SSA's epoch: token labels made by probing the current model (`ssa_epoch_features`)."""
    def probe(feats: list[dict]) -> list:
        return context.probe(feats, bf16=cfg.options.ssa_probe_bf16)

    return ssa_epoch_features(features, probe, context.epoch, cfg.seed, context.special_ids, context.mask_id,
                              context.is_regression, cfg.options.ssa_label_mode,
                              first_epoch_loss=cfg.options.ssa_first_epoch_loss, sampler=cfg.options.ssa_sampler)


def bert_mask_epoch_data(cfg, features: list[dict], context) -> tuple[list[dict], dict]:
    """BERT-mask's epoch: the same share of masked copies, with their gold labels (`bert_mask_epoch_features`)."""
    return bert_mask_epoch_features(features, context.epoch, cfg.seed, context.special_ids, context.mask_id,
                                    cfg.options.ssa_sampler)
