"""The assignment's questions and their public checks: `python -m course_lib check q1a` runs them.

A check with `inputs` draws them once from a seeded generator;
`python -m course_lib assignment make-references` stores them with the reference solution's outputs, so
every machine checks the same numbers. Inputs are float64, so any correct order of operations lands far inside
the tolerance. The code under test is imported inside each check: a question you have not written yet cannot
break the checks of another (the q4 checks run the pair heads on `StandInEncoder`, not on q1's BERT).
"""
import contextlib

import torch

from course_lib.teaching.check import CheckFailed, check, compare

QUESTIONS = {  # id: title. Which functions each one asks for: the `[id]` docstrings (see STRUCTURE.md)
    "q1a": "scaled dot-product attention with masking",
    "q1b": "multi-head split and merge",
    "q1c": "BERT embeddings",
    "q1d": "add & norm and the feed-forward sub-layer",
    "q2a": "an AdamW step from scratch",
    "q3a": "sparsemax forward and backward (SSAF's sparsegen-lin)",
    "q3b": "gradient reversal (ASA)",
    "q3c": "the SSA pooling layer",
    "q3d": "the attention-guidance loss (AG)",
    "q4a": "the pair features (u, v, |u - v|, u * v)",
    "q4b": "the bi-encoder pair head: both sides in one encoder call",
    "q4c": "the paraphrase head as one logit",
}

ATOL = 1e-10  # float64 throughout; a wrong formula is off by far more
CLS, SEP, PAD = 1, 2, 0  # special token ids of the tiny vocabulary (20 ids)


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def tiny_config():
    """A 1-layer BERT with d = 8, H = 2 (d_h = 4), d_ff = 16 and no dropout."""
    from course_lib.model.config import BertConfig

    return BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=12, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def random_state(module: torch.nn.Module, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Random float64 values for every entry of the module's state, as check inputs named state.<entry>."""
    return {f"state.{k}": 0.5 * randn(g, *v.shape) for k, v in sorted(module.state_dict().items())}


def with_state(module: torch.nn.Module, x: dict) -> torch.nn.Module:
    """The module in float64 and eval mode, holding the state.<entry> inputs."""
    state = {k.removeprefix("state."): v for k, v in x.items() if k.startswith("state.")}
    module.double().load_state_dict(state)
    return module.eval()


# ---------------------------------------------------------------- q1a: attention_probs


def _attention_inputs(g):
    bias = torch.zeros(2, 1, 1, 5, dtype=torch.float64)
    bias[1, ..., 3:] = torch.finfo(torch.float64).min  # example 1 has two padding keys, masked as BertModel does
    return {"q": randn(g, 2, 2, 5, 4), "k": randn(g, 2, 2, 5, 4), "bias": bias}


@check("q1a", points=2, atol=ATOL, inputs=_attention_inputs)
def softmax_with_padding_mask(x):
    """Softmax attention weights, (B, H, L, L) = (2, 2, 5, 5); padded keys get weight 0."""
    from course_lib.model.attention import attention_probs

    return {"probs": attention_probs(x["q"], x["k"], x["bias"])}


@check("q1a", points=1, atol=ATOL,
       inputs=lambda g: {"q": randn(g, 1, 3, 4, 8), "k": randn(g, 1, 3, 4, 8), "bias": randn(g, 1, 3, 4, 4)})
def scaled_scores(x):
    """With an identity normaliser the output is the logits Q K^T / sqrt(d_h) (+ bias) themselves, d_h = 8."""
    from course_lib.model.attention import attention_probs

    def identity(scores):
        return scores

    return {"with_bias": attention_probs(x["q"], x["k"], x["bias"], identity),
            "without_bias": attention_probs(x["q"], x["k"], None, identity)}


# ---------------------------------------------------------------- q1b: split_heads, merge_heads


@check("q1b", points=2, atol=0.0, inputs=lambda g: {"qkv": randn(g, 2, 3, 24)})
def split_heads_layout(x):
    """(B, L, 3d) = (2, 3, 24) with H = 2 → q, k, v of (2, 2, 3, 4); a pure rearrangement, so exact."""
    from course_lib.model.bert import split_heads

    q, k, v = split_heads(x["qkv"], 2)
    return {"q": q, "k": k, "v": v}


@check("q1b", points=1, atol=0.0, inputs=lambda g: {"context": randn(g, 2, 2, 3, 4)})
def merge_heads_layout(x):
    """(B, H, L, d_h) = (2, 2, 3, 4) → (2, 3, 8), head 0's columns first."""
    from course_lib.model.bert import merge_heads

    return {"merged": merge_heads(x["context"])}


# ---------------------------------------------------------------- q1c: Embeddings.forward


def _embedding_inputs(g):
    from course_lib.model.bert import Embeddings

    return {"input_ids": torch.randint(0, 20, (2, 6), generator=g),
            "token_type_ids": torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]]),
            **random_state(Embeddings(tiny_config()), g)}


