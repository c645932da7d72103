"""Configuration dataclasses, validated once.

The same fields serve the CLI, notebook parameters and YAML files: `from_dict` rejects unknown keys and
wrong types with a `UsageError` that names the bad key and the valid ones (papermill checks neither).
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import tokenize
import typing
from dataclasses import dataclass

from .errors import UsageError

MIXED_PRECISION = ("no", "fp16", "bf16")  # accelerate's autocast modes; fp16 needs a CUDA GPU
NONFINITE_LOSS = ("stop", "skip")  # what a NaN or infinite loss does to the run
SSA_LABEL_MODES = ("code", "paper")  # whose SSA token labels: the authors' code's or the paper's
ASA_NOISE = ("none", "logistic")


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


def _non_negative(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) < 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be >= 0, got {getattr(obj, name)!r}")


def _unit_interval(obj, *names: str) -> None:
    for name in names:
        if not 0.0 <= getattr(obj, name) <= 1.0:
            raise UsageError(f"{type(obj).__name__}.{name} must be in [0, 1], got {getattr(obj, name)!r}")


def _optional_positive(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) is not None and getattr(obj, name) <= 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be > 0, got {getattr(obj, name)!r}")


def _shared_run_checks(cfg) -> None:
    """The checks of the fields a run config shares with the others (every field here exists on cfg)."""
    from .errors import choice_error

    if cfg.mixed_precision not in MIXED_PRECISION:
        raise choice_error("mixed precision", cfg.mixed_precision, MIXED_PRECISION)
    if cfg.on_nonfinite_loss not in NONFINITE_LOSS:
        raise choice_error("on_nonfinite_loss", cfg.on_nonfinite_loss, NONFINITE_LOSS)


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


@dataclass
class TrainingRunConfig(Validated):
    """What a fine-tuning run and a multitask run share: the pretrained model, the GLUE data, BERT's fine-tuning
    recipe (Devlin et al. 2019, App. A.3), checkpoints and the SSA-Co options.

    Not a command of its own: FinetuneConfig and MultitaskConfig add their task(s), their output folder and
    their own options. A field means the same in both; in a multitask run it applies to each task.
    """

    model: str | None = None  # None: the packaged MiniLM; else a Hugging Face BERT folder or hub id
    glue_dir: str | None = None  # None: $GLUE_DIR, else the nyu-mll/glue dataset when online
    max_train_samples: int | None = None  # train on a seeded random subset of this many examples, per task (None: all)
    max_eval_samples: int | None = None  # evaluate on a seeded random subset of each dev split (None: all)
    epochs: int = 3  # passes over the training data
    max_len: int = 128  # tokens per example, [CLS] and [SEP] included; longer ones are cut
    batch_size: int = 32  # examples per optimiser step (the global batch, over all processes), of one task in multitask
    eval_batch_size: int = 128  # examples per forward pass when evaluating
    lr: float = 2e-5  # peak learning rate of AdamW
    weight_decay: float = 0.01  # AdamW's decoupled weight decay; biases and LayerNorm are not decayed
    warmup_ratio: float = 0.1  # share of the steps the learning rate rises linearly, then decays to 0
    max_grad_norm: float = 1.0  # clip the gradient's global norm to this (0: no clipping)
    classifier_dropout: float = 0.1  # dropout before the classifier head (each task's, in a multitask run)
    bucket_by_length: bool = False  # batch examples of similar length together: less padding, faster on CPUs
    seed: int = 0  # seeds the heads, dropout, subsets, batch order and a multitask run's task schedule
    save_every: int = 0  # also checkpoint every N optimiser steps (0: end of each epoch only)
    keep_checkpoint: bool = False  # keep checkpoint.pt (optimiser state too) after the run completes
    mixed_precision: str = "no"  # accelerate's autocast; fp16 needs a CUDA GPU, bf16 also runs on CPUs
    on_nonfinite_loss: str = "stop"  # stop: fail keeping the last good checkpoint; skip: drop that step
    ssa_target_weight: float = 0.7  # SSA: alpha, loss = alpha L_target + (1 - alpha) L_SSA (Kou et al. 2020)
    ssa_label_mode: str = "code"  # SSA: code = the authors' labels (default); paper = the paper's
    ssa_share_weight: bool = True  # SSA: one token-head output layer for every position (False: per position)
    ssa_first_epoch_loss: bool = True  # SSA, code labels: epoch 1 trains the token head on all-ones labels
    #   (the authors' code); False leaves epoch 1 to the task loss, until probed labels exist
    ssa_probe_bf16: bool = False  # SSA: probe under bfloat16 autocast (about 2x faster on CPUs with AVX512-BF16
    #   or AMX, and on GPUs); a borderline prediction may then differ from the fp32 probe's

    def validate(self) -> None:
        from .errors import choice_error

        _positive(self, "epochs", "max_len", "batch_size", "eval_batch_size", "lr")
        _optional_positive(self, "max_train_samples", "max_eval_samples")
        _fraction(self, "warmup_ratio", "classifier_dropout")
        _non_negative(self, "weight_decay", "max_grad_norm", "save_every")
        _unit_interval(self, "ssa_target_weight")
        _shared_run_checks(self)
        if self.ssa_label_mode not in SSA_LABEL_MODES:
            raise choice_error("ssa_label_mode", self.ssa_label_mode, SSA_LABEL_MODES)


@dataclass
class FinetuneConfig(TrainingRunConfig):
    """One GLUE fine-tuning run. Defaults follow the BERT paper's recipe (Devlin et al. 2019, App. A.3)."""

    task: str = "sst2"  # the GLUE task to fine-tune on
    output_dir: str = "runs/finetune"  # checkpoints, weights and metrics.json; a rerun resumes from here
    method: str = "vanilla"  # the attention method fine-tuned, a name in course_lib.methods (vanilla: plain BERT)
    sparsegen_lambda: float = -4.0  # ssaf: sparsegen-lin's lambda (Cui et al. 2019 use -4 on SST-2)
    asa_tau: float = 0.3  # asa: keep-count penalty weight, applied as tau^2 (Wu et al. 2023, Table 5: 0.3)
    asa_noise: str = "none"  # asa: none = the authors' deterministic step; logistic = binary Concrete sample
    bernoulli_p: float = 0.1  # bernoulli-mask: probability of cutting each attention unit (paper: 0.05, 0.1)
    ssa_cls_weight: float = 0.5  # ssa-hybrid: beta, the pooled [CLS] share of the SSA layer (paper Eq. 1)
    ssa_threshold: float = 0.3  # ssa-hybrid: tokens with importance below this are left out of the pooling

    def validate(self) -> None:
        from .errors import choice_error
        from .glue import get_task

        get_task(self.task)
        super().validate()
        _fraction(self, "bernoulli_p", "ssa_threshold")
        _non_negative(self, "asa_tau")
        _unit_interval(self, "ssa_cls_weight")
        if not self.sparsegen_lambda < 1:
            raise UsageError(f"FinetuneConfig.sparsegen_lambda must be < 1, got {self.sparsegen_lambda!r}")
        if self.asa_noise not in ASA_NOISE:
            raise choice_error("asa_noise", self.asa_noise, ASA_NOISE)




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
    output_dir: str = "runs/pretrain"  # checkpoints, the trained model folder and metrics.json; reruns resume
    max_steps: int = 300  # optimiser steps of the run
    max_len: int = 64  # tokens per block; lines are packed whole into blocks
    batch_size: int = 32  # blocks per optimiser step
    eval_blocks: int = 64  # held-out blocks scored every eval_every steps, with fixed masks
    eval_every: int = 50  # also the checkpoint interval
    log_every: int = 10  # train loss curve: mean over each window of this many steps
    lr: float = 1e-4  # peak learning rate of AdamW
    warmup_steps: int = 0  # steps the learning rate rises linearly, then decays linearly to 0
    weight_decay: float = 0.0  # AdamW's decoupled weight decay; biases and LayerNorm are not decayed
    max_grad_norm: float = 1.0  # clip the gradient's global norm to this (0: no clipping)
    mlm_probability: float = 0.15  # share of real tokens predicted: 80% [MASK], 10% random, 10% kept
    num_layers: int = 4  # encoder layers of the new model
    hidden_size: int = 128  # its width d
    num_heads: int = 8  # its attention heads; must divide hidden_size
    intermediate_size: int = 512  # its feed-forward width
    hidden_dropout: float = 0.1  # dropout on embeddings and sub-layer outputs
    attention_dropout: float = 0.1  # dropout on the attention probabilities
    seed: int = 0  # seeds the initial weights, masks, held-out blocks and batch order
    keep_checkpoint: bool = False  # keep checkpoint.pt (optimiser state too) after the run completes
    mixed_precision: str = "no"  # accelerate's autocast; fp16 needs a CUDA GPU, bf16 also runs on CPUs
    on_nonfinite_loss: str = "stop"  # stop: fail keeping the last good checkpoint; skip: drop that step
    ag_scale: float = 10.0  # ag: alpha_0 (paper: 10 for 12/16 layers, 100 for 8; code default 10)
    ag_plateau_steps: int = 0  # ag: steps at alpha_0 before the linear decay (the code: 20000)
    ag_head_types: str = "0,1,1,4"  # ag: head counts for identity,next,prev,first[,delim,period], or names
    ag_reduction: str = "mean"  # ag: mean (authors' code) | frobenius (paper)
    ag_boundary: str = "uniform"  # ag: last [Next] / first [Prev] row uniform (paper) | zero (code)

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
        _non_negative(self, "warmup_steps", "weight_decay", "max_grad_norm", "ag_scale", "ag_plateau_steps")
        _shared_run_checks(self)
        if self.ag_reduction not in REDUCTIONS:
            raise choice_error("ag_reduction", self.ag_reduction, REDUCTIONS)
        if self.ag_boundary not in BOUNDARIES:
            raise choice_error("ag_boundary", self.ag_boundary, BOUNDARIES)
        assign_heads(self.ag_head_types, self.num_heads)


