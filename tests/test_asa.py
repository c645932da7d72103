"""ASA (Wu et al. 2023): gradient reversal, the straight-through step, the divergence, the tau trend."""
import itertools
import math

import pytest
import torch

from course_lib.methods.asa import (ADVERSARIAL_MASK, ASAClassifier, ASATokenClassifier, Adversary, binarize,
                                   fully_cut_rows, grad_reverse, symmetric_kl)
from course_lib.model.attention import ScoreCut, attend
from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig
from course_lib.model.heads import SequenceClassifier


def tiny_encoder(seed=0):
    torch.manual_seed(seed)
    return BertModel(BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=32))


def tiny_batch(seed=0, B=6, L=10):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 200, (B, L), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    mask[1, 8:] = 0
    return ids, mask, torch.randint(0, 2, (B,), generator=g)


def test_gradient_reversal_is_identity_forward_and_negation_backward():
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    y = grad_reverse(x)
    assert torch.equal(y, x)
    w = torch.randn(4, 5, dtype=torch.float64)
    (y * w).sum().backward()
    assert torch.equal(x.grad, -w)


def test_adversary_scores_are_the_projections_dot_product():
    """The product-matrix form equals (W_q h + b_q)(W_k h + b_k)^T / sqrt(d), values and weight gradients."""
    torch.manual_seed(0)
    adversary = Adversary(16).double()
    for lin in (adversary.query, adversary.key):  # nonzero biases, so every term of the expansion is exercised
        torch.nn.init.normal_(lin.bias)
    h = torch.randn(3, 7, 16, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.float64)
    mask[0, 5:] = 0
    weights = torch.randn(3, 7, 7, dtype=torch.float64)
    got = adversary(h, mask)
    (got * weights).sum().backward()
    fast = [p.grad.clone() for p in adversary.parameters()]
    adversary.zero_grad()
    want = adversary.query(h) @ adversary.key(h).transpose(-2, -1) / 4.0 + (1 - mask[:, None, :]) * ADVERSARIAL_MASK
    (want * weights).sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-9)
    for g, p in zip(fast, adversary.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-12, atol=1e-12)


def test_straight_through_step():
    x = torch.tensor([-2.0, -1e-3, 0.0, 1e-3, 3.0], requires_grad=True)
    keep = binarize(x)
    assert keep.tolist() == [0.0, 0.0, 0.5, 1.0, 1.0]
    keep.sum().backward()
    s = torch.sigmoid(x.detach())
    assert torch.equal(x.grad, s * (1 - s))
    z = torch.randn(100)
    assert torch.equal(binarize(z), binarize(z))  # the authors' step is deterministic


def test_logistic_noise_keeps_with_probability_sigmoid():
    torch.manual_seed(0)
    x = torch.tensor([-1.0, 0.0, 2.0]).repeat(100_000, 1)
    p = binarize(x, noise="logistic").mean(0)
    expected = torch.sigmoid(torch.tensor([-1.0, 0.0, 2.0]))
    stderr = (expected * (1 - expected) / 100_000).sqrt()
    assert ((p - expected).abs() < 3 * stderr).all(), (p, expected)


def test_symmetric_kl_identities():
    a, b = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64)
    assert symmetric_kl(a, a).abs() < 1e-12
    torch.testing.assert_close(symmetric_kl(a, b), symmetric_kl(b, a))
    assert symmetric_kl(a, b) > 0
    torch.testing.assert_close(symmetric_kl(a + 5.0, b), symmetric_kl(a, b))
    pa, pb = a.softmax(-1), b.softmax(-1)
    by_hand = 0.5 * ((pa * (pa / pb).log()).sum(-1) + (pb * (pb / pa).log()).sum(-1)).mean()
    torch.testing.assert_close(symmetric_kl(a, b), by_hand)


def tagger_logits_and_labels(seed=0, B=3, L=7, C=5):
    """Clean and attacked tag logits of a batch with padding, and labels scoring some positions only."""
    g = torch.Generator().manual_seed(seed)
    clean, attacked = (torch.randn(B, L, C, generator=g, dtype=torch.float64) for _ in range(2))
    labels = torch.randint(0, C, (B, L), generator=g)
    labels[:, 0] = -100  # [CLS]
    labels[0, 3:] = -100  # a short sentence: later positions are sub-words or padding
    labels[1, 1::2] = -100
    return clean, attacked, labels


