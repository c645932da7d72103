"""Row normalisers: softmax and sparsegen-lin (SSAF), checked against the mathematics and entmax."""
import math

import entmax
import pytest
import torch

from course_lib.attention import MASK_FLOOR, attend, get_normalizer, softmax, sparsegen_lin, sparsity
from course_lib.bert import BertModel
from course_lib.config import BertConfig
from course_lib.errors import UsageError


def scores(*shape, scale=2.0, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype) * scale


@pytest.mark.parametrize("lam", [0.0, -1.0, -4.0, 0.5])
def test_sparsegen_lin_is_sparsemax_of_scaled_scores(lam):
    e = scores(3, 4, 16, 16).requires_grad_()
    e_ref = e.detach().clone().requires_grad_()
    p, p_ref = sparsegen_lin(e, lam), entmax.sparsemax(e_ref / (1 - lam), dim=-1)
    torch.testing.assert_close(p, p_ref, atol=1e-6, rtol=0)
    g = torch.randn_like(p)
    p.backward(g)
    p_ref.backward(g)
    torch.testing.assert_close(e.grad, e_ref.grad, atol=1e-6, rtol=0)


def test_gradcheck():
    e = scores(2, 3, 7, seed=1).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: sparsegen_lin(x, -2.0), (e,))


def test_simplex_translation_invariance_and_known_values():
    e = scores(5, 32)
    p = sparsegen_lin(e, -1.0)
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(5, dtype=p.dtype))
    torch.testing.assert_close(sparsegen_lin(e + 3.7, -1.0), p)
    assert not torch.allclose(sparsegen_lin(2 * e, -1.0), p)  # not scale invariant
    torch.testing.assert_close(sparsegen_lin(torch.tensor([-2.0, 0.0, 0.5]), 0.0), torch.tensor([0.0, 0.25, 0.75]))
    a, b, lam = 0.3, -0.1, -2.0  # two entries: p1 = clip(((e1 - e2) / (1 - lam) + 1) / 2, 0, 1)
    torch.testing.assert_close(sparsegen_lin(torch.tensor([a, b]), lam)[0],
                               torch.tensor(min(max(((a - b) / (1 - lam) + 1) / 2, 0.0), 1.0)))


def test_full_support_closed_form():
    e, lam = scores(8, scale=0.01, dtype=torch.float64), -3.0
    assert ((e - e.mean()) > -(1 - lam) / 8).all()
    torch.testing.assert_close(sparsegen_lin(e, lam), 1 / 8 + (e - e.mean()) / (1 - lam))


def test_support_grows_as_lambda_falls():
    e = scores(64, 128)
    nnz = [(sparsegen_lin(e, lam) > 0).sum(-1).float().mean().item() for lam in (0.5, 0, -1, -3, -6, -8)]
    assert all(a <= b for a, b in zip(nnz, nnz[1:])), nnz
    assert nnz[0] >= 1


def test_masked_keys_are_exactly_zero_and_a_fully_masked_row_is_not_nan():
    e = scores(2, 10, dtype=torch.float32)
    for mask_value in (torch.finfo(torch.float32).min, -math.inf, MASK_FLOOR):
        masked = e.clone()
        masked[:, 6:] = mask_value
        p = sparsegen_lin(masked, -4.0)
        assert (p[:, 6:] == 0).all()
        torch.testing.assert_close(p[:, :6], sparsegen_lin(e[:, :6], -4.0))
        everything = torch.full((1, 10), mask_value)
        row = sparsegen_lin(everything, -4.0)
        assert torch.isfinite(row).all() and torch.allclose(row.sum(), torch.tensor(1.0))


def test_sparsegen_lin_runs_in_fp32_under_half_precision():
    e = scores(4, 128, dtype=torch.float32)
    half = sparsegen_lin(e.bfloat16(), -4.0)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), sparsegen_lin(e.bfloat16().float(), -4.0), atol=4e-3, rtol=0)


def test_bad_lambda_and_unknown_normaliser():
    with pytest.raises(UsageError, match="must be < 1"):
        sparsegen_lin(scores(3), 1.0)
    with pytest.raises(UsageError, match="unknown attention normaliser 'entmax' \\(valid: softmax, sparsegen_lin\\)"):
        get_normalizer("entmax")


def test_attend_fast_path_equals_reference():
    q, k, v = (scores(2, 3, 5, 4, seed=s, dtype=torch.float32) for s in range(3))
    bias = torch.zeros(2, 1, 1, 5)
    bias[1, ..., 3:] = torch.finfo(torch.float32).min
    fast, _ = attend(q, k, v, bias, softmax)
    slow, probs = attend(q, k, v, bias, softmax, need_weights=True)
    torch.testing.assert_close(fast, slow)
    assert (probs[1, ..., 3:] < 1e-30).all()


def test_model_with_sparse_attention_gives_sparse_maps():
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, attn_normalizer="sparsegen_lin", sparsegen_lambda=0.0)
    model = BertModel(cfg).eval()
    ids = torch.randint(1, 100, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0
    out = model(ids, mask, output_attentions=True)
    for probs in out.attentions:
        torch.testing.assert_close(probs.sum(-1), torch.ones(3, 4, 12))
        assert (probs[0, :, :, 8:] == 0).all()
        frac = sparsity(probs, mask)
        assert frac.shape == (4,) and ((0 <= frac) & (frac < 1)).all()
    out.last_hidden_state.sum().backward()  # the closed-form backward runs inside the model
    assert torch.isfinite(model.layers[0].attention.qkv.weight.grad).all()


@pytest.mark.parametrize("scale", [2.0, 0.05])  # supports inside the first top-k, and far wider (the redo path)
def test_sparsegen_lin_matches_entmax_on_long_rows_and_another_axis(scale):
    e = scores(3, 200, 5, scale=scale).requires_grad_()  # rows along dim 1, longer than SPARSEMAX_TOP_K
    e_ref = e.detach().clone().requires_grad_()
    p, p_ref = sparsegen_lin(e, -2.0, dim=1), entmax.sparsemax(e_ref / 3.0, dim=1)
    torch.testing.assert_close(p, p_ref, atol=1e-6, rtol=0)
    g = torch.randn_like(p)
    p.backward(g)
    p_ref.backward(g)
    torch.testing.assert_close(e.grad, e_ref.grad, atol=1e-6, rtol=0)
    assert ((p > 0).sum(1) > 16).any() == (scale < 1)


def test_fully_masked_row_passes_no_gradient_to_logits_below_the_floor():
    e = torch.full((2, 40), -1e30, dtype=torch.float64)
    e[1, :5] = scores(5)
    e[0, 0] = MASK_FLOOR  # at the floor itself the gradient passes, as clamp's does
    e.requires_grad_()
    e_ref = e.detach().clone().requires_grad_()
    g = scores(2, 40, seed=3)
    sparsegen_lin(e, -1.0).backward(g)
    entmax.sparsemax(e_ref.clamp_min(MASK_FLOOR) / 2.0, dim=-1).backward(g)
    torch.testing.assert_close(e.grad, e_ref.grad, atol=1e-12, rtol=0)
    assert (e.grad[:, 5:] == 0).all() and e.grad[0, 0] != 0