PRETRAIN_METHODS = ("mlm", "ag")


@dataclass
class MultitaskConfig(TrainingRunConfig):
    """One multitask run: a shared BERT, a head per GLUE task, a schedule across tasks, SSA-Co per task.

    The CS224N default project's setup (sentiment, paraphrase, similarity) on any GLUE tasks; the schedules
    are Stickland & Murray (2019)'s. The fields shared with FinetuneConfig (TrainingRunConfig's) mean the same
    thing, per task.
    """

    tasks: str = "sst2,rte,stsb"  # comma list of GLUE tasks, one head each (e.g. sst2,qqp,stsb)
    output_dir: str = "runs/multitask"  # checkpoints, weights and metrics.json; a rerun resumes from here
    schedule: str = "proportional"  # which task each step trains: round_robin | proportional | annealed
    schedule_alpha_end: float = 0.2  # annealed: sampling exponent of the last epoch (Stickland & Murray: 0.2)
    ssa: str = "none"  # tasks trained with the SSA-Co token loss: none | all | a comma list of tasks

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
        super().validate()
        _unit_interval(self, "schedule_alpha_end")
        if self.schedule not in MULTITASK_SCHEDULES:
            raise choice_error("schedule", self.schedule, MULTITASK_SCHEDULES)


MULTITASK_SCHEDULES = ("round_robin", "proportional", "annealed")


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


