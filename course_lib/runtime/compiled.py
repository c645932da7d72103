"""The `compile` run option: the model's step eagerly (`off`), through `torch.compile` (`default`), or also
captured as CUDA graphs (`graphs`).

At the papers' shape (batch 32 x 128) a GPU step is bound by kernel launches, not arithmetic: compiling fuses the
small kernels, and a CUDA graph replays a whole step's launches at once. A graph holds fixed shapes, so under
`graphs` each batch is padded to the next of a few lengths (`PAD_LENGTHS`, up to max_len), and a graph is
recorded once per (batch size, length) and replayed after that. Padding is masked: a real token's outputs do
not depend on it, up to the float rounding of the kernels chosen. What each method needs is in docs/speed.md.
"""
from __future__ import annotations

import os

import torch
from torch import nn

from course_lib.runtime.errors import UsageError

PAD_LENGTHS = (32, 64, 96, 128, 192, 256, 384, 512)  # the sequence lengths a `graphs` batch is padded up to
FILL = {"attention_mask": 0, "token_type_ids": 0, "token_labels": -1, "labels": -100}  # input_ids: the pad id
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
    cache_per_cpu_path()
    for module in modules:
        module.compile(dynamic=dynamic, **MODES[how])


def cache_per_cpu_path() -> str:
    """The compiler's on-disk cache, one folder per CPU path unless the user chose one (TORCHINDUCTOR_CACHE_DIR).
    torch's cache does not tell apart code built under ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine from the
    machine's own: loaded later on the other path, it crashed the process (a segfault, torch 2.13)."""
    from torch._inductor.runtime.runtime_utils import default_cache_dir

    default = default_cache_dir()
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR", default) == default:  # unset, or the default torch's config
        #   writes there when it is imported
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(default, torch.backends.cpu.get_cpu_capability())
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def next_length(length: int, max_len: int) -> int:
    """The padded length of a batch whose longest row has `length` tokens: the next of PAD_LENGTHS, never past
    max_len (a batch already longer stays as it is)."""
    cap = max(length, max_len)
    return min(next((n for n in PAD_LENGTHS if n >= length), cap), cap)


def pad_batch(batch: dict, pad_id: int, max_len: int) -> dict:
    """A collated batch padded along its sequence axis (the last) to `next_length`: ids with pad_id, masks and
    token types with 0, per-token labels with their ignore index. Per-example tensors are left alone."""
    shape, fills = batch["input_ids"].shape, {**FILL, "input_ids": pad_id}
    extra = next_length(shape[-1], max_len) - shape[-1]
    if extra == 0:
        return batch
    return {key: nn.functional.pad(value, (0, extra), value=fills[key])
            if key in fills and value.shape == shape else value for key, value in batch.items()}


def step_collate(collate, how: str, max_len: int):
    """A task family's collate for training steps: under `graphs`, its batches padded to `next_length`."""
    if how != "graphs":
        return collate
    return lambda features, pad_id: pad_batch(collate(features, pad_id), pad_id, max_len)
