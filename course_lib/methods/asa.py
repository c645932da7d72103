"""ASA: adversarial self-attention (Wu et al., AAAI 2023), and the Bernoulli-mask baseline.

During fine-tuning each layer gets an adversary that looks at the layer's input and decides which
(query, key) attention units to cut. Two passes per step: a clean one and one where every layer's attention
is masked by its adversary. The model learns to give the same prediction in both (a symmetric KL), the
adversary learns to make them differ while cutting as little as possible (a keep-count penalty weighted by
tau^2). A gradient-reversal layer lets one optimiser do both. At inference the model is vanilla BERT.

Following the authors' code (see docs/methods.md, section 5, ASA): the adversary is one head over the
full hidden size, shared by all heads; its input is detached; binarisation is a deterministic straight-through
step (`asa_noise="none"`; `"logistic"` samples a binary Concrete instead); the penalty weight is tau^2.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from course_lib.model.attention import ScoreCut, at_least_fp32
from course_lib.model.heads import (IGNORE_INDEX, ClassifierOutput, MultipleChoiceHead, SequenceClassifier,
                                    SpanHead, TokenClassifier)
from course_lib.runtime.settings import Settings

ADVERSARIAL_MASK = -1e4  # logit offset on cut units, as in the authors' code
# Wu et al. (2023), Table 5: tau per fine-tuning task. A grid or preset that runs ASA on one of these tasks sets
# this value; tests/test_paper_settings.py checks every grid file and notebook preset.
PAPER_TAU = {"sst2": 0.3, "mnli": 0.3, "qnli": 0.3, "qqp": 0.3, "stsb": 0.3, "wnut17": 0.5, "dream": 0.5,
             "anli": 0.3, "paws_qqp": 0.3, "hellaswag": 0.3}


class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        """[q3b] Gradient reversal, forward: the identity (Ganin & Lempitsky 2015).

        Hints:
          1. Return a tensor equal to x, of the same shape and dtype; no state needs saving in ctx.
          2. Return a new tensor object (x.view_as(x) or x.clone()), not x itself, so autograd records an output.
        """
        ### BEGIN SOLUTION
        return x.view_as(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad):
        """[q3b] Gradient reversal, backward: d(output)/dx = -I, so the incoming gradient comes back negated.

        Hints:
          1. grad is dL/d(output), shaped like x; return dL/dx for the one input.
          2. No scaling factor: ASA reverses the gradient exactly (the paper's lambda is 1).
        """
        ### BEGIN SOLUTION
        return -grad
        ### END SOLUTION


def grad_reverse(x: torch.Tensor) -> torch.Tensor:
    """Identity forward, exact negation backward (Ganin & Lempitsky 2015): the adversary ascends the loss."""
    return _GradReverse.apply(x)


class _StraightThroughStep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x > 0).to(x.dtype) + 0.5 * (x == 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * s * (1 - s)


NOISES = ("none", "logistic")  # binarize's noise: the authors' deterministic step, or a binary Concrete sample


def binarize(x: torch.Tensor, noise: str = "none") -> torch.Tensor:
    """keep = 1[x > 0] forward, d keep/dx = sigmoid'(x) backward.

    noise="logistic" adds Logistic(0, 1) noise first, which makes P(keep) = sigmoid(x): a hard binary
    Concrete sample (Jang et al. 2017). The authors' code adds and subtracts the same Gumbel draw, so
    its step is deterministic: that is noise="none", the default.
    """
    if noise == "logistic":
        u = torch.rand_like(x).clamp(1e-6, 1 - 1e-6)
        x = x + torch.log(u) - torch.log1p(-u)
    return _StraightThroughStep.apply(x)


def symmetric_kl(logits_a: torch.Tensor, logits_b: torch.Tensor) -> torch.Tensor:
    """½[KL(p_a || p_b) + KL(p_b || p_a)] of the softmax distributions, summed over classes, batch mean."""
    log_a, log_b = F.log_softmax(at_least_fp32(logits_a), -1), F.log_softmax(at_least_fp32(logits_b), -1)
    return 0.5 * (F.kl_div(log_b, log_a, log_target=True, reduction="batchmean")
                  + F.kl_div(log_a, log_b, log_target=True, reduction="batchmean"))


class Adversary(nn.Module):
    """One layer's adversary: X = (W_q h)(W_k h)^T / sqrt(d) over the detached layer input, (B, L, L)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        for lin in (self.query, self.key):
            nn.init.normal_(lin.weight, std=0.02)
            nn.init.zeros_(lin.bias)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        h = hidden.detach()  # the adversary attacks; it does not steer the representation it reads
        # (h_i W_q^T + b_q) . (h_j W_k^T + b_k) = h_i (W_q^T W_k) h_j^T + h_i W_q^T b_k + b_q W_k h_j^T + b_q . b_k:
        # one (d, d) product applied to every token instead of two projections, half the adversary's matmuls.
        wq, bq, wk, bk = self.query.weight, self.query.bias, self.key.weight, self.key.bias
        query_side, key_side = h @ (wq.t() @ bk), h @ (wk.t() @ bq)  # (B, L) each
        x = (h @ (wq.t() @ wk)) @ h.transpose(-2, -1) + query_side[..., :, None] + key_side[..., None, :] + bq @ bk
        x = x / math.sqrt(h.shape[-1])  # (B, L, L)
        if attention_mask is not None:  # padded keys are never kept
            x = x + (1.0 - attention_mask[:, None, :].to(x.dtype)) * ADVERSARIAL_MASK
        return x


def cut_share(keep: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Share of real (query, key) units that are cut: the paper's masking proportion, as a 0-d tensor (a
    training step logs it without waiting for the device)."""
    cut = 1.0 - keep.detach().float()
    if attention_mask is None:
        return cut.mean()
    real = attention_mask.float()
    pairs = real[:, :, None] * real[:, None, :]
    return (cut * pairs).sum() / pairs.sum()


def masked_fraction(keep: torch.Tensor, attention_mask: torch.Tensor | None) -> float:
    """`cut_share` as a number."""
    return cut_share(keep, attention_mask).item()


def _added_cut(keep: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    return ((1.0 - keep) * ADVERSARIAL_MASK)[:, None]  # (B, 1, L, L), added to the padding mask


def _replaced_cut(keep: torch.Tensor, attention_mask: torch.Tensor | None) -> ScoreCut:
    if attention_mask is not None:  # the cut replaces the padding mask, so it cuts the padding keys itself
        keep = keep * attention_mask[:, None, :].to(keep.dtype)
    return ScoreCut(keep[:, None], ADVERSARIAL_MASK)  # (B, 1, L, L)


# What a cut does to a row of attention (`asa_cut_row`), which decides a row whose every real key is cut.
# clean: -1e4 is added to a cut unit's logit, so such a row keeps its clean softmax over the real keys (the shift
# cancels), while a row with one key kept puts all its weight there. uniform: the authors' code (modeling/bert.py,
# BertSelfAttention and AsaBert.Encoder) replaces a cut unit's score with -1e4, padding keys included, so such a
# row becomes uniform over every position of the padded batch. Rows with a key kept are the same under both.
CUT_ROWS = {"uniform": _replaced_cut, "clean": _added_cut}


def cut_row_share(keep: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Share of real query rows whose real keys are all cut (the rows `asa_cut_row` decides), a 0-d tensor."""
    kept = keep.detach() if attention_mask is None else keep.detach() * attention_mask[:, None, :].to(keep.dtype)
    empty = (kept.sum(-1) == 0).float()  # (B, L)
    if attention_mask is None:
        return empty.mean()
    real = attention_mask.to(empty.dtype)
    return (empty * real).sum() / real.sum()


def fully_cut_rows(keep: torch.Tensor, attention_mask: torch.Tensor | None) -> float:
    """`cut_row_share` as a number."""
    return cut_row_share(keep, attention_mask).item()


class AdversarialSelfAttention:
    """ASA's two-pass objective for any task head (`mode="asa"`), or random attention masks in the same loss
    (`mode="bernoulli"`, the paper's naive-masking baseline, Table 3). Mixed into a head class that has
    `logits`, `forward` and `loss`; the head's `divergence(clean, adversarial)` compares its own output
    distributions (classes; a span's start and end positions)."""

    head_dropout = True  # the head takes `dropout` (cfg.classifier_dropout); a span head has none

    def __init__(self, encoder, *head_args, mode: str = "asa", asa_tau: float = 0.3, asa_noise: str = "none",
                 bernoulli_p: float = 0.1, cut_row: str = "uniform", **head_options):
        super().__init__(encoder, *head_args, **head_options)  # the head this is mixed into
        self.mode, self.asa_tau, self.asa_noise, self.bernoulli_p = mode, asa_tau, asa_noise, bernoulli_p
        self.cut = CUT_ROWS[cut_row]
        if mode == "asa":
            config = self.encoder.config
            self.adversaries = nn.ModuleList(Adversary(config.hidden_size) for _ in range(config.num_hidden_layers))

    @classmethod
    def from_config(cls, cfg, encoder, num_labels: int, **options):
        head = {"dropout": cfg.classifier_dropout} if cls.head_dropout else {}
        return cls(encoder, num_labels, **head, **cls.family_options(cfg), **options)

    @classmethod
    def family_options(cls, cfg) -> dict:
        """Options of this family's head only (the tagger's divergence reduction); none by default."""
        return {}

    def layer_cut(self, index: int, hidden: torch.Tensor, attention_mask, keeps: list):
        """Layer `index`'s cut, from that layer's input hidden (B, L, d): its keep (B, L, L), the adversary's or a
        random one, is appended to `keeps`; returned as the bias the layer's attention gets (`self.cut`)."""
        if self.mode == "asa":
            keep = grad_reverse(binarize(self.adversaries[index](hidden, attention_mask), self.asa_noise))
        else:
            B, L = hidden.shape[:2]
            keep = (torch.rand(B, L, L, device=hidden.device) >= self.bernoulli_p).to(hidden.dtype)
        keeps.append(keep)
        return self.cut(keep, attention_mask)

    @contextmanager
    def adversarial_pass(self, attention_mask):
        """Inside it, a call of the encoder is the adversarial pass; yields the list of keeps, one per layer.

        A forward pre-hook on each encoder layer computes the layer's cut from the layer's input during the pass,
        so layer l's adversary reads hidden states already shaped by the cuts below it, as in the authors' code.
        An added cut joins the padding mask; a `ScoreCut` replaces it (it cuts the padding keys itself)."""
        keeps: list[torch.Tensor] = []

        def hook_of(index: int):
            def cut_layer(layer, args):
                x, padding, *rest = args
                cut = self.layer_cut(index, x, attention_mask, keeps)
                return (x, cut if padding is None or isinstance(cut, ScoreCut) else padding + cut, *rest)
            return cut_layer

        handles = [layer.register_forward_pre_hook(hook_of(i)) for i, layer in enumerate(self.encoder.layers)]
        try:
            yield keeps
        finally:
            for handle in handles:
                handle.remove()

    def encoder_mask(self, attention_mask):
        """The padding mask as the encoder sees it (a multiple-choice head flattens its choices)."""
        return attention_mask

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        clean = super().forward(input_ids, attention_mask, token_type_ids, labels)
        if not self.training or labels is None:
            return clean  # inference is vanilla BERT: the adversaries are not called
        mask = self.encoder_mask(attention_mask)
        with self.adversarial_pass(mask) as keeps:
            adversarial, _ = self.logits(input_ids, attention_mask, token_type_ids)
        divergence = self.divergence(clean.logits, adversarial, labels)
        loss = clean.loss + divergence
        if self.mode == "asa":  # kept units per sequence over all layers; the GRL makes the adversary maximise it
            penalty = self.asa_tau ** 2 * sum(k.sum() for k in keeps) / keeps[0].shape[0]
            loss = loss + (penalty - penalty.detach())  # its gradient only: the logged loss stays L_e + D
        clean.loss = loss
        clean.stats = {"masked_fraction": [cut_share(k, mask) for k in keeps],  # 0-d tensors, read by the loop
                       "fully_cut_rows": [cut_row_share(k, mask) for k in keeps], "divergence": divergence.detach()}
        return clean


def _batch_softmax(clean: torch.Tensor, adversarial: torch.Tensor) -> torch.Tensor:
    return symmetric_kl(clean.reshape(-1), adversarial.reshape(-1))  # a softmax over the batch's B scores


def _squared(clean: torch.Tensor, adversarial: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(adversarial.float(), clean.float())


# How a regressor's two predictions (one score per example) are compared (`asa_regression_divergence`).
# batch-softmax is the authors' code (modeling/utils.py, `divergence`): the B scores of each pass become one
# softmax across the batch, and the symmetric KL of the two is divided by B; it ignores a shift of every score by
# the same amount. squared, this project's first reading, is the mean squared difference of the two predictions
# (how much larger it was on STS-B: docs/methods.md, ASA).
REGRESSION_DIVERGENCES = {"batch-softmax": _batch_softmax, "squared": _squared}


class ASAClassifier(AdversarialSelfAttention, SequenceClassifier):
    """A sequence classifier (or regressor) trained with ASA or with random masks."""

    def __init__(self, *args, regression_divergence: str = "batch-softmax", **options):
        super().__init__(*args, **options)
        self.regression_divergence = REGRESSION_DIVERGENCES[regression_divergence]

    @classmethod
    def family_options(cls, cfg) -> dict:
        return {"regression_divergence": cfg.options.asa_regression_divergence}

    def divergence(self, clean: torch.Tensor, adversarial: torch.Tensor, labels=None) -> torch.Tensor:
        """Symmetric KL of the class distributions; a regressor's predictions as `regression_divergence` says."""
        if self.num_labels == 1:
            return self.regression_divergence(clean, adversarial)
        return symmetric_kl(clean, adversarial)


class ASASpanHead(AdversarialSelfAttention, SpanHead):
    """A span QA head trained with ASA or with random masks: the symmetric KL of the start distributions and of
    the end distributions over the window's tokens, averaged as the start and end losses are."""

    head_dropout = False

    def divergence(self, clean: torch.Tensor, adversarial: torch.Tensor, labels=None) -> torch.Tensor:
        return (symmetric_kl(clean[..., 0], adversarial[..., 0]) + symmetric_kl(clean[..., 1], adversarial[..., 1])) / 2


def _window_sum(clean: torch.Tensor, adversarial: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return symmetric_kl(clean, adversarial)  # (B, L, C): batchmean sums over L and C, divides by B


def _word_mean(clean: torch.Tensor, adversarial: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    scored = labels != IGNORE_INDEX  # (N, C) rows after indexing: batchmean divides by the N scored words
    return symmetric_kl(clean[scored], adversarial[scored])


# How a tagger's per-token divergences become one number (`asa_tagging_divergence`). window-sum is the authors'
# code for WNUT-17: summed over every position of the window, padding and later sub-words included, per sequence,
# while the tagging loss is a mean over the scored words; so D grows with the window's length and the loss does
# not. word-mean averages D over the words the loss scores, weighing the two terms alike.
TAGGING_DIVERGENCES = {"window-sum": _window_sum, "word-mean": _word_mean}


class ASATokenClassifier(AdversarialSelfAttention, TokenClassifier):
    """A tagger trained with ASA or with random masks: the symmetric KL of each token's tag distribution, reduced
    over the window as `tagging_divergence` says (TAGGING_DIVERGENCES; default the authors' code's)."""

    def __init__(self, *args, tagging_divergence: str = "window-sum", **options):
        super().__init__(*args, **options)
        self.reduce_divergence = TAGGING_DIVERGENCES[tagging_divergence]

    @classmethod
    def family_options(cls, cfg) -> dict:
        return {"tagging_divergence": cfg.options.asa_tagging_divergence}

    def divergence(self, clean: torch.Tensor, adversarial: torch.Tensor, labels=None) -> torch.Tensor:
        return self.reduce_divergence(clean, adversarial, labels)


class ASAMultipleChoice(AdversarialSelfAttention, MultipleChoiceHead):
    """A multiple-choice model trained with ASA or with random masks: every (context, choice) pair is attacked
    on its own; the symmetric KL compares the distributions over the choices (Wu et al. 2023: DREAM,
    HellaSWAG)."""

    def encoder_mask(self, attention_mask):
        return MultipleChoiceHead.flatten(attention_mask)

    def divergence(self, clean: torch.Tensor, adversarial: torch.Tensor, labels=None) -> torch.Tensor:
        return symmetric_kl(clean, adversarial)  # (B, C)


ASA_MODELS = {"sentence": ASAClassifier, "span_qa": ASASpanHead, "tagging": ASATokenClassifier,
              "multiple_choice": ASAMultipleChoice}  # the task families ASA applies to, and how


def _build(cfg, encoder, task, mode: str, **mode_options):
    return ASA_MODELS[task.family].from_config(cfg, encoder, task.num_labels, mode=mode,
                                                   cut_row=cfg.options.asa_cut_row, **mode_options)


# Which parameters the gradient clip covers in an ASA run (`asa_clip_scope`). The authors' scripts never clip
# (run_sent_clas.py, run_tok_clas.py); this project clips at max_grad_norm as for vanilla, so the two runs share
# a recipe. learner: the encoder and the head, as vanilla's clip. all: the adversaries too, as this project's
# runs did before the option existed: their reversed gradients are 10-100x the encoder's, so one global norm
# over both scaled the encoder's update down by that much, by a factor that changed from step to step.
CLIP_SCOPES = ("learner", "all")


class TwoPassOptions(Settings):
    """What ASA and its Bernoulli baseline share: how the two passes' outputs are compared, and what a fully cut
    row does."""

    asa_tagging_divergence: Literal[tuple(TAGGING_DIVERGENCES)] = Field("window-sum", description=
        "on tagging: window-sum = the authors' code (each token's divergence summed over the window, padding "
        "included); word-mean = averaged over the scored words")
    asa_regression_divergence: Literal[tuple(REGRESSION_DIVERGENCES)] = Field("batch-softmax", description=
        "on a regression task (STS-B): batch-softmax = the authors' code (a softmax of the scores across the batch, "
        "symmetric KL); squared = the squared difference")
    asa_cut_row: Literal[tuple(CUT_ROWS)] = Field("uniform", description=
        "a row whose real keys are all cut becomes uniform over every position, padding included (uniform, the "
        "authors' code) or keeps its clean attention (clean)")


class ASAOptions(TwoPassOptions):
    """`--method asa`'s options (Wu et al. 2023)."""

    asa_tau: float = Field(0.3, description="keep-count penalty weight, applied as tau^2 (Wu et al. 2023, Table 5: "
                           "0.3)", ge=0)
    asa_noise: Literal[NOISES] = Field("none", description="none = the authors' deterministic step; logistic = "
                                       "binary Concrete sample")
    asa_clip_scope: Literal[CLIP_SCOPES] = Field("learner", description=
        "which parameters the gradient clip covers: learner = encoder and head, as vanilla's; all = the adversaries "
        "too, one global norm (it starves the encoder: docs/methods.md)")


class BernoulliOptions(TwoPassOptions):
    """`--method bernoulli-mask`'s options: ASA's loss with random masks (Wu et al. 2023, Table 3)."""

    bernoulli_p: float = Field(0.1, description="probability of cutting each attention unit (paper: 0.05, 0.1)",
                               ge=0, lt=1)


def clipped_parameters(cfg, model) -> list | None:
    """The method registry's clip scope for `asa`: every parameter but the adversaries' (or None: all)."""
    if cfg.options.asa_clip_scope == "all":
        return None
    adversaries = {id(p) for p in model.adversaries.parameters()}
    return [p for p in model.parameters() if id(p) not in adversaries]


def build_asa(cfg, encoder, task, tokenizer):
    """The method registry's task model for `asa` (`course_lib.methods.registry`), for the run's task family."""
    return _build(cfg, encoder, task, "asa", asa_tau=cfg.options.asa_tau, asa_noise=cfg.options.asa_noise)


def build_bernoulli_mask(cfg, encoder, task, tokenizer):
    """The method registry's task model for `bernoulli-mask`: ASA's two-pass loss with random masks."""
    return _build(cfg, encoder, task, "bernoulli", bernoulli_p=cfg.options.bernoulli_p)
