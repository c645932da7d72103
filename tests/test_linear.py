"""The encoder's Linear: the same products as nn.Linear (to fp32 rounding), gradients included."""
import pytest
import torch
import torch.nn.functional as F

from course_lib.fast import linear
from course_lib.fast.linear import Linear

needs_onednn = pytest.mark.skipif(linear._onednn is None, reason="this PyTorch has no oneDNN linear")


def _pair(n_in=384, n_out=1536, seed=0):
    torch.manual_seed(seed)
    ours = Linear(n_in, n_out)
    ref = torch.nn.Linear(n_in, n_out)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


@pytest.fixture
def onednn_calls(monkeypatch):
    """Counts the calls that reach oneDNN, so a test fails if the fast path is silently skipped."""
    calls = []

    def spy(*args):
        calls.append(args[0].shape)
        return linear._onednn(*args)
    monkeypatch.setattr(linear, "_onednn_linear", lambda x, w, b: spy(x, w, b, "none", [], ""))
    return calls


@needs_onednn
def test_forward_matches_nn_linear_against_float64(onednn_calls):
    ours, ref = _pair()
    x = torch.randn(4, 100, 384)
    exact = F.linear(x.double(), ref.weight.double(), ref.bias.double())
    with torch.no_grad():
        got, mkl = ours(x), ref(x)
    assert onednn_calls == [x.shape]
    scale = exact.abs().max().item()
    # both are fp32 sums of 384 products; neither strays beyond fp32 rounding of the output's scale
    assert (got.double() - exact).abs().max().item() < 1e-5 * scale
    assert (got - mkl).abs().max().item() < 1e-5 * scale


@needs_onednn
def test_gradients_match_nn_linear(onednn_calls):
    ours, ref = _pair(1536, 384)
    x = torch.randn(3, 50, 1536)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn(3, 50, 384)
    ours(xa).backward(grad)
    ref(xb).backward(grad)
    assert len(onednn_calls) == 2  # forward and the input gradient
    for a, b in ((xa.grad, xb.grad), (ours.weight.grad, ref.weight.grad), (ours.bias.grad, ref.bias.grad)):
        assert (a - b).abs().max().item() < 1e-5 * b.abs().max().item()


@needs_onednn
def test_non_contiguous_input_and_frozen_weights(onednn_calls):
    ours, ref = _pair(64, 32)
    ours.requires_grad_(False)
    x = torch.randn(8, 10, 64).transpose(0, 1)  # a strided view
    x.requires_grad_()
    ours(x).sum().backward()
    assert ours.weight.grad is None and x.grad.shape == x.shape
    expected = ref.weight.sum(0).expand_as(x)  # d sum(xW^T + b) / dx = column sums of W
    assert torch.allclose(x.grad, expected, atol=1e-5)


def test_falls_back_to_f_linear_off_the_fp32_cpu_path(onednn_calls):
    ours, ref = _pair(32, 16)
    x = torch.randn(5, 32)
    with torch.no_grad():
        assert torch.equal(ours.double()(x.double()), ref.double()(x.double()))
        with torch.autocast("cpu", torch.bfloat16):
            out = ours.float()(x)
    assert out.dtype == torch.bfloat16  # autocast's cast applies: the oneDNN path stepped aside
    assert onednn_calls == []


def test_state_dict_is_nn_linears():
    ours, ref = _pair(8, 4)
    assert list(ours.state_dict()) == list(ref.state_dict()) == ["weight", "bias"]
    assert isinstance(ours, torch.nn.Linear)