@check("q1c", points=2, atol=ATOL, inputs=_embedding_inputs)
def embeddings_eval_mode(x):
    """(B, L) = (2, 6) ids with both token types → (2, 6, 8)."""
    from course_lib.model.bert import Embeddings

    module = with_state(Embeddings(tiny_config()), x)
    return {"embeddings": module(x["input_ids"], x["token_type_ids"])}


# ---------------------------------------------------------------- q1d: add_and_norm, FeedForward.forward


@check("q1d", points=1, atol=ATOL, inputs=lambda g: {"x": randn(g, 2, 3, 8), "sublayer_out": randn(g, 2, 3, 8),
                                                       "state.weight": randn(g, 8), "state.bias": randn(g, 8)})
def add_and_norm_eval_mode(x):
    """LN(x + sublayer_out) with a LayerNorm of random affine weights and dropout switched off."""
    from course_lib.model.bert import add_and_norm

    norm = with_state(torch.nn.LayerNorm(8, eps=1e-12), x)
    return {"out": add_and_norm(x["x"], x["sublayer_out"], torch.nn.Identity(), norm)}


def _ffn_inputs(g):
    from course_lib.model.bert import FeedForward

    return {"x": randn(g, 2, 3, 8), **random_state(FeedForward(tiny_config()), g)}


@check("q1d", points=2, atol=ATOL, inputs=_ffn_inputs)
def feed_forward_eval_mode(x):
    """FeedForward on (2, 3, 8) with d_ff = 16."""
    from course_lib.model.bert import FeedForward

    return {"out": with_state(FeedForward(tiny_config()), x)(x["x"])}


# ---------------------------------------------------------------- q2a: adamw_update


@check("q2a", points=2, atol=1e-12, inputs=lambda g: {"param": randn(g, 3, 4), "grads": randn(g, 4, 3, 4)})
def adamw_update_four_steps(x):
    """Four steps on a (3, 4) tensor, lr 0.1, weight_decay 0.1: the parameter after each step, and m, v."""
    from course_lib.training.optim import adamw_update

    param, m, v = x["param"].clone(), torch.zeros(3, 4, dtype=torch.float64), torch.zeros(3, 4, dtype=torch.float64)
    trajectory = []
    for step, grad in enumerate(x["grads"], start=1):
        adamw_update(param, grad, m, v, step, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1)
        trajectory.append(param.clone())
    return {"params": torch.stack(trajectory), "exp_avg": m, "exp_avg_sq": v}


@check("q2a", points=2)
def adamw_class_matches_torch():
    """course_lib.training.optim.AdamW against torch.optim.AdamW: 5 steps, two groups, weight decay on one of them,
    the same eps given to both (their defaults differ)."""
    from course_lib.training.optim import AdamW

    g = torch.Generator().manual_seed(1)
    start = [randn(g, 4, 3), randn(g, 3)]
    ours, theirs = ([p.clone().requires_grad_() for p in start] for _ in range(2))
    optimizers = [cls([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}], lr=0.05,
                      eps=1e-8)
                  for cls, (w, b) in ((AdamW, ours), (torch.optim.AdamW, theirs))]
    for step in range(5):
        x = randn(g, 6, 4)
        for (w, b), opt in zip((ours, theirs), optimizers):
            opt.zero_grad()
            ((x @ w + b).tanh() ** 2).sum().backward()
            opt.step()
        for name, mine, ref in zip(("weight", "bias"), ours, theirs):
            compare(f"{name} after step {step + 1}", mine, ref, 1e-12)


