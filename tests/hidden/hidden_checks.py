"""Hidden checks of the assignment (staff only: `assignment build` leaves tests/hidden/ out of the student copy).

The autograder runs them after the public ones, in the same per-question process. They compare with
independent oracles (PyTorch's own kernels, entmax, explicit loops) at other shapes and in training mode,
instead of with stored outputs, so nothing about them ships to students. Like the public checks, each one
exercises one question's code only.
"""
import math

import torch
import torch.nn.functional as F

from course_lib.teaching.check import CheckFailed, check, compare
from course_lib.teaching.public_checks import StandInEncoder

f64 = torch.float64


def randn(*shape, dtype=f64):
    return torch.randn(*shape, dtype=dtype)


@check("q1a", points=2, hidden=True)
def attention_matches_sdpa():
    """A @ V against torch's fused kernel with a full (B, H, L, L) bias, at (3, 4, 7, 8)."""
    from course_lib.model.attention import attention_probs

    q, k, v, bias = randn(3, 4, 7, 8), randn(3, 4, 7, 8), randn(3, 4, 7, 8), randn(3, 4, 7, 7)
    bias[0, :, :, 5:] = torch.finfo(f64).min
    probs = attention_probs(q, k, bias)
    compare("row sums", probs.sum(-1), torch.ones(3, 4, 7, dtype=f64), 1e-12)
    compare("A @ V", probs @ v, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), 1e-10)


@check("q1a", points=1, hidden=True)
def attention_float32_mask_is_exact():
    """In float32 with BertModel's mask (finfo.min) the padded keys get weight exactly 0."""
    from course_lib.model.attention import attention_probs

    q, k = randn(2, 2, 6, 4, dtype=torch.float32), randn(2, 2, 6, 4, dtype=torch.float32)
    bias = torch.zeros(2, 1, 1, 6)
    bias[1, ..., 2:] = torch.finfo(torch.float32).min
    probs = attention_probs(q, k, bias)
    compare("weights on padded keys", probs[1, :, :, 2:], torch.zeros(2, 6, 4), 0.0)
    compare("rows", probs[0], torch.softmax(q[0] @ k[0].transpose(-1, -2) / 2, -1), 1e-6)


@check("q1b", points=1, hidden=True)
def heads_index_layout_and_round_trip():
    """Entry (part, head, j) of the fused axis lands at q/k/v[:, head, :, j]; merging undoes splitting."""
    from course_lib.model.bert import merge_heads, split_heads

    B, L, H, d_h = 2, 5, 4, 3
    qkv = randn(B, L, 3 * H * d_h)
    parts = split_heads(qkv, H)
    for p, name in enumerate("qkv"):
        for h in range(H):
            want = qkv[:, :, (p * H + h) * d_h:(p * H + h + 1) * d_h]
            compare(f"{name}[:, {h}]", parts[p][:, h], want, 0.0)
        compare(f"merge_heads({name})", merge_heads(parts[p]), qkv[:, :, p * H * d_h:(p + 1) * H * d_h], 0.0)


def _embeddings(p):
    from course_lib.model.bert import Embeddings
    from course_lib.model.config import BertConfig

    cfg = BertConfig(vocab_size=30, hidden_size=12, num_hidden_layers=1, num_attention_heads=3, intermediate_size=8,
                     max_position_embeddings=16, hidden_dropout_prob=p)
    module = Embeddings(cfg).double()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(randn(*param.shape))
    return module


def _embedding_formula(module, ids, types):
    x = module.word.weight[ids] + module.token_type.weight[types] + module.position.weight[: ids.shape[1]]
    return F.layer_norm(x, (x.shape[-1],), module.norm.weight, module.norm.bias, module.norm.eps)


@check("q1c", points=1, hidden=True)
def embeddings_match_formula():
    """LN(W_word[ids] + W_type[types] + W_pos[0..L-1]) at (B, L) = (3, 10)."""
    module = _embeddings(0.0).eval()
    ids, types = torch.randint(0, 30, (3, 10)), torch.randint(0, 2, (3, 10))
    compare("embeddings", module(ids, types), _embedding_formula(module, ids, types), 1e-10)


