"""Row normalisers: softmax and sparsegen-lin (SSAF), checked against the mathematics and entmax."""
import math

import entmax
import pytest
import torch

from course_lib.methods.asa import ADVERSARIAL_MASK
from course_lib.model.attention import attend, get_normalizer, softmax, sparsity
from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig
from course_lib.model.sparsemax import sparsegen_lin
from course_lib.runtime.errors import UsageError


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
    for mask_value in (torch.finfo(torch.float32).min, -math.inf, ADVERSARIAL_MASK):
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
                     intermediate_size=64, attn_normalizer="sparsegen_lin", attn_normalizer_params={"lam": 0.0})
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


# ---------------------------------------------------------------- sparsegen-lin at every scale, masked, non-finite
# entmax.sparsemax is the oracle throughout: sparsegen_lin(e, lam) must equal sparsemax(e / (1 - lam)) in value
# and in autograd's gradient. The oracle runs in fp64 on the very same logits, so fp32 inputs are held to fp32's
# own rounding near the top of each row, whatever their magnitude; the oracle's rounding of e / (1 - lam) at
# the logits' magnitude is added to the tolerance.

SCALES = (1e-5, 1e-3, 0.1, 1.0, 10.0, 1e3, 1e4, 1e5, 1e6)
ROW_OFFSETS = (0.0, -2e4, -1e6, 3e5)  # sparsemax is translation invariant: rows far below -1e4 are ordinary
DTYPES_AND_LAMBDAS = [pytest.param(dtype, lam, id=f"{str(dtype)[6:]}-lambda{lam}")
                      for dtype in (torch.float32, torch.float64) for lam in (0.0, -2.5)]


def assert_matches_entmax(e: torch.Tensor, lam: float, seed: int = 0) -> torch.Tensor:
    """Forward and autograd gradient of sparsegen_lin(e, lam) against entmax's in fp64; returns e's gradient."""
    eps, eps64 = torch.finfo(e.dtype).eps, torch.finfo(torch.float64).eps
    atol = 64 * (eps + eps64 * e.amax(-1).abs().max().item())
    leaf, leaf_ref = e.detach().clone().requires_grad_(), e.detach().double().requires_grad_()
    p, p_ref = sparsegen_lin(leaf, lam), entmax.sparsemax(leaf_ref / (1 - lam), dim=-1)
    assert p.dtype == e.dtype
    torch.testing.assert_close(p, p_ref.to(e.dtype), atol=atol, rtol=0)
    g = torch.randn(e.shape, generator=torch.Generator().manual_seed(seed), dtype=e.dtype)
    p.backward(g)
    p_ref.backward(g.double())
    torch.testing.assert_close(leaf.grad, leaf_ref.grad.to(e.dtype), atol=64 * eps, rtol=0)
    return leaf.grad