@pytest.mark.parametrize("reduction", ["window-sum", "word-mean"])
def test_tagger_divergence_reductions(reduction):
    """window-sum is the per-token symmetric KL summed over every position and divided by the batch (the authors'
    code); word-mean is its mean over the scored words, each token's KL computed on its own here."""
    clean, attacked, labels = tagger_logits_and_labels()
    tagger = ASATokenClassifier(tiny_encoder(), 5, mode="bernoulli", tagging_divergence=reduction)
    per_token = {(b, t): symmetric_kl(clean[b, t][None], attacked[b, t][None])
                 for b in range(clean.shape[0]) for t in range(clean.shape[1])}
    scored = [kl for (b, t), kl in per_token.items() if labels[b, t] != -100]
    expected = {"window-sum": sum(per_token.values()) / clean.shape[0], "word-mean": sum(scored) / len(scored)}
    torch.testing.assert_close(tagger.divergence(clean, attacked, labels), expected[reduction])


def test_word_mean_reads_only_the_scored_words_and_window_sum_reads_every_position():
    clean, attacked, labels = tagger_logits_and_labels(seed=1)
    moved = attacked.clone()
    moved[labels == -100] += torch.randn_like(moved[labels == -100])  # padding and sub-words change only
    word_mean, window_sum = (ASATokenClassifier(tiny_encoder(), 5, mode="bernoulli", tagging_divergence=reduction)
                             for reduction in ("word-mean", "window-sum"))
    for model, unchanged in ((word_mean, True), (window_sum, False)):
        same = torch.isclose(model.divergence(clean, moved, labels), model.divergence(clean, attacked, labels))
        assert bool(same) == unchanged


def test_eval_mode_is_bitwise_vanilla():
    ids, mask, _ = tiny_batch()
    asa = ASAClassifier(tiny_encoder(), 2, mode="asa").eval()
    vanilla = SequenceClassifier(tiny_encoder(), 2).eval()
    vanilla.load_state_dict({k: v for k, v in asa.state_dict().items() if not k.startswith("adversaries.")})
    with torch.no_grad():
        assert torch.equal(asa(ids, mask).logits, vanilla(ids, mask).logits)


def test_adversarial_pass_masks_are_binary_and_cut_units_get_no_attention():
    ids, mask, labels = tiny_batch()
    model = ASAClassifier(tiny_encoder(), 2, mode="asa").train()
    with model.adversarial_pass(mask) as keeps:
        _, out = model.logits(ids, mask, output_attentions=True)
    assert len(keeps) == 3
    for keep, probs in zip(keeps, out.attentions):
        assert set(keep.unique().tolist()) <= {0.0, 1.0}
        assert (keep[0, :, 6:] == 0).all()  # padded keys are never kept
        cut = (keep == 0)[:, None].expand_as(probs)
        has_kept_key = (keep.sum(-1) > 0)[:, None, :, None].expand_as(probs)
        assert (probs[cut & has_kept_key] < 1e-30).all()
    assert ADVERSARIAL_MASK == -1e4