@check("q1c", points=1, hidden=True)
def embeddings_dropout_after_norm():
    """Training mode: dropout applies once, to the normalised sum (the model's nn.Dropout: F.dropout's draws)."""
    module = _embeddings(0.5).train()
    ids, types = torch.randint(0, 30, (3, 10)), torch.randint(0, 2, (3, 10))
    torch.manual_seed(7)
    got = module(ids, types)
    torch.manual_seed(7)
    compare("embeddings", got, F.dropout(_embedding_formula(module, ids, types), 0.5, training=True), 1e-10)


@check("q1d", points=1, hidden=True)
def feed_forward_dropout_on_the_sublayer_output():
    """Training mode: LN(x + Dropout(W2 · GELU(W1 · x))), the one dropout on the sub-layer's output."""
    from course_lib.model.bert import FeedForward
    from course_lib.model.config import BertConfig

    ffn = FeedForward(BertConfig(hidden_size=6, num_attention_heads=2, intermediate_size=10,
                                 hidden_dropout_prob=0.5)).double().train()
    x = randn(2, 4, 6)
    torch.manual_seed(3)
    got = ffn(x)
    torch.manual_seed(3)
    inner = F.dropout(F.linear(F.gelu(F.linear(x, ffn.up.weight, ffn.up.bias)), ffn.down.weight, ffn.down.bias), 0.5,
                      training=True)
    compare("out", got, F.layer_norm(x + inner, (6,), ffn.norm.weight, ffn.norm.bias, ffn.norm.eps), 1e-10)


@check("q2a", points=2, hidden=True)
def adamw_matches_torch_with_other_hyperparameters():
    """float32, betas (0.8, 0.99), eps 1e-6, weight decay 0.3, lr changed mid-run, 10 steps: within 1e-6."""
    from course_lib.training.optim import AdamW

    start = randn(5, 3, dtype=torch.float32)
    ours, theirs = start.clone().requires_grad_(), start.clone().requires_grad_()
    kwargs = {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.3}
    optimizers = AdamW([ours], **kwargs), torch.optim.AdamW([theirs], **kwargs)
    for step in range(10):
        target = randn(5, 3, dtype=torch.float32)
        for param, opt in zip((ours, theirs), optimizers):
            if step == 5:
                opt.param_groups[0]["lr"] = 0.005  # as a schedule would
            opt.zero_grad()
            ((param - target) ** 2).sum().backward()
            opt.step()
        compare(f"param after step {step + 1}", ours, theirs, 1e-6)


@check("q3a", points=2, hidden=True)
def sparsemax_matches_entmax():
    """Forward and backward against entmax.sparsemax along dims 1 and -1 of (3, 9, 5) tensors."""
    import entmax

    from course_lib.model.sparsemax import sparsemax_backward, sparsemax_forward

    for dim in (1, -1):
        z, g = 3 * randn(3, 9, 5), randn(3, 9, 5)
        z_ref = z.clone().requires_grad_()
        p_ref = entmax.sparsemax(z_ref, dim=dim)
        p_ref.backward(g)
        p = sparsemax_forward(z, dim)
        compare(f"sparsemax(z, dim={dim})", p, p_ref, 1e-10)
        compare(f"vjp(dim={dim})", sparsemax_backward(p_ref.detach(), g, dim), z_ref.grad, 1e-10)


@check("q3a", points=1, hidden=True)
def sparsegen_lin_gradcheck():
    """Finite differences through sparsegen-lin (lambda = -2) in the model's autograd Function."""
    from course_lib.model.sparsemax import sparsegen_lin

    z = randn(2, 3, 7).requires_grad_()
    if not torch.autograd.gradcheck(lambda x: sparsegen_lin(x, -2.0), (z,), raise_exception=False):
        raise CheckFailed("the backward does not match finite differences of the forward")


@check("q3b", points=1, hidden=True)
def grad_reverse_inside_a_graph():
    """d/dx sum(sin(grad_reverse(2x))) = -2 cos(2x)."""
    from course_lib.methods.asa import grad_reverse

    x = randn(4, 3).requires_grad_()
    torch.sin(grad_reverse(2 * x)).sum().backward()
    compare("x.grad", x.grad, -2 * torch.cos(2 * x.detach()), 1e-12)


