"""The encoder's shape (`BertConfig`, read from a Hugging Face config.json) and the mixed-precision modes."""
from __future__ import annotations

import json

from pydantic import Field, model_validator

from course_lib.runtime.errors import UsageError
from course_lib.runtime.settings import Settings

MIXED_PRECISION = ("no", "fp16", "bf16")  # accelerate's autocast modes; fp16 needs a CUDA GPU


class BertConfig(Settings):
    """Shape of a BERT encoder; field names follow Hugging Face's config.json so one reads into the other."""

    vocab_size: int = Field(30522, gt=0)
    hidden_size: int = Field(768, gt=0)
    num_hidden_layers: int = Field(12, gt=0)
    num_attention_heads: int = Field(12, gt=0)
    intermediate_size: int = Field(3072, gt=0)
    hidden_dropout_prob: float = Field(0.1, ge=0, lt=1)
    attention_probs_dropout_prob: float = Field(0.1, ge=0, lt=1)
    max_position_embeddings: int = Field(512, gt=0)
    type_vocab_size: int = Field(2, gt=0)
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    attn_normalizer: str = Field("softmax", description="row normaliser, a name in course_lib.model.attention.NORMALIZERS")
    attn_normalizer_params: dict = Field(default_factory=dict, description=(
        "the normaliser's own keyword arguments, e.g. sparsegen-lin's {'lam': -4.0} (SSAF, Cui et al. 2019)"))

    @model_validator(mode="after")
    def _shape_and_normaliser(self):
        """Heads that divide the width; a normaliser that exists and takes its parameters."""
        import torch

        from course_lib.model.attention import get_normalizer  # late import: attention imports nothing from here

        if self.hidden_size % self.num_attention_heads:
            raise UsageError(f"hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        normalize = get_normalizer(self.attn_normalizer, **self.attn_normalizer_params)  # an unknown name fails here
        try:
            normalize(torch.zeros(1, 2))  # a parameter it does not take, or a value it refuses, fails here
        except TypeError as err:
            raise UsageError(f"attention normaliser {self.attn_normalizer!r} with {self.attn_normalizer_params}: "
                             f"{err}") from None
        return self

    def normalizer_params(self) -> dict:
        """Keyword arguments of the chosen normaliser."""
        return dict(self.attn_normalizer_params)

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
        return cls(**{k: v for k, v in raw.items() if k in cls.model_fields})


# ----------------------------------------------------------------------------------------------
# Checks that need the machine or the model, made once before a run starts


def check_mixed_precision(mixed_precision: str) -> None:
    """Raise for fp16 on a machine without a CUDA GPU, where the run would go on without a word of warning.

    Not part of the config's checks: a config saved by a GPU run must still load on a laptop (to probe its model),
    and a sweep's dry run of a GPU grid must still read on one.
    """
    import torch

    if mixed_precision == "fp16" and not torch.cuda.is_available():
        raise UsageError("mixed_precision 'fp16' needs a CUDA GPU and none is available: fp16 autocast runs on "
                         "GPUs only (valid here: no, bf16)")