# ---------------------------------------------------------------- q3a: sparsemax_forward, sparsemax_backward


def _rows(g):
    scale = torch.tensor([[0.1], [1.0], [3.0], [10.0]], dtype=torch.float64)  # near-uniform ... one-hot
    return {"z": randn(g, 4, 7) * scale}


@check("q3a", points=2, atol=ATOL, inputs=_rows)
def sparsemax_forward_rows(x):
    """sparsemax along the last axis of (4, 7) rows, from full support to a single winner."""
    from course_lib.model.sparsemax import sparsemax_forward

    return {"p": sparsemax_forward(x["z"], -1)}


@check("q3a", points=1, atol=ATOL, inputs=lambda g: {"z": 2 * randn(g, 5, 3, 2)})
def sparsemax_forward_along_dim0(x):
    """The same along dim 0 of a (5, 3, 2) tensor: every [:, i, j] slice sums to 1."""
    from course_lib.model.sparsemax import sparsemax_forward

    return {"p": sparsemax_forward(x["z"], 0)}


def _vjp_inputs(g):
    from course_lib.model.sparsemax import sparsemax_forward

    return {"p": sparsemax_forward(_rows(g)["z"], -1), "grad": randn(g, 4, 7)}


@check("q3a", points=2, atol=ATOL, inputs=_vjp_inputs)
def sparsemax_backward_rows(x):
    """J^T g for the (4, 7) outputs p of the forward check and a random incoming gradient g."""
    from course_lib.model.sparsemax import sparsemax_backward

    return {"grad_z": sparsemax_backward(x["p"], x["grad"], -1)}


# ---------------------------------------------------------------- q3b: _GradReverse


@check("q3b", points=1)
def grad_reverse_forward_is_identity():
    from course_lib.methods.asa import grad_reverse

    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    compare("grad_reverse(x)", grad_reverse(x), x, 0.0)


@check("q3b", points=1)
def grad_reverse_backward_negates():
    from course_lib.methods.asa import _GradReverse

    g = torch.randn(3, 4, dtype=torch.float64)
    compare("backward(ctx, g)", _GradReverse.backward(None, g), -g, 0.0)


# ---------------------------------------------------------------- q3c: SSAClassifier.pool


def _ssa_model():
    from course_lib.model.bert import BertModel
    from course_lib.methods.ssa import SSAClassifier

    return SSAClassifier(BertModel(tiny_config()), 2, 0.0, [CLS, SEP, PAD], max_len=12, hybrid=True,
                         ssa_cls_weight=0.3, ssa_threshold=0.4)


def _pool_inputs(g):
    ids = torch.tensor([[CLS, 5, 6, 7, 8, SEP, PAD, PAD], [CLS, 9, 10, SEP, 11, 12, 13, SEP],
                        [CLS, 5, 6, SEP, 7, 8, SEP, PAD]])
    scores = torch.rand(3, 8, generator=g, dtype=torch.float64)
    scores[2] = 0.1  # nothing kept in row 2: the pooled output alone
    return {"hidden": randn(g, 3, 8, 6), "pooled": randn(g, 3, 6), "scores": scores, "input_ids": ids,
            "attention_mask": (ids != PAD).long()}


@check("q3c", points=3, atol=ATOL, inputs=_pool_inputs)
def ssa_pool_with_padding(x):
    """(B, L, d) = (3, 8, 6), threshold 0.4, beta 0.3; row 2 keeps no token."""
    return {"pooled": _ssa_model().pool(x["hidden"], x["pooled"], x["scores"], x["input_ids"], x["attention_mask"])}


@check("q3c", points=1, atol=ATOL, inputs=_pool_inputs)
def ssa_pool_without_mask(x):
    """attention_mask None: every position is real (the PAD ids still count as special)."""
    return {"pooled": _ssa_model().pool(x["hidden"], x["pooled"], x["scores"], x["input_ids"], None)}


# ---------------------------------------------------------------- q3d: AttentionGuidance.loss


