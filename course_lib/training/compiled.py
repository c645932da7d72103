"""The `compile` run option: the model's step eagerly (`off`), through `torch.compile` (`default`), or also
captured as CUDA graphs (`graphs`).

At the papers' shape (batch 32 x 128) a GPU step is bound by kernel launches, not arithmetic: compiling fuses the
small kernels, and a CUDA graph replays a whole step's launches at once. A graph holds fixed shapes, so under
`graphs` each batch is padded to the next of a few lengths (`PAD_LENGTHS`, up to max_len), and a graph is
recorded once per (batch size, length) and replayed after that. Padding is masked: a real token's outputs do
not depend on it, up to the float rounding of the kernels chosen. What each method needs is in docs/speed.md.
"""
from __future__ import annotations

import torch
from torch import nn

from course_lib.errors import UsageError

PAD_LENGTHS = (32, 64, 96, 128, 192, 256, 384, 512)  # the sequence lengths a `graphs` batch is padded up to
FILL = {"input_ids": None, "attention_mask": 0, "token_type_ids": 0, "token_labels": -1, "labels": -100}
MODES = {"default": {}, "graphs": {"mode": "reduce-overhead"}}


def check_compile(how: str) -> None:
    """Before any data or model: CUDA graphs need a CUDA GPU (like fp16, a setting a laptop cannot honour)."""
    if how == "graphs" and not torch.cuda.is_available():
        raise UsageError("compile 'graphs' needs a CUDA GPU and none is available: CUDA graphs run on GPUs only "
                         "(valid here: off, default)")


def compile_modules(modules: list[nn.Module], how: str, dynamic: bool | None = None) -> None:
    """Compile each module's forward in place (`nn.Module.compile`: its parameters and state_dict keys stay as
    they are, so checkpoints and exports do not change). dynamic=True: shapes that change every step (pre-
    training's count of predicted tokens) are traced symbolically instead of recompiling."""
    if how == "off":
        return
    for module in modules:
        module.compile(dynamic=dynamic, **MODES[how])


def next_length(length: int, max_len: int) -> int:
    """The padded length of a batch whose longest row has `length` tokens."""
    return next((n for n in PAD_LENGTHS if n >= length), max(length, max_len))


def pad_batch(batch: dict, pad_id: int, max_len: int) -> dict:
    """A collated batch padded along its sequence axis (the last) to `next_length`: ids with pad_id, masks and
    token types with 0, per-token labels with their ignore index. Per-example tensors are left alone."""
    length = batch["input_ids"].shape[-1]
    target = min(next_length(length, max_len), max(length, max_len))
    if target == length:
        return batch
    padded = {}
    for key, value in batch.items():
        per_token = key in FILL and value.ndim >= 2 and value.shape[-1] == length and value.shape == batch[
            "input_ids"].shape
        fill = pad_id if FILL.get(key) is None else FILL[key]
        padded[key] = nn.functional.pad(value, (0, target - length), value=fill) if per_token else value
    return padded


def step_collate(collate, how: str, max_len: int):
    """A task family's collate for training steps: under `graphs`, its batches padded to `next_length`."""
    if how != "graphs":
        return collate
    return lambda features, pad_id: pad_batch(collate(features, pad_id), pad_id, max_len)
