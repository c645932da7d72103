"""CPU speed tricks, kept off the reading path: `optimize(model)` swaps them into a plain model, in place.

The model in `course_lib.model` is plain PyTorch (`nn.Linear`, `nn.Dropout`). `optimize` changes the class of
some of its modules to a subclass that computes the same function faster on a CPU: the parameters, the
state_dict keys and the random draws' order stay the same, so a checkpoint loads into either form.
The command line, the sweeps and the benches call it by default (`--no-fast-kernels` to compare).
"""
from __future__ import annotations

from torch import nn

from course_lib.model.bert import Layer
from course_lib.fast.dropout import Dropout
from course_lib.fast.linear import Linear


def optimize(model: nn.Module) -> nn.Module:
    """Every `nn.Dropout` draws from 16-bit lanes; the projections inside the encoder's layers, products over
    every token, run on oneDNN (the pooler's and the heads' small ones stay on `F.linear`). Returns the model."""
    for module in model.modules():
        if type(module) is nn.Dropout:
            module.__class__ = Dropout
    for layer in [m for m in model.modules() if isinstance(m, Layer)]:
        for module in layer.modules():
            if type(module) is nn.Linear:
                module.__class__ = Linear
    return model