def _ag_inputs(g):
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    logits = randn(g, 2, 2, 4, 6, 6) + torch.where(mask.bool(), 0.0, -1e4)[None, :, None, None, :]
    return {"layer0": logits[0].softmax(-1), "layer1": logits[1].softmax(-1), "attention_mask": mask,
            "input_ids": torch.randint(3, 20, (2, 6), generator=g)}


def _ag_loss(x, reduction):
    from course_lib.methods.ag import AttentionGuidance

    guidance = AttentionGuidance(num_heads=4, ag_head_types="0,1,1,2", ag_reduction=reduction)
    return {"loss": guidance.loss((x["layer0"], x["layer1"]), x["input_ids"], x["attention_mask"])}


@check("q3d", points=2, atol=ATOL, inputs=_ag_inputs)
def ag_loss_mean(x):
    """2 layers of (2, 4, 6, 6) maps, heads: next, prev, first, first; example 1 has 2 padding tokens."""
    return _ag_loss(x, "mean")


@check("q3d", points=1, atol=ATOL, inputs=_ag_inputs)
def ag_loss_frobenius(x):
    """The same maps with the paper's Frobenius reduction."""
    return _ag_loss(x, "frobenius")


# ---------------------------------------------------------------- q4: the pair heads (stand-in encoder, helpers)