@check("q3c", points=2, hidden=True)
def ssa_pool_matches_a_loop():
    """float32, threshold 0.5, beta 0.6, against a per-example loop over the kept tokens."""
    from course_lib.model.bert import BertModel
    from course_lib.model.config import BertConfig
    from course_lib.methods.ssa import SSAClassifier

    special = [101, 102, 0]
    model = SSAClassifier(BertModel(BertConfig(vocab_size=200, hidden_size=4, num_hidden_layers=1,
                                               num_attention_heads=1, intermediate_size=4)),
                          2, 0.0, special, max_len=16, hybrid=True, ssa_cls_weight=0.6, ssa_threshold=0.5)
    ids = torch.randint(3, 200, (4, 9))
    ids[:, 0], ids[1, 5], ids[2, 3:] = 101, 102, 0
    ids[3, 1:] = 0  # only [CLS]: nothing to keep
    mask = (ids != 0).long()
    hidden, pooled, scores = randn(4, 9, 4, dtype=torch.float32), randn(4, 4, dtype=torch.float32), torch.rand(4, 9)
    want = []
    for b in range(4):
        kept = [i for i in range(9) if mask[b, i] and ids[b, i].item() not in special and scores[b, i] >= 0.5]
        if not kept:
            want.append(pooled[b])
            continue
        weights = torch.softmax(scores[b, kept], 0)
        want.append(0.6 * pooled[b] + 0.4 * (weights[:, None] * hidden[b, kept]).sum(0))
    compare("pooled", model.pool(hidden, pooled, scores, ids, mask), torch.stack(want), 1e-5)


@check("q3d", points=2, hidden=True)
def ag_loss_matches_a_loop():
    """Per example, head and real (query, key) pair, with the delimiter pattern too; both reductions."""
    from course_lib.methods.ag import AttentionGuidance, ag_targets

    lengths, L, heads = (7, 4, 2), 7, 6
    mask = (torch.arange(L)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, 50, (3, L))
    ids[:, 0] = 1
    maps = [torch.softmax(randn(3, heads, L, L), -1) for _ in range(3)]
    groups = [("identity", 0, 1), ("next", 1, 2), ("delim", 2, 4), ("first", 4, 5)]  # head 5 unguided
    for reduction in ("mean", "frobenius"):
        guidance = AttentionGuidance(heads, "identity,next,delim:2,first", reduction, delimiter_ids=(1,))
        want = 0.0
        for probs in maps:
            for pattern, start, stop in groups:
                target = ag_targets(pattern, mask, ids, (1,))
                squared = sum((probs[b, h, i, j] - target[b, i, j]).item() ** 2 for b, n in enumerate(lengths)
                              for h in range(start, stop) for i in range(n) for j in range(n))
                count = (stop - start) * sum(n * n for n in lengths)
                want += squared / count if reduction == "mean" else squared / len(lengths)
        got = guidance.loss(maps, ids, mask)
        compare(f"{reduction} loss", got, torch.tensor(want, dtype=f64), 1e-9 * max(1.0, math.fabs(want)))


