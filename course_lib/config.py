"""Configuration dataclasses, validated once.

The same fields serve the CLI, notebook parameters and YAML files: `from_dict` rejects unknown keys and
wrong types with a `UsageError` that names the bad key and the valid ones (papermill checks neither).
"""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass

from .errors import UsageError


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

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _positive(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) <= 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be > 0, got {getattr(obj, name)!r}")


def _fraction(obj, *names: str) -> None:
    for name in names:
        if not 0.0 <= getattr(obj, name) < 1.0:
            raise UsageError(f"{type(obj).__name__}.{name} must be in [0, 1), got {getattr(obj, name)!r}")


@dataclass
class BertConfig(Validated):
    """Shape of a BERT encoder; field names follow Hugging Face's config.json so one reads into the other."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    attn_normalizer: str = "softmax"  # row normaliser, a name in course_lib.attention.NORMALIZERS
    sparsegen_lambda: float = 0.0  # sparsegen-lin's lambda (SSAF, Cui et al. 2019); must be < 1

    def validate(self) -> None:
        from .attention import NORMALIZERS  # late import: attention imports nothing from here
        from .errors import choice_error

        _positive(self, "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "max_position_embeddings", "type_vocab_size")
        _fraction(self, "hidden_dropout_prob", "attention_probs_dropout_prob")
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(f"hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.hidden_act not in ("gelu",):
            raise choice_error("hidden_act", self.hidden_act, ["gelu"])
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
        """Read a Hugging Face config.json, keeping the fields we model and ignoring the rest."""
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        if raw.get("model_type", "bert") != "bert":
            raise UsageError(f"{path} describes a {raw['model_type']!r} model, not a BERT (model_type 'bert')")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass
class FinetuneConfig(Validated):
    """One GLUE fine-tuning run. Defaults follow the BERT paper's recipe (Devlin et al. 2019, App. A.3)."""

    task: str = "sst2"
    model: str | None = None  # None: the packaged MiniLM; else a Hugging Face BERT folder or hub id
    glue_dir: str | None = None  # None: $GLUE_DIR, else the nyu-mll/glue dataset when online
    output_dir: str = "runs/finetune"
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    epochs: int = 3
    max_len: int = 128
    batch_size: int = 32
    eval_batch_size: int = 128
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    classifier_dropout: float = 0.1
    bucket_by_length: bool = False
    seed: int = 0
    save_every: int = 0  # also checkpoint every N optimiser steps (0: end of each epoch only)
    keep_checkpoint: bool = False  # keep checkpoint.pt (optimiser state too) after the run completes
    mixed_precision: str = "no"  # accelerate: no | fp16 | bf16
    on_nonfinite_loss: str = "stop"  # stop: fail keeping the last good checkpoint; skip: drop that step
    method: str = "vanilla"
    sparsegen_lambda: float = -4.0  # ssaf: sparsegen-lin's lambda (Cui et al. 2019 use -4 on SST-2)
    asa_tau: float = 0.3  # asa: keep-count penalty weight, applied as tau^2 (Wu et al. 2023, Table 5: 0.3)
    asa_noise: str = "none"  # asa: none = the authors' deterministic step; logistic = binary Concrete sample
    bernoulli_p: float = 0.1  # bernoulli-mask: probability of cutting each attention unit (paper: 0.05, 0.1)
    ssa_target_weight: float = 0.7  # ssa-*: alpha, loss = alpha L_target + (1 - alpha) L_SSA (Kou et al. 2020)
    ssa_cls_weight: float = 0.5  # ssa-hybrid: beta, the pooled [CLS] share of the SSA layer (paper Eq. 1)
    ssa_threshold: float = 0.3  # ssa-hybrid: tokens with importance below this are left out of the pooling
    ssa_label_mode: str = "code"  # ssa-*: code = the authors' labels (default); paper = the paper's
    ssa_share_weight: bool = True  # ssa-*: one token-head output layer for every position (False: per position)
    ssa_first_epoch_loss: bool = True  # ssa-*, code labels: epoch 1 trains the token head on all-ones labels
    #   (the authors' code); False leaves epoch 1 to the task loss, until probed labels exist
    ssa_probe_bf16: bool = False  # ssa-*: probe under bfloat16 autocast (about 2x faster on CPUs with AVX512-BF16
    #   or AMX, and on GPUs); a borderline prediction may then differ from the fp32 probe's

    def validate(self) -> None:
        from .errors import choice_error

        from .glue import get_task

        get_task(self.task)
        _positive(self, "epochs", "max_len", "batch_size", "eval_batch_size", "lr")
        _fraction(self, "warmup_ratio", "classifier_dropout")
        for name in ("max_train_samples", "max_eval_samples"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise UsageError(f"FinetuneConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.weight_decay < 0 or self.max_grad_norm < 0 or self.save_every < 0:
            raise UsageError("weight_decay, max_grad_norm and save_every must be >= 0")
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise choice_error("mixed precision", self.mixed_precision, ["no", "fp16", "bf16"])
        if not self.sparsegen_lambda < 1:
            raise UsageError(f"FinetuneConfig.sparsegen_lambda must be < 1, got {self.sparsegen_lambda!r}")
        if self.asa_tau < 0 or not 0 <= self.bernoulli_p < 1:
            raise UsageError(f"asa_tau must be >= 0 and bernoulli_p in [0, 1), got {self.asa_tau!r}, "
                             f"{self.bernoulli_p!r}")
        _fraction(self, "ssa_threshold")
        if not (0 <= self.ssa_target_weight <= 1 and 0 <= self.ssa_cls_weight <= 1):
            raise UsageError(f"ssa_target_weight and ssa_cls_weight must be in [0, 1], got "
                             f"{self.ssa_target_weight!r}, {self.ssa_cls_weight!r}")
        if self.ssa_label_mode not in ("code", "paper"):
            raise choice_error("ssa_label_mode", self.ssa_label_mode, ["code", "paper"])
        if self.asa_noise not in ("none", "logistic"):
            raise choice_error("asa_noise", self.asa_noise, ["none", "logistic"])
        if self.on_nonfinite_loss not in ("stop", "skip"):
            raise choice_error("on_nonfinite_loss", self.on_nonfinite_loss, ["stop", "skip"])
        if self.method not in METHODS:
            raise choice_error("method", self.method, METHODS)


METHODS = ("vanilla", "ssaf", "asa", "bernoulli-mask", "ssa-co", "ssa-hybrid", "bert-mask")


@dataclass
class PretrainConfig(Validated):
    """One pre-training run from scratch: MLM, or MLM + AG (Deshpande & Narasimhan 2020).

    The paper's recipe where it applies: lr 1e-4, no warmup, no weight decay, clipping at 1.0. The default
    model is small enough for a few hundred steps in minutes on a CPU; with its 8 heads the code's
    ag_head_types "0,1,1,4" guides 6 (lambda = 3/4 in the paper's grid; "0,1,1,2" is its chosen 1/2).
    """

    method: str = "mlm"  # mlm | ag
    corpus: str | None = None  # a text file, one sentence or paragraph a line; None: see glue_dir
    glue_dir: str | None = None  # without corpus: GLUE training sentences from here or $GLUE_DIR, else generated
    output_dir: str = "runs/pretrain"
    max_steps: int = 300
    max_len: int = 64  # tokens per block; lines are packed whole into blocks
    batch_size: int = 32
    eval_blocks: int = 64  # held-out blocks scored every eval_every steps, with fixed masks
    eval_every: int = 50  # also the checkpoint interval
    log_every: int = 10  # train loss curve: mean over each window of this many steps
    lr: float = 1e-4
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mlm_probability: float = 0.15  # share of real tokens predicted: 80% [MASK], 10% random, 10% kept
    num_layers: int = 4
    hidden_size: int = 128
    num_heads: int = 8
    intermediate_size: int = 512
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    seed: int = 0
    keep_checkpoint: bool = False
    mixed_precision: str = "no"  # accelerate: no | fp16 | bf16
    on_nonfinite_loss: str = "stop"  # stop: fail keeping the last good checkpoint; skip: drop that step
    ag_scale: float = 10.0  # ag: alpha_0 (paper: 10 for 12/16 layers, 100 for 8; code default 10)
    ag_plateau_steps: int = 0  # ag: steps at alpha_0 before the linear decay (the code: 20000)
    ag_head_types: str = "0,1,1,4"  # ag: head counts for identity,next,prev,first[,delim,period], or names
    ag_reduction: str = "mean"  # ag: mean (authors' code) | frobenius (paper)
    ag_boundary: str = "uniform"  # ag: last [Next] / first [Prev] row uniform (paper) | zero (code)
    ag_attention: str = "pre"  # ag: maps before attention dropout; the code's post-dropout is not available

    def validate(self) -> None:
        from .ag import BOUNDARIES, REDUCTIONS, assign_heads
        from .errors import choice_error

        if self.method not in PRETRAIN_METHODS:
            raise choice_error("pretraining method", self.method, PRETRAIN_METHODS)
        _positive(self, "max_steps", "max_len", "batch_size", "eval_blocks", "eval_every", "log_every", "lr",
                  "num_layers", "hidden_size", "num_heads", "intermediate_size")
        _fraction(self, "hidden_dropout", "attention_dropout")
        if not 0 < self.mlm_probability < 1:
            raise UsageError(f"PretrainConfig.mlm_probability must be in (0, 1), got {self.mlm_probability!r}")
        if self.max_len < 8:
            raise UsageError(f"PretrainConfig.max_len must be at least 8, got {self.max_len!r}")
        if self.hidden_size % self.num_heads:
            raise UsageError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        for name in ("warmup_steps", "weight_decay", "max_grad_norm", "ag_scale", "ag_plateau_steps"):
            if getattr(self, name) < 0:
                raise UsageError(f"PretrainConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise choice_error("mixed precision", self.mixed_precision, ["no", "fp16", "bf16"])
        if self.on_nonfinite_loss not in ("stop", "skip"):
            raise choice_error("on_nonfinite_loss", self.on_nonfinite_loss, ["stop", "skip"])
        if self.ag_reduction not in REDUCTIONS:
            raise choice_error("ag_reduction", self.ag_reduction, REDUCTIONS)
        if self.ag_boundary not in BOUNDARIES:
            raise choice_error("ag_boundary", self.ag_boundary, BOUNDARIES)
        if self.ag_attention == "post":
            raise UsageError("ag_attention 'post' (the authors' code scores maps after attention dropout) is not "
                             "available yet: BertModel returns pre-dropout maps only (valid: pre)")
        if self.ag_attention != "pre":
            raise choice_error("ag_attention", self.ag_attention, ["pre"])
        assign_heads(self.ag_head_types, self.num_heads)


PRETRAIN_METHODS = ("mlm", "ag")


@dataclass
class MultitaskConfig(Validated):
    """One multitask run: a shared BERT, a head per GLUE task, a schedule across tasks, SSA-Co per task.

    The CS224N default project's setup (sentiment, paraphrase, similarity) on any GLUE tasks; the schedules
    are Stickland & Murray (2019)'s. Fields shared with FinetuneConfig mean the same thing, per task.
    """

    tasks: str = "sst2,rte,stsb"  # comma list of GLUE tasks, one head each (e.g. sst2,qqp,stsb)
    model: str | None = None  # None: the packaged MiniLM; else a Hugging Face BERT folder or hub id
    glue_dir: str | None = None  # None: $GLUE_DIR, else the nyu-mll/glue dataset when online
    output_dir: str = "runs/multitask"
    max_train_samples: int | None = None  # per task
    max_eval_samples: int | None = None  # per task
    epochs: int = 3
    max_len: int = 128
    batch_size: int = 32  # every batch holds one task's examples
    eval_batch_size: int = 128
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    classifier_dropout: float = 0.1
    bucket_by_length: bool = False
    seed: int = 0
    save_every: int = 0  # also checkpoint every N optimiser steps (0: end of each epoch only)
    keep_checkpoint: bool = False  # keep checkpoint.pt (optimiser state too) after the run completes
    mixed_precision: str = "no"  # accelerate: no | fp16 | bf16
    on_nonfinite_loss: str = "stop"  # stop: fail keeping the last good checkpoint; skip: drop that step
    schedule: str = "proportional"  # which task each step trains: round_robin | proportional | annealed
    schedule_alpha_end: float = 0.2  # annealed: sampling exponent of the last epoch (Stickland & Murray: 0.2)
    ssa: str = "none"  # tasks trained with the SSA-Co token loss: none | all | a comma list of tasks
    ssa_target_weight: float = 0.7  # alpha, loss = alpha L_target + (1 - alpha) L_SSA (Kou et al. 2020)
    ssa_label_mode: str = "code"  # code = the authors' labels (default); paper = the paper's
    ssa_share_weight: bool = True  # one token-head output layer for every position (False: per position)
    ssa_first_epoch_loss: bool = True  # code labels: epoch 1 trains the token head on all-ones labels (the
    #   authors' code); False leaves epoch 1 to the task losses, until probed labels exist
    ssa_probe_bf16: bool = False  # probe under bfloat16 autocast (faster where bf16 is native; see FinetuneConfig)

    def task_names(self) -> list[str]:
        """The tasks' registry names, in the order given ('SST-2' becomes 'sst2')."""
        from .glue import get_task

        return [get_task(name.strip()).name for name in self.tasks.split(",") if name.strip()]

    def ssa_task_names(self) -> list[str]:
        if self.ssa in ("none", "all"):
            return [] if self.ssa == "none" else self.task_names()
        from .glue import get_task

        return [get_task(name.strip()).name for name in self.ssa.split(",")]

    def validate(self) -> None:
        from .errors import choice_error

        names = self.task_names()
        if not names or len(set(names)) < len(names):
            raise UsageError(f"MultitaskConfig.tasks must name distinct GLUE tasks, got {self.tasks!r}")
        for name in self.ssa.split(",") if self.ssa not in ("none", "all") else []:
            if name.strip().lower().replace("-", "") not in names:
                raise choice_error("SSA task", name, ["none", "all", *names])
        _positive(self, "epochs", "max_len", "batch_size", "eval_batch_size", "lr")
        _fraction(self, "warmup_ratio", "classifier_dropout")
        for name in ("max_train_samples", "max_eval_samples"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise UsageError(f"MultitaskConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.weight_decay < 0 or self.max_grad_norm < 0 or self.save_every < 0:
            raise UsageError("weight_decay, max_grad_norm and save_every must be >= 0")
        if self.schedule not in MULTITASK_SCHEDULES:
            raise choice_error("schedule", self.schedule, MULTITASK_SCHEDULES)
        if not (0 <= self.schedule_alpha_end <= 1 and 0 <= self.ssa_target_weight <= 1):
            raise UsageError(f"schedule_alpha_end and ssa_target_weight must be in [0, 1], got "
                             f"{self.schedule_alpha_end!r}, {self.ssa_target_weight!r}")
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise choice_error("mixed precision", self.mixed_precision, ["no", "fp16", "bf16"])
        if self.on_nonfinite_loss not in ("stop", "skip"):
            raise choice_error("on_nonfinite_loss", self.on_nonfinite_loss, ["stop", "skip"])
        if self.ssa_label_mode not in ("code", "paper"):
            raise choice_error("ssa_label_mode", self.ssa_label_mode, ["code", "paper"])


MULTITASK_SCHEDULES = ("round_robin", "proportional", "annealed")
