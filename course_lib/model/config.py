"""The encoder's shape (`BertConfig`) and the validation every config dataclass shares.

The same fields serve the CLI, notebook parameters and YAML files: `from_dict` rejects unknown keys and
wrong types with a `UsageError` that names the bad key and the valid ones (papermill checks neither).
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass

from course_lib.errors import UsageError

MIXED_PRECISION = ("no", "fp16", "bf16")  # accelerate's autocast modes; fp16 needs a CUDA GPU


def _check_type(cls_name: str, name: str, value, annotation) -> None:
    """Raise if `value` does not fit the field's annotation (int is accepted where float is expected)."""
    allowed = typing.get_args(annotation) or (annotation,)
    allowed = tuple(t for t in allowed if isinstance(t, type))
    if float in allowed:
        allowed = allowed + (int,)
    if value is None and type(None) in allowed:
        return
    if isinstance(value, bool) and bool not in allowed:
        ok = False
    else:
        ok = isinstance(value, allowed)
    if not ok:
        names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
        raise UsageError(f"{cls_name}.{name} must be {names}, got {value!r} ({type(value).__name__})")


class Validated:
    """Mixin: type checks on construction plus `from_dict` that refuses unknown keys."""

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            _check_type(type(self).__name__, f.name, getattr(self, f.name), hints[f.name])
            if hints[f.name] is float and isinstance(getattr(self, f.name), int):
                setattr(self, f.name, float(getattr(self, f.name)))
        self.validate()

    def validate(self) -> None:
        """Range checks beyond types; subclasses override."""

    @classmethod
    def from_dict(cls, values: dict):
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - valid)
        if unknown:
            raise UsageError(f"unknown {cls.__name__} option {unknown[0]!r} (valid: {', '.join(sorted(valid))})")
        return cls(**values)

    @classmethod
    def from_params(cls, params, **overrides):
        """The config of a notebook's run: each parameter named like a field (`params`: what
        `nb.parameters(globals())` returns, or a dict), then `overrides`, checked by `from_dict`.

        Why: the parameters cell, the preset files and these dataclasses share field names, so a config cell
        takes the parameters by name instead of restating them (a restated list drifts when a field is added).
        Parameters that are no field (`preset`, `seeds`) are the notebook's own; `output_dir` is taken, and a
        grid of runs puts its run folders under it. The cells' literal conventions are read here, once: "" is
        None where the field takes None (`model = ""`: the packaged model), and a list is a comma list where
        the field is a string (`tasks = ["sst2", "rte"]`: "sst2,rte").
        """
        values = params if isinstance(params, dict) else vars(params)
        names, hints = {f.name for f in dataclasses.fields(cls)}, typing.get_type_hints(cls)
        chosen = {**{k: v for k, v in values.items() if k in names}, **overrides}  # unknown overrides: from_dict
        return cls.from_dict({k: _notebook_literal(v, hints[k]) if k in names else v for k, v in chosen.items()})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def defaults(self) -> dict:
        """Each field's value when not given, as this config resolves it; what a field missing from a run saved
        before the field existed counts as. Subclasses whose defaults depend on a field override this."""
        return type(self)().to_dict()


def first_difference(saved: dict, config) -> str | None:
    """The first field (by name), output_dir aside, where a saved run's config differs from `config` (a
    Validated config or any with `to_dict` and `defaults`), else None. A field the saved config lacks counts as
    its default, so adding an option never orphans old runs."""
    mine, defaults = config.to_dict(), config.defaults()
    diff = sorted(k for k in mine if k != "output_dir" and saved.get(k, defaults.get(k)) != mine[k])
    return diff[0] if diff else None


def _notebook_literal(value, annotation):
    """A notebook parameter as the field takes it: "" is None for a field that takes None, a list a comma list
    for a str field (`Validated.from_params`)."""
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    allowed = typing.get_args(annotation) if is_union else (annotation,)
    if isinstance(value, str) and value == "" and type(None) in allowed:
        return None
    if isinstance(value, list) and str in allowed:
        return ",".join(str(item) for item in value)
    return value


def positive(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) <= 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be > 0, got {getattr(obj, name)!r}")


def fraction(obj, *names: str) -> None:
    for name in names:
        if not 0.0 <= getattr(obj, name) < 1.0:
            raise UsageError(f"{type(obj).__name__}.{name} must be in [0, 1), got {getattr(obj, name)!r}")


def non_negative(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) < 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be >= 0, got {getattr(obj, name)!r}")


def unit_interval(obj, *names: str) -> None:
    for name in names:
        if not 0.0 <= getattr(obj, name) <= 1.0:
            raise UsageError(f"{type(obj).__name__}.{name} must be in [0, 1], got {getattr(obj, name)!r}")


def optional_positive(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) is not None and getattr(obj, name) <= 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be > 0, got {getattr(obj, name)!r}")


@dataclass
class BertConfig(Validated):
    """Shape of a BERT encoder; field names follow Hugging Face's config.json so one reads into the other."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    attn_normalizer: str = "softmax"  # row normaliser, a name in course_lib.model.attention.NORMALIZERS
    sparsegen_lambda: float = 0.0  # sparsegen-lin's lambda (SSAF, Cui et al. 2019); must be < 1

    def validate(self) -> None:
        from course_lib.model.attention import NORMALIZERS  # late import: attention imports nothing from here
        from course_lib.errors import choice_error

        positive(self, "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "max_position_embeddings", "type_vocab_size")
        fraction(self, "hidden_dropout_prob", "attention_probs_dropout_prob")
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(f"hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.attn_normalizer not in NORMALIZERS:
            raise choice_error("attention normaliser", self.attn_normalizer, NORMALIZERS)
        if not self.sparsegen_lambda < 1:
            raise UsageError(f"sparsegen_lambda must be < 1, got {self.sparsegen_lambda!r}")

    def normalizer_params(self) -> dict:
        """Keyword arguments of the chosen normaliser."""
        return {"lam": self.sparsegen_lambda} if self.attn_normalizer == "sparsegen_lin" else {}

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf_json(cls, path) -> "BertConfig":
        """Read a Hugging Face config.json, keeping the fields we model and ignoring the rest.

        The feed-forward activation is always GELU (`bert.FeedForward`), so a checkpoint trained with another
        `hidden_act` is refused rather than loaded into the wrong function; a file without one means gelu,
        Hugging Face's default.
        """
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        if raw.get("model_type", "bert") != "bert":
            raise UsageError(f"{path} describes a {raw['model_type']!r} model, not a BERT (model_type 'bert')")
        if raw.get("hidden_act", "gelu") != "gelu":
            raise UsageError(f"{path} has hidden_act {raw['hidden_act']!r}; this BERT implements gelu only "
                             f"(valid: gelu)")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


# ----------------------------------------------------------------------------------------------
# Checks that need the machine or the model, made once before a run starts


def check_mixed_precision(mixed_precision: str) -> None:
    """Raise for fp16 on a machine without a CUDA GPU, where the run would go on without a word of warning.

    Not part of validate(): a config saved by a GPU run must still load on a laptop (to probe its model),
    and a sweep's dry run of a GPU grid must still read on one.
    """
    import torch

    if mixed_precision == "fp16" and not torch.cuda.is_available():
        raise UsageError("mixed_precision 'fp16' needs a CUDA GPU and none is available: fp16 autocast runs on "
                         "GPUs only (valid here: no, bf16)")