class _MaxPoolEncoder(StandInEncoder):
    """The public checks' stand-in for BertModel (no q1 code runs) with another width and pooling: tanh(W max_t(e_t)
    + b) over the real tokens, so a solution fitted to the public stand-in's numbers does not pass here."""

    def __init__(self, d=6, vocab=30, positions=16):
        from course_lib.model.config import BertConfig

        super().__init__(BertConfig(vocab_size=vocab, hidden_size=d, num_attention_heads=2, intermediate_size=d,
                                    max_position_embeddings=positions, type_vocab_size=2))

    def pool(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(~real, float("-inf")).max(1).values


def _pair_side(lengths, width, vocab=30):
    """ids and mask (B, width): [CLS]=1 tokens [SEP]=2 then padding 0, rows of the given lengths."""
    n, pos = torch.tensor(lengths)[:, None], torch.arange(width)
    ids = torch.where(pos == 0, 1, torch.where(pos == n - 1, 2, torch.randint(3, vocab, (len(lengths), width))))
    return ids.masked_fill(pos >= n, 0), (pos < n).long()


def _features(u, v):
    return torch.cat([u, v, (u - v).abs(), u * v], dim=-1)


@check("q4a", points=1, hidden=True)
def combine_pair_leading_dims_float32_and_gradient():
    """(2, 3, 5) float32 sides → (2, 3, 20); the gradient to u and v is the formula's."""
    from course_lib.model.pair_heads import combine_pair

    u, v, w = (randn(*shape, dtype=torch.float32) for shape in ((2, 3, 5), (2, 3, 5), (2, 3, 20)))
    grads = []
    for fn in (_features, combine_pair):
        a, b = u.clone().requires_grad_(), v.clone().requires_grad_()
        out = fn(a, b)
        (out * w).sum().backward()
        grads.append((out.detach(), a.grad, b.grad))
    for name, want, got in zip(("features", "grad u", "grad v"), *grads):
        compare(name, got, want, 1e-6)


def _pair_classifier(num_labels, dropout):
    from course_lib.model.pair_heads import SeparatePairClassifier

    model = SeparatePairClassifier(_MaxPoolEncoder(), num_labels, dropout, pad_token_id=0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(randn(*param.shape, dtype=torch.float32))
    return model


@check("q4b", points=2, hidden=True)
def pair_logits_dropout_once_in_training():
    """float32, training mode, dropout 0.5, a regressor (1 label), the first side the wider: dropout once, on
    (u, v, |u - v|, u * v), after encoding each side apart."""
    from unittest import mock

    model = _pair_classifier(1, 0.5).train()
    (ids1, mask1), (ids2, mask2) = _pair_side((9, 4, 6, 3), 9), _pair_side((3, 5, 2, 4), 5)
    with mock.patch("course_lib.model.pair_heads.combine_pair", _features):  # no q4a code
        torch.manual_seed(11)
        got = model.pair_logits(ids1, mask1, ids2, mask2)
    torch.manual_seed(11)
    features = _features(model.embed(ids1, mask1), model.embed(ids2, mask2))
    want = model.classifier(F.dropout(features, 0.5, training=True))
    compare("pair_logits in training mode", got, want, 1e-5)


@check("q4b", points=1, hidden=True)
def pair_logits_one_encoder_call_on_2b_rows():
    """Sides of (3, 4) and (3, 7): the encoder runs once, on 6 rows (both sides stacked), as the hints ask."""
    from unittest import mock

    model = _pair_classifier(2, 0.1).eval()
    sides = (*_pair_side((4, 2, 3), 4), *_pair_side((7, 3, 5), 7))
    with mock.patch("course_lib.model.pair_heads.combine_pair", _features):
        model.pair_logits(*sides)
    calls = model.encoder.calls
    if len(calls) != 1 or calls[0][0] != 6:
        raise CheckFailed(f"expected one encoder call on 6 rows, got calls with ids of shapes {calls}")


@check("q4c", points=1, hidden=True)
def paraphrase_logit_with_a_cross_encoded_head():
    """pair_encoding cross: the paraphrase head reads [CLS] a [SEP] b [SEP] (`join_pair`); float32, 5 pairs."""
    from course_lib.model.heads import SequenceClassifier
    from course_lib.teaching.cs224n_project import CourseModel, join_pair
    from course_lib.training.multitask import MultitaskBert

    encoder = _MaxPoolEncoder()
    heads = {name: SequenceClassifier(encoder, n, 0.1) for name, n in
             (("cs224n_sst", 5), ("cs224n_para", 2), ("cs224n_sts", 1))}
    model = MultitaskBert(encoder, heads).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(randn(*param.shape, dtype=torch.float32))
    sides = (*_pair_side((4, 2, 6, 3, 5), 6), *_pair_side((3, 5, 4, 6, 2), 6))
    got = CourseModel(model, pad_token_id=0).predict_paraphrase(*sides)
    with torch.no_grad():
        logits = heads["cs224n_para"](*join_pair(*sides, pad_token_id=0)).logits
    compare("predict_paraphrase", got, logits[:, 1] - logits[:, 0], 1e-5)