# ----------------------------------------------------------------------------------------------
# What --help says about each field


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """Each field's trailing `# ...` comment, with the `#   ...` lines that continue it, by field name.

    The comments stay the one place a field is documented, beside its default; the CLI reads them for its
    --help instead of keeping a second copy that would drift. Inherited fields (FinetuneConfig's from
    TrainingRunConfig) are documented where they are declared; a subclass that declares a field again wins.
    """
    docs = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_declared_field_docs(klass))
    return docs


@functools.cache
def _declared_field_docs(cls) -> dict[str, str]:
    """field_docs of the fields declared in cls's own body."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # installed without its .py sources: options keep their defaults, no text
        return {}
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    lines = source.splitlines()
    docs = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            row = node.end_lineno  # 1-based, so lines[row] is the line below the field
            parts = [comments.get(row, "")]
            while row < len(lines) and lines[row].strip().startswith("#"):
                parts.append(comments[row + 1])
                row += 1
            docs[node.target.id] = " ".join(p for p in parts if p)
    return docs


def field_choices(cls) -> dict[str, tuple[str, ...]]:
    """The valid names of the fields that take one from a registry: validate() checks them, --help lists them."""
    from .ag import BOUNDARIES, REDUCTIONS
    from .glue import GLUE_TASKS

    per_class = {
        FinetuneConfig: {"task": tuple(GLUE_TASKS), "ssa_label_mode": SSA_LABEL_MODES,
                         "asa_noise": ASA_NOISE},
        MultitaskConfig: {"tasks": tuple(GLUE_TASKS), "ssa": ("none", "all", *GLUE_TASKS),
                          "schedule": MULTITASK_SCHEDULES, "ssa_label_mode": SSA_LABEL_MODES},
        PretrainConfig: {"method": PRETRAIN_METHODS, "ag_reduction": REDUCTIONS, "ag_boundary": BOUNDARIES},
    }
    return {"mixed_precision": MIXED_PRECISION, "on_nonfinite_loss": NONFINITE_LOSS, **per_class.get(cls, {})}