def logits_at(scale: float, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """(4, 6, 24) N(0, scale²) logits, batch element b shifted by ROW_OFFSETS[b]."""
    offsets = torch.tensor(ROW_OFFSETS, dtype=dtype)[:, None, None]  # (4, 1, 1)
    return scores(4, 6, 24, scale=scale, seed=seed, dtype=dtype) + offsets


@pytest.mark.parametrize("dtype,lam", DTYPES_AND_LAMBDAS)
def test_sparsegen_lin_matches_entmax_from_tiny_to_huge_logits(dtype, lam):
    for i, scale in enumerate(SCALES):  # one test per dtype and lambda: a clamp at -1e4 failed the shifted rows
        assert_matches_entmax(logits_at(scale, i, dtype), lam, seed=i)


@pytest.mark.parametrize("dtype,lam", DTYPES_AND_LAMBDAS)
def test_sparsegen_lin_matches_entmax_with_masked_keys_at_every_scale(dtype, lam):
    """-inf, finfo.min, finfo.min + ASA's mask and finfo.min + finfo.min (-inf) get exactly nothing."""
    low = torch.finfo(dtype).min
    mask_values = torch.tensor([-math.inf, low, low + ADVERSARIAL_MASK, low + low], dtype=dtype)
    for i, scale in enumerate(SCALES):
        e = logits_at(scale, 10 + i, dtype)
        masked = torch.rand(e.shape, generator=torch.Generator().manual_seed(i)) < 0.4
        masked[..., 0] = False  # every row keeps a real key
        e = torch.where(masked, mask_values[torch.arange(e.numel()).view(e.shape) % 4], e)
        grad = assert_matches_entmax(e, lam, seed=i)
        assert (sparsegen_lin(e, lam)[masked] == 0).all() and (grad[masked] == 0).all()


@pytest.mark.parametrize("dtype,lam", DTYPES_AND_LAMBDAS)
def test_sparsegen_lin_matches_entmax_on_ties(dtype, lam):
    rows = torch.tensor([[3.0, 3.0, 3.0, 1.0], [1e6, 1e6, -1e6, 0.0], [-2e4, -2e4, -2e4 - 0.5, -3e4],
                         [5.0, 5.0, 5.0, 5.0], [-1e5, -1e5, -1e5, -1e5]], dtype=dtype)
    assert_matches_entmax(rows, lam)
    torch.testing.assert_close(sparsegen_lin(rows[2], 0.0), torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_logits_below_minus_1e4_keep_their_offsets(dtype):
    e = torch.tensor([-20000.0, -20000.5, -30000.0], dtype=dtype)  # a clamp at -1e4 made this uniform
    torch.testing.assert_close(sparsegen_lin(e, 0.0), torch.tensor([0.75, 0.25, 0.0], dtype=dtype))
    torch.testing.assert_close(sparsegen_lin(e, -1.0), torch.tensor([0.625, 0.375, 0.0], dtype=dtype))


@pytest.mark.parametrize("dtype,lam", DTYPES_AND_LAMBDAS)
def test_masked_keys_get_nothing_when_the_row_maximum_is_near_minus_1e4(dtype, lam):
    e = torch.tensor([[-9999.8, -math.inf, -math.inf], [-9999.8, -1e30, -1e30]], dtype=dtype)
    grad = assert_matches_entmax(e, lam)  # a clamp at -1e4 leaked 0.27 onto each masked key
    torch.testing.assert_close(sparsegen_lin(e, lam), torch.tensor([[1.0, 0, 0], [1.0, 0, 0]], dtype=dtype))
    assert (grad == 0).all()  # a support of one key: the output cannot move


@pytest.mark.parametrize("dtype,lam", DTYPES_AND_LAMBDAS)
def test_fully_masked_rows_are_uniform_and_finite(dtype, lam):
    low = torch.finfo(dtype).min
    e = torch.tensor([[-math.inf] * 4, [low] * 4, [low + ADVERSARIAL_MASK] * 4, [low + low] * 4,
                      [low, low + low, low, -math.inf]], dtype=dtype).requires_grad_()
    p = sparsegen_lin(e, lam)
    expected = torch.full((5, 4), 0.25, dtype=dtype)
    expected[4] = torch.tensor([0.5, 0.0, 0.5, 0.0])  # low + low overflows to -inf, and a finite logit beats it
    torch.testing.assert_close(p, expected, atol=0, rtol=0)
    g = torch.randn(5, 4, generator=torch.Generator().manual_seed(0), dtype=dtype)
    p.backward(g)
    assert torch.isfinite(e.grad).all()
    assert (e.grad[e.detach() == -math.inf] == 0).all()  # -inf logits are constants, even in a uniform row
    assert_matches_entmax(e.detach()[1:3], lam)  # finite masks: the exact gradient of a uniform row


@pytest.mark.parametrize("dtype,lam", DTYPES_AND_LAMBDAS)
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_or_inf_scores_give_a_nan_row_not_an_exception(dtype, lam, bad):
    e = scores(3, 2, 20, dtype=dtype)
    e[1, 0, 7] = bad
    e[2, 1, :5] = -math.inf
    e[2, 1, 9] = bad  # a row holding both masked keys and a broken logit
    leaf = e.clone().requires_grad_()
    p = sparsegen_lin(leaf, lam)  # raised IndexError: index -1 is out of bounds
    broken = torch.zeros(3, 2, dtype=torch.bool)
    broken[1, 0] = broken[2, 1] = True
    assert p[broken].isnan().all() and torch.isfinite(p[~broken]).all()
    torch.testing.assert_close(p[~broken], sparsegen_lin(e[~broken], lam))
    p.backward(torch.ones_like(p))
    assert torch.isfinite(leaf.grad[~broken]).all()
    assert not torch.isfinite(p.sum())  # the loss turns non-finite, so the training loop's guard acts
