"""The encoder's projections: `nn.Linear`, with its fp32 CPU matrix products done by oneDNN.

PyTorch's CPU `F.linear` calls MKL's sgemm. For BERT's shapes (thousands of tokens x 384-1536 features)
oneDNN's matmul, which PyTorch also ships, ran 5-15% faster on this machine's AMD EPYC cores, and the
projections are about 80% of an encoder pass. The results are the same fp32 products summed in another
order (largest difference to F.linear about 1e-6 of the output's scale; tests/test_linear.py).

Everything else falls back to `F.linear`: GPUs, other dtypes, autocast (whose casting applies to `F.linear`
only), a PyTorch built without oneDNN. Parameters and state_dict keys are `nn.Linear`'s, so checkpoints and
Hugging Face weights load unchanged.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_onednn = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias by oneDNN; x is (..., in), weight (out, in), all contiguous fp32 on the CPU."""
    return _onednn(x, weight, bias, "none", [], "")


class _OneDNNLinearFunction(torch.autograd.Function):
    """Forward and input gradient by oneDNN; the weight gradient by torch.mm (oneDNN would need both its
    operands transposed and copied, which cost more than it saved)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return _onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad2d = grad.reshape(-1, grad.shape[-1]).contiguous()  # (tokens, out)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _onednn_linear(grad2d, weight.t().contiguous(), None).view(*grad.shape[:-1], weight.shape[1])
        if ctx.needs_input_grad[1]:
            grad_w = grad2d.t() @ x.reshape(-1, x.shape[-1])
        if ctx.needs_input_grad[2]:  # False when there is no bias
            grad_b = grad2d.sum(0)
        return grad_x, grad_w, grad_b


def uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """True where the oneDNN path applies: fp32 CPU tensors, no autocast, a PyTorch with oneDNN."""
    return (_onednn is not None and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu"))


class Linear(nn.Linear):
    """`nn.Linear` whose fp32 CPU products run on oneDNN (see the module docstring); elsewhere `F.linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not uses_onednn(x, self.weight):
            return F.linear(x, self.weight, self.bias)
        return _OneDNNLinearFunction.apply(x.contiguous(), self.weight, self.bias)  # records nothing under no_grad