class StandInEncoder(torch.nn.Module):
    """BertModel's call and output for the q4 checks, without q1's code (so q4 can come first): the pooled
    output is tanh(W m + b), m the mean over the real tokens of word (+ token type) + position embeddings. It
    depends on every real token and on where it sits, never on padding. `calls` records each call's ids shape."""

    def __init__(self, cfg=None):
        super().__init__()
        self.config = cfg = cfg or tiny_config()
        self.word = torch.nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.token_type = torch.nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.position = torch.nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.pooler = torch.nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.calls = []

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **unused):
        from course_lib.model.bert import BertOutput

        self.calls.append(tuple(input_ids.shape))
        x = self.word(input_ids) + self.position.weight[: input_ids.shape[1]]
        if token_type_ids is not None:
            x = x + self.token_type(token_type_ids)
        real = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        return BertOutput(x, torch.tanh(self.pooler(self.pool(x, real.bool()[..., None]))))

    def pool(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """(B, L, d) embeddings, (B, L, 1) real-token mask → (B, d): the mean over the real tokens."""
        return (x * real).sum(1) / real.sum(1)


def randomize(module: torch.nn.Module, g: torch.Generator) -> torch.nn.Module:
    """The module in float64 and eval mode with random parameters (shared ones drawn once)."""
    module.double().eval()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(0.5 * randn(g, *param.shape))
    return module


def pair_side(g: torch.Generator, lengths: tuple, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One side of a batch of pairs as the course's loader gives it: ids and mask (B, width), each row
    [CLS] tokens [SEP] of the given length, then padding on the right."""
    n, pos = torch.tensor(lengths)[:, None], torch.arange(width)
    ids = torch.randint(3, 20, (len(lengths), width), generator=g)
    ids = torch.where(pos == 0, CLS, torch.where(pos == n - 1, SEP, ids))
    return ids.masked_fill(pos >= n, PAD), (pos < n).long()


def pair_features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(u, v, |u - v|, u * v) for the q4b checks' expected values, and as combine_pair while they run."""
    return torch.cat([u, v, (u - v).abs(), u * v], dim=-1)


@contextlib.contextmanager
def own_combine_pair():
    """combine_pair replaced by the checks' own while a q4b check runs: q4b's checks need no q4a answer."""
    from course_lib.model import pair_heads

    saved, pair_heads.combine_pair = pair_heads.combine_pair, pair_features
    try:
        yield
    finally:
        pair_heads.combine_pair = saved


# ---------------------------------------------------------------- q4a: combine_pair


@check("q4a", points=1, atol=ATOL, inputs=lambda g: {"u": randn(g, 3, 5), "v": randn(g, 3, 5)})
def combine_pair_values(x):
    """(B, d) = (3, 5) twice → (3, 20)."""
    from course_lib.model.pair_heads import combine_pair

    return {"features": combine_pair(x["u"], x["v"])}


def _combined(u, v):
    from course_lib.model.pair_heads import combine_pair

    out = combine_pair(u, v)
    want = (*u.shape[:-1], 4 * u.shape[-1])
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        raise CheckFailed(f"combine_pair of two {tuple(u.shape)} tensors: got "
                          f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}, "
                          f"expected shape {want}")
    return out


@check("q4a", points=2)
def combine_pair_blocks_in_order():
    """(4, 6) twice → (4, 24): columns 0-5 are u, 6-11 v, 12-17 |u - v| and 18-23 u * v."""
    g = torch.Generator().manual_seed(3)
    u, v = randn(g, 4, 6), randn(g, 4, 6)
    blocks = _combined(u, v).split(6, dim=-1)
    for name, block, want in zip(("u", "v", "|u - v|", "u * v"), blocks, (u, v, (u - v).abs(), u * v)):
        compare(f"block {name}", block, want, 1e-12)


@check("q4a", points=1)
def combine_pair_symmetric_part():
    """Swapping the sentences swaps the first two blocks and leaves |u - v| and u * v as they are."""
    g = torch.Generator().manual_seed(4)
    u, v = randn(g, 5, 3), randn(g, 5, 3)
    forward, backward = _combined(u, v), _combined(v, u)
    compare("combine_pair(v, u)[:, :6] against (v, u)", backward[:, :6], torch.cat([v, u], -1), 1e-12)
    compare("combine_pair(v, u)[:, 6:] against combine_pair(u, v)[:, 6:]", backward[:, 6:], forward[:, 6:], 1e-12)


# ---------------------------------------------------------------- q4b: SeparatePairClassifier.pair_logits


def _pair_model(num_labels: int = 3):
    from course_lib.model.pair_heads import SeparatePairClassifier

    return SeparatePairClassifier(StandInEncoder(), num_labels, 0.1, PAD)


def _two_calls(model, ids1, mask1, ids2, mask2):
    """The head with each side through the encoder on its own, two `embed` calls: what one call must equal."""
    return model.classifier(model.dropout(pair_features(model.embed(ids1, mask1), model.embed(ids2, mask2))))


def _pair_inputs(g):
    (ids1, mask1), (ids2, mask2) = pair_side(g, (5, 3, 4, 2), 5), pair_side(g, (4, 7, 3, 6), 7)
    return {"ids1": ids1, "mask1": mask1, "ids2": ids2, "mask2": mask2, **random_state(_pair_model(), g)}


@check("q4b", points=2, atol=ATOL, inputs=_pair_inputs)
def pair_logits_values(x):
    """Sides of (B, L) = (4, 5) and (4, 7), 3 labels, eval mode → (4, 3)."""
    model = with_state(_pair_model(), x)
    with own_combine_pair():
        return {"logits": model.pair_logits(x["ids1"], x["mask1"], x["ids2"], x["mask2"])}


@check("q4b", points=2)
def pair_logits_match_two_encoder_calls():
    """One encoder call on 2B rows gives what embedding each side on its own does, whichever side is wider."""
    g = torch.Generator().manual_seed(6)
    model = randomize(_pair_model(), g)
    a, b = pair_side(g, (5, 3, 4, 2), 5), pair_side(g, (4, 7, 3, 6), 7)
    with own_combine_pair():
        for first, second in ((a, b), (b, a)):
            compare(f"pair_logits, sides of widths {first[0].shape[1]} and {second[0].shape[1]}",
                    model.pair_logits(*first, *second), _two_calls(model, *first, *second), 1e-10)


@check("q4b", points=1)
def pair_logits_ignore_right_padding():
    """Extra padding columns (mask 0) on the right of either side, or both, change no logit."""
    g = torch.Generator().manual_seed(7)
    model = randomize(_pair_model(), g)
    (ids1, mask1), (ids2, mask2) = pair_side(g, (3, 5, 2), 5), pair_side(g, (4, 2, 6), 6)

    def padded(ids, mask, extra):
        return torch.nn.functional.pad(ids, (0, extra), value=PAD), torch.nn.functional.pad(mask, (0, extra))

    with own_combine_pair():
        want = _two_calls(model, ids1, mask1, ids2, mask2)
        for extra1, extra2 in ((4, 0), (0, 3), (2, 5)):
            got = model.pair_logits(*padded(ids1, mask1, extra1), *padded(ids2, mask2, extra2))
            compare(f"pair_logits with {extra1} and {extra2} padding columns added", got, want, 1e-10)


@check("q4b", points=1)
def pair_logits_gradient_reaches_the_encoder():
    """Backward through pair_logits gives every parameter, the encoder's included, the two-call gradient."""
    g = torch.Generator().manual_seed(8)
    model = randomize(_pair_model(), g)
    sides, weights = (*pair_side(g, (4, 2, 5), 5), *pair_side(g, (3, 6, 4), 6)), randn(g, 3, 3)
    grads = []
    with own_combine_pair():
        for run in (lambda: _two_calls(model, *sides), lambda: model.pair_logits(*sides)):
            model.zero_grad(set_to_none=True)
            (run() * weights).sum().backward()
            grads.append({name: p.grad for name, p in model.named_parameters()})
    want, got = grads
    for name in sorted(k for k, grad in want.items() if grad is not None):  # the token type table gets none
        if got[name] is None:
            raise CheckFailed(f"no gradient reaches {name}: is the encoder's output detached?")
        compare(f"gradient of {name}", got[name], want[name], 1e-10)


# ---------------------------------------------------------------- q4c: CourseModel.predict_paraphrase


def _course_model(g):
    """A CourseModel on the stand-in encoder whose pair heads compute their logits themselves (no q4a or q4b
    code); the similarity head gives other numbers, so reading the wrong head fails."""
    from course_lib.model.heads import SequenceClassifier
    from course_lib.model.pair_heads import SeparatePairClassifier
    from course_lib.teaching.cs224n_project import CourseModel
    from course_lib.training.multitask import MultitaskBert

    class SidesHead(SeparatePairClassifier):
        def pair_logits(self, ids1, mask1, ids2, mask2):
            u, v = self.embed(ids1, mask1), self.embed(ids2, mask2)
            return self.classifier(torch.cat([u, v, u - v, u + v], dim=-1))

    encoder = StandInEncoder()
    heads = {"cs224n_sst": SequenceClassifier(encoder, 5), "cs224n_para": SidesHead(encoder, 2, 0.1, PAD),
             "cs224n_sts": SidesHead(encoder, 1, 0.1, PAD)}
    return CourseModel(randomize(MultitaskBert(encoder, heads), g), PAD)


def _paraphrase(seed: int, lengths1: tuple, lengths2: tuple):
    """predict_paraphrase of a random CourseModel on random pairs, and the paraphrase head's (B, 2) logits."""
    g = torch.Generator().manual_seed(seed)
    course = _course_model(g)
    sides = (*pair_side(g, lengths1, max(lengths1)), *pair_side(g, lengths2, max(lengths2)))
    got = course.predict_paraphrase(*sides)
    with torch.no_grad():
        return got, course.model.heads["cs224n_para"].pair_logits(*sides)


@check("q4c", points=2)
def paraphrase_logit_is_the_log_odds():
    """(B,) = (6,): sigmoid(predict_paraphrase) is the head's softmax probability of class 1 (a paraphrase)."""
    got, logits = _paraphrase(7, (4, 6, 3, 5, 2, 6), (5, 3, 6, 2, 4, 4))  # argmax 1 for pairs 0 and 4
    compare("sigmoid(predict_paraphrase)", torch.sigmoid(got), logits.softmax(-1)[:, 1], 1e-12)


@check("q4c", points=1)
def paraphrase_logit_sign_is_argmax():
    """predict_paraphrase > 0 exactly for the pairs whose argmax is class 1, over 16 pairs (10 of class 1)."""
    lengths = (3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7, 8, 2, 5, 8, 4)
    got, logits = _paraphrase(16, lengths, lengths[::-1])
    compare("predict_paraphrase > 0 (1 = yes)", (got > 0).long(), (logits.argmax(-1) == 1).long(), 0.0)
