"""The assignment's questions and their public checks: `python -m course_lib.check q1a` runs them.

A check with `inputs` draws them once from a seeded generator; `python -m course_lib.teaching.assignment make-references`
stores them with the reference solution's outputs, so every machine checks the same numbers. Inputs are
float64, so any correct order of operations lands far inside the tolerance. The code under test is imported
inside each check: a question you have not written yet cannot break the checks of another.
"""
import torch

from course_lib.teaching.check import check, compare

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
    """course_lib.training.optim.AdamW against torch.optim.AdamW: 5 steps, two groups, weight decay on one of them."""
    from course_lib.training.optim import AdamW

    g = torch.Generator().manual_seed(1)
    start = [randn(g, 4, 3), randn(g, 3)]
    ours, theirs = ([p.clone().requires_grad_() for p in start] for _ in range(2))
    optimizers = [cls([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}], lr=0.05)
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
    from course_lib.model.attention import sparsemax_forward

    return {"p": sparsemax_forward(x["z"], -1)}


@check("q3a", points=1, atol=ATOL, inputs=lambda g: {"z": 2 * randn(g, 5, 3, 2)})
def sparsemax_forward_along_dim0(x):
    """The same along dim 0 of a (5, 3, 2) tensor: every [:, i, j] slice sums to 1."""
    from course_lib.model.attention import sparsemax_forward

    return {"p": sparsemax_forward(x["z"], 0)}


def _vjp_inputs(g):
    from course_lib.model.attention import sparsemax_forward

    return {"p": sparsemax_forward(_rows(g)["z"], -1), "grad": randn(g, 4, 7)}


@check("q3a", points=2, atol=ATOL, inputs=_vjp_inputs)
def sparsemax_backward_rows(x):
    """J^T g for the (4, 7) outputs p of the forward check and a random incoming gradient g."""
    from course_lib.model.attention import sparsemax_backward

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