def test_training_loss_and_stats():
    ids, mask, labels = tiny_batch()
    model = ASAClassifier(tiny_encoder(), 2, mode="asa").train()
    out = model(ids, mask, labels=labels)
    assert len(out.stats["masked_fraction"]) == 3 and out.stats["divergence"] >= 0
    out.loss.backward()
    grads = [p.grad for p in model.adversaries.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def masked_after_training(tau: float, steps: int = 25) -> float:
    """Train only the adversaries against a frozen tiny model; return the mean masked fraction."""
    ids, mask, labels = tiny_batch(seed=1, B=16, L=12)
    model = ASAClassifier(tiny_encoder(seed=2), 2, mode="asa", asa_tau=tau, dropout=0.0)
    model.encoder.config.hidden_dropout_prob = 0.0
    for module in model.encoder.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    torch.manual_seed(3)
    for p in model.adversaries.parameters():
        torch.nn.init.normal_(p, std=0.3)
    opt = torch.optim.SGD(model.adversaries.parameters(), lr=0.05)
    model.train()
    fractions = []
    for _ in range(steps):
        out = model(ids, mask, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        fractions.append(float(sum(out.stats["masked_fraction"])) / 3)
    return sum(fractions[-5:]) / 5


def test_lower_tau_masks_more():
    """Paper Fig. 4b / §Temperature: a lower tau is a stronger attack with a higher masking proportion."""
    fractions = [masked_after_training(tau) for tau in (0.1, 0.3, 1.0)]
    assert fractions[0] >= fractions[1] - 0.01 and fractions[1] >= fractions[2] - 0.01, fractions
    assert fractions[0] > fractions[2], fractions


def test_bernoulli_baseline_cuts_about_p():
    ids, mask, labels = tiny_batch(B=32, L=16)
    torch.manual_seed(0)
    model = ASAClassifier(tiny_encoder(), 2, mode="bernoulli", bernoulli_p=0.1).train()
    out = model(ids, mask, labels=labels)
    assert all(0.06 < f < 0.14 for f in out.stats["masked_fraction"]), out.stats
    assert not hasattr(model, "adversaries")


@pytest.mark.parametrize("num_labels", [1, 3])
def test_regression_and_multiclass(num_labels):
    ids, mask, _ = tiny_batch()
    labels = torch.rand(6) * 5 if num_labels == 1 else torch.randint(0, 3, (6,))
    out = ASAClassifier(tiny_encoder(), num_labels, mode="asa").train()(ids, mask, labels=labels)
    assert torch.isfinite(out.loss)


def test_a_row_with_every_key_cut_is_not_nan():
    """If the adversary cuts every key of a row, the row is uniform, not NaN (spec 5.2, item 8)."""
    ids, mask, labels = tiny_batch()
    model = ASAClassifier(tiny_encoder(), 2, mode="asa").train()
    for adversary in model.adversaries:
        torch.nn.init.zeros_(adversary.query.weight)
        torch.nn.init.zeros_(adversary.key.weight)
        torch.nn.init.constant_(adversary.query.bias, 1.0)
        torch.nn.init.constant_(adversary.key.bias, -1.0)  # X = -d/sqrt(d) < 0: every unit is cut
    out = model(ids, mask, labels=labels)
    assert out.stats["masked_fraction"] == [1.0, 1.0, 1.0]
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def _step_with_gradients(model, grads: dict, clip_scope: str) -> dict:
    """One guarded step (SGD, lr 1, clip at 1.0) whose gradient is exactly `grads`; return each parameter's
    update, keyed by name."""
    from accelerate import Accelerator

    from course_lib.methods.registry import get_method
    from course_lib.training.config import FinetuneConfig
    from course_lib.training.loop import guarded_step

    cfg = FinetuneConfig.from_dict({"method": "asa", "asa_clip_scope": clip_scope})
    clipped = get_method("asa").clip_scope(cfg, model) if hasattr(model, "adversaries") else None
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = sum((p * grads[n]).sum() for n, p in model.named_parameters())  # d loss / d p = grads[n]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    guarded_step(loss, loss.detach(), Accelerator(cpu=True), model, optimizer, 1.0, clipped)
    return {n: p.detach() - before[n] for n, p in model.named_parameters()}


@pytest.mark.parametrize("adversary_scale", [1e-3, 1.0, 1e3])
def test_the_clip_leaves_the_adversaries_out(adversary_scale):
    """Whatever the adversaries' gradient, ASA's encoder and head take vanilla's clipped update of the same
    gradient (`asa_clip_scope=learner`); clipping every parameter (`all`, the old recipe) does not."""
    asa = ASAClassifier(tiny_encoder(), 2, mode="asa")
    vanilla = SequenceClassifier(tiny_encoder(), 2)
    vanilla.load_state_dict({k: v for k, v in asa.state_dict().items() if not k.startswith("adversaries.")})
    g = torch.Generator().manual_seed(0)
    grads = {n: torch.randn(p.shape, generator=g) * (adversary_scale if n.startswith("adversaries.") else 1.0)
             for n, p in asa.named_parameters()}
    expected = _step_with_gradients(vanilla, grads, "learner")
    for scope in ("learner", "all"):
        model = ASAClassifier(tiny_encoder(), 2, mode="asa")
        model.load_state_dict(asa.state_dict())
        update = _step_with_gradients(model, grads, scope)
        same = all(torch.allclose(update[n], expected[n], rtol=1e-6, atol=1e-9) for n in expected)
        if scope == "learner" or adversary_scale >= 1:  # a small adversary gradient barely moves the global norm
            assert same == (scope == "learner"), (scope, adversary_scale)


@pytest.mark.stored_numbers
def test_the_regression_divergence_matches_the_authors_code():
    """Numbers from the authors' `divergence` (gingasan/adversarialSA, commit 049af10, modeling/utils.py), run on
    these (B, 1) scores in float64 in a scratch folder outside this repository: the value and both gradients.
    Regenerated by `.venv/bin/python tests/references/asa_divergence.py --authors-checkout /path/to/adversarialSA`."""
    clean = torch.tensor([[0.5], [1.25], [-0.375], [2.0], [3.5]], dtype=torch.float64, requires_grad=True)
    adversarial = torch.tensor([[0.75], [1.0], [0.125], [2.5], [3.0]], dtype=torch.float64, requires_grad=True)
    model = ASAClassifier(tiny_encoder(), 1, mode="asa")
    assert model.regression_divergence.__name__ == "_batch_softmax"  # the default
    value = model.divergence(clean, adversarial)
    value.backward()
    assert value.item() == pytest.approx(0.018769991389905018, rel=1e-12)
    authors_clean_grad = [-0.003864629215510778, 0.00019718538475635135, -0.002637406663489699,
                          -0.028354793816223384, 0.034659644310467516]
    authors_adversarial_grad = [0.0038740724064302043, -0.001544367950181205, 0.0032358575694969556,
                                0.03478874739792673, -0.04035430942367269]
    assert clean.grad.view(-1).tolist() == pytest.approx(authors_clean_grad, rel=1e-10)
    assert adversarial.grad.view(-1).tolist() == pytest.approx(authors_adversarial_grad, rel=1e-10)
    shifted = model.divergence(clean.detach() + 3.0, adversarial.detach() + 3.0)
    assert shifted.item() == pytest.approx(value.item(), rel=1e-12)  # a common shift changes nothing


def test_the_squared_regression_divergence_is_the_mean_squared_difference():
    clean, adversarial = torch.randn(6, 1), torch.randn(6, 1)
    model = ASAClassifier(tiny_encoder(), 1, mode="asa", regression_divergence="squared")
    assert torch.allclose(model.divergence(clean, adversarial), ((clean - adversarial) ** 2).mean())


def _direct_cut_attention(q, k, v, keep):
    """Row by row: softmax over the kept keys, or uniform over all L keys when none is kept."""
    B, H, L, _ = q.shape
    out = torch.zeros_like(q)
    for b, h, i in itertools.product(range(B), range(H), range(L)):
        kept = keep[b, 0, i].bool()
        if not kept.any():
            out[b, h, i] = v[b, h].mean(0)
            continue
        scores = (k[b, h][kept] @ q[b, h, i]) / math.sqrt(q.shape[-1])
        out[b, h, i] = torch.softmax(scores, 0) @ v[b, h][kept]
    return out


def test_a_score_cut_replaces_scores_so_a_fully_cut_row_is_uniform():
    """ScoreCut (the authors' rule) against a direct computation; no gradient reaches a cut unit's score."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    keep = (torch.rand(2, 1, 5, 5, generator=g) > 0.4).double()
    keep[0, 0, 1] = 0  # a fully cut row
    keep[1, 0, 3] = 0
    keep[1, 0, 3, 2] = 1  # a row with one key kept
    got, _ = attend(q, k, v, ScoreCut(keep))
    torch.testing.assert_close(got, _direct_cut_attention(q, k, v, keep), rtol=1e-12, atol=1e-12)
    got[0, :, 1].sum().backward()  # the fully cut row reads every value, and no query or key
    assert q.grad.abs().sum() == 0 and k.grad.abs().sum() == 0
    assert (v.grad[0] == 1 / 5).all() and (v.grad[1] == 0).all()


def _all_cut(model):
    for adversary in model.adversaries:  # X = -d/sqrt(d) < 0 everywhere: every unit is cut
        torch.nn.init.zeros_(adversary.query.weight)
        torch.nn.init.zeros_(adversary.key.weight)
        torch.nn.init.constant_(adversary.query.bias, 1.0)
        torch.nn.init.constant_(adversary.key.bias, -1.0)
    return model


@pytest.mark.parametrize("cut_row", ["uniform", "clean"])
def test_the_cut_row_rule_when_the_adversary_cuts_everything(cut_row):
    """uniform: every layer attends uniformly over all L positions, padding included, as a model whose queries are
    zero and that has no padding mask; clean: every row keeps its clean attention, so the pass is the clean one."""
    ids, mask, _ = tiny_batch()
    model = _all_cut(ASAClassifier(tiny_encoder(), 2, mode="asa", cut_row=cut_row)).eval()
    with torch.no_grad():
        with model.adversarial_pass(mask):
            adversarial, _ = model.logits(ids, mask)
        if cut_row == "clean":
            want, _ = model.logits(ids, mask)
        else:
            d = model.encoder.config.hidden_size
            for layer in model.encoder.layers:  # the fused projection's first d rows are the queries
                layer.attention.qkv.weight[:d] = 0
                layer.attention.qkv.bias[:d] = 0
            want, _ = model.logits(ids, None)
    torch.testing.assert_close(adversarial, want, rtol=1e-5, atol=1e-6)


def test_fully_cut_rows_are_counted_over_real_queries_and_keys():
    keep = torch.ones(1, 4, 4)
    keep[0, 0, :3] = 0  # row 0: its real keys (0-2) all cut, the padded key 3 kept
    keep[0, 1, :2] = 0  # row 1: key 2 kept
    mask = torch.tensor([[1, 1, 1, 0]])
    assert fully_cut_rows(keep, mask) == pytest.approx(1 / 3)


def test_a_bernoulli_uniform_cut_still_cuts_padding():
    ids, mask, _ = tiny_batch()
    model = ASAClassifier(tiny_encoder(), 2, mode="bernoulli", bernoulli_p=0.5).train()
    torch.manual_seed(0)
    with model.adversarial_pass(mask):
        _, out = model.logits(ids, mask, output_attentions=True)
    for probs in out.attentions:
        assert (probs[0, :, :6, 6:] == 0).all()  # real queries of sequence 0 give its padding nothing


def test_adversarial_pass_removes_its_hooks_on_exit_and_on_error():
    """The cuts live in forward pre-hooks for the pass only: after it, even one left by an exception, the encoder
    computes the clean logits again."""
    ids, mask, _ = tiny_batch()
    model = ASAClassifier(tiny_encoder(), 2, mode="bernoulli", bernoulli_p=0.5).eval()
    with torch.no_grad():
        clean, _ = model.logits(ids, mask)
        with pytest.raises(KeyboardInterrupt):
            with model.adversarial_pass(mask):
                raise KeyboardInterrupt
        with model.adversarial_pass(mask) as keeps:
            cut, _ = model.logits(ids, mask)
        after, _ = model.logits(ids, mask)
    assert len(keeps) == len(model.encoder.layers) and not torch.equal(cut, clean)
    assert torch.equal(after, clean) and not any(layer._forward_pre_hooks for layer in model.encoder.layers)


def test_a_default_asa_run_clips_what_vanilla_clips_and_never_the_adversaries():
    """docs/methods.md's recipe table: the authors' scripts never clip; ours clips the encoder and the head at
    max_grad_norm as vanilla does (asa_clip_scope's default, `learner`), and `all` adds the adversaries."""
    from types import SimpleNamespace

    from course_lib.methods.registry import get_method
    from course_lib.tasks.sentence import SENTENCE
    from course_lib.training.config import FinetuneConfig

    task = SimpleNamespace(family=SENTENCE, num_labels=2)
    cfg = FinetuneConfig.from_dict({"method": "asa"})
    asa = get_method("asa")
    model = asa.build_model(cfg, tiny_encoder(), task, None)
    learner = {id(p) for name, p in model.named_parameters() if not name.startswith("adversaries.")}
    assert cfg.options.asa_clip_scope == "learner"
    assert {id(p) for p in asa.clip_scope(cfg, model)} == learner
    everything = FinetuneConfig.from_dict({"method": "asa", "asa_clip_scope": "all"})
    assert asa.clip_scope(everything, model) is None  # None: the loop clips every parameter
    assert get_method("vanilla").clip_scope(FinetuneConfig(), model) is None
