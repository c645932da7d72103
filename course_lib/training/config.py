"""The run configurations (`FinetuneConfig`, `MultitaskConfig`, `PretrainConfig`, on the fields they share in
`RunConfig`), pydantic models on `runtime.settings`: each field is declared once, with its type, range and
--help text; names from a registry are checked by a validator that lists the valid ones."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic.fields import FieldInfo

from course_lib.methods.pretraining import PRETRAIN_METHODS, get_pretrain_method, pretrain_option_owners
from course_lib.methods.registry import every_method, get_method, multitask_methods, option_owners
from course_lib.model.config import MIXED_PRECISION, BertConfig
from course_lib.runtime.errors import UsageError, choice_error
from course_lib.runtime.settings import Settings, literal_names
from course_lib.tasks.registry import (TASK_TYPES, every_family, every_task, family_of, family_option_owners,
                                       get_family, get_task)

NONFINITE_LOSS = ("stop", "skip")  # what a NaN or infinite loss does to the run
COMPILE = ("off", "default", "graphs")  # how the model runs: eagerly, torch.compile'd, or also as CUDA graphs


class RunConfig(Settings):
    """What every training run shares: the optimiser's recipe, the seed, checkpoints, precision and speed.

    Each run kind below adds its own fields; where its recipe differs (pre-training's learning rate), it
    changes the default alone (`changed_default`), so a field is described once.
    """

    glue_dir: str | None = Field(None, description=
        "GLUE's folder (pre-training without corpus: its sentences); None: $GLUE_DIR, else data/glue, else the "
        "nyu-mll/glue dataset when online")
    batch_size: int = Field(32, gt=0, description=
        "examples per optimiser step (the global batch, over all processes), of one task in multitask; blocks in "
        "pre-training")
    lr: float = Field(2e-5, gt=0, description="peak learning rate of AdamW")
    weight_decay: float = Field(0.01, ge=0, description=
        "AdamW's decoupled weight decay; biases and LayerNorm are not decayed")
    max_grad_norm: float = Field(1.0, ge=0, description="clip the gradient's global norm to this (0: no clipping)")
    seed: int = Field(0, description=
        "seeds what the run draws: new weights and heads, dropout, masks, subsets, batch order, a multitask schedule")
    keep_checkpoint: bool = Field(False, description="keep checkpoint.pt (optimiser state too) after the run completes")
    mixed_precision: Literal[MIXED_PRECISION] = Field("no", description=
        "accelerate's autocast; fp16 needs a CUDA GPU, bf16 also runs on CPUs")
    on_nonfinite_loss: Literal[NONFINITE_LOSS] = Field("stop", description=
        "stop: fail keeping the last good checkpoint; skip: drop that step")
    fast_kernels: bool = Field(True, description=
        "swap the CPU kernels in (course_lib.fast.optimize): same function, faster; dropout masks are drawn "
        "another way, so runs with and without differ by their draws")
    log_every: int = Field(50, gt=0, description=
        "read the loss and the method's statistics from the device every N steps (the bar and the loss curve show "
        "their mean; a non-finite loss is caught there); steps in between never wait for the GPU")
    compile: Literal[COMPILE] = Field("off", description=
        "off | default: torch.compile the model | graphs: also CUDA graphs, batches padded to a few fixed lengths (GPU"
        " only); see docs/speed.md for what each method needs")
    report_to: str = Field("none", description=
        "live curves while the run trains: none | jsonl (output_dir/curves.jsonl, no package) | tensorboard | wandb | "
        "mlflow | any tracker accelerate supports, if installed", json_schema_extra={"same_run": False})

    @field_validator("report_to")
    @classmethod
    def _tracker_installed(cls, report_to: str) -> str:
        if report_to != "none":  # its package is checked now, before any data or model
            from course_lib.runtime.tracking import check_tracker

            check_tracker(report_to)
        return report_to


def changed_default(name: str, default) -> FieldInfo:
    """RunConfig's field `name` with another default, its description and range unchanged."""
    return FieldInfo.merge_field_infos(RunConfig.model_fields[name], default=default)


class TrainingRunConfig(RunConfig):
    """What a fine-tuning run and a multitask run share: the pretrained model, the task data and BERT's
    fine-tuning recipe (Devlin et al. 2019, App. A.3).

    Not a command of its own: FinetuneConfig and MultitaskConfig add their task(s), their output folder and
    their own options. A field means the same in both; in a multitask run it applies to each task.
    """

    model: str | None = Field(None, description="None: the packaged MiniLM; else a Hugging Face BERT folder or hub id")
    max_train_samples: int | None = Field(None, gt=0, description=
        "train on a seeded random subset of this many examples, per task (None: all)")
    max_eval_samples: int | None = Field(None, gt=0, description=
        "evaluate on a seeded random subset of each dev split (None: all)")
    epochs: int = Field(3, gt=0, description="passes over the training data")
    max_len: int | None = Field(None, gt=0, description=
        "tokens per example, [CLS] and [SEP] included; longer ones are cut (span QA: windowed). None: the task's own, "
        "128 for GLUE (384 for SQuAD)")
    eval_batch_size: int = Field(128, gt=0, description="examples per forward pass when evaluating")
    warmup_ratio: float = Field(0.1, ge=0, lt=1, description=
        "share of the steps the learning rate rises linearly, then decays to 0")
    classifier_dropout: float = Field(0.1, ge=0, lt=1, description=
        "dropout before the classifier head (each task's, in a multitask run)")
    bucket_by_length: bool = Field(False, description=
        "batch examples of similar length together: less padding, faster on CPUs")
    save_every: int = Field(0, ge=0, description="also checkpoint every N optimiser steps (0: end of each epoch only)")


class FinetuneConfig(TrainingRunConfig):
    """One fine-tuning run, on a task of any family. Defaults follow the BERT paper's recipe (Devlin et al. 2019, App. A.3)."""

    task: str = Field("sst2", description=
        "the task to fine-tune on: a preset of a task family (GLUE tasks are the sentence family)")
    task_type: Literal[tuple(TASK_TYPES)] | None = Field(None, description=
        "--task custom only: classification, regression, tagging or multiple-choice")
    train_file: str | None = Field(None, description=
        "replaces the task preset's training data (span QA: a SQuAD JSON file)")
    validation_file: str | None = Field(None, description="replaces the preset's dev data (span QA: a SQuAD JSON file)")
    test_file: str | None = Field(None, description=
        "a labelled test split, scored like dev (replaces a preset's test data)")
    data_dir: str | None = Field(None, description=
        "a preset's folder of files (None: its variable, e.g. $WNUT17_DIR, else the hub)")
    output_dir: str = Field("runs/finetune", description=
        "checkpoints, weights and metrics.json; a rerun resumes from here")
    export: bool = Field(False, description=
        "also write the finished model as a Hugging Face folder, output_dir/hf_model (methods whose model is not "
        "BERT's at inference are refused before training)", json_schema_extra={"same_run": False})
    method: str = Field("vanilla", description=
        "the attention method fine-tuned, a name in the method registry (vanilla: plain BERT)")
    options: Settings | None = Field(None, description=
        "the method's own options, an instance of its registry entry's `options` class (None: their defaults); flat in"
        " from_dict, to_dict, the command line and metrics.json")
    task_options: Settings | None = Field(None, description=
        "the task family's own options (span QA's strides, a custom file's columns), an instance of its registry "
        "entry's `options` class (None: their defaults); flat as `options`")

    @model_validator(mode="before")
    @classmethod
    def _tasks_length(cls, values: dict) -> dict:
        """max_len None: the task's own; an unknown task is refused here, naming the valid ones."""
        task = values.get("task", cls.default("task"))
        if isinstance(task, str) and values.get("max_len") is None:
            values = {**values, "max_len": get_task(task).max_len}
        return values

    @model_validator(mode="after")
    def _exportable(self):
        if self.export:  # refused before training, not when the finished run is exported
            self.check_exportable()
        return self

    def check_exportable(self) -> None:
        """Refuse, in one line, a run whose model transformers cannot hold (`Method.export_refusal`)."""
        refusal = get_method(self.method).export_refusal
        if refusal is not None:
            raise UsageError(f"method {self.method!r} cannot be exported as a transformers BERT: {refusal}")
        family = family_of(self.task, self.task_type)
        if family.hf_class is None:
            raise UsageError(f"the {family.name} family has no transformers model class to export to")

    @classmethod
    def nested(cls, values: dict) -> dict[str, type]:
        return {"options": get_method(values.get("method", cls.default("method"))).options,
                "task_options": family_of(values.get("task", cls.default("task")), values.get("task_type")).options}

    @classmethod
    def option_classes(cls) -> list[type]:
        classes = [*(m.options for m in every_method().values()), *(f.options for f in every_family().values())]
        return list(dict.fromkeys(classes))

    @classmethod
    def foreign(cls, values: dict | None) -> dict[str, str]:
        owners = option_owners()
        if values is None or set(values) - set(owners) - set(cls.model_fields):  # another family's?
            owners.update(family_option_owners())  # (this loads every family)
        return owners


class PretrainConfig(RunConfig):
    """One pre-training run from scratch: MLM, or MLM + AG (Deshpande & Narasimhan 2020).

    The paper's recipe where it applies: lr 1e-4, no warmup, no weight decay, clipping at 1.0. The default
    model is small enough for a few hundred steps in minutes on a CPU; with its 8 heads the code's
    ag_head_types "0,1,1,4" guides 6 (lambda = 3/4 in the paper's grid; "0,1,1,2" is its chosen 1/2).
    The new model's shape takes `BertConfig`'s names (`MODEL_SHAPE`). The method's options (`options`, from its
    entry in `methods.pretraining`) are flat outside Python.
    """

    method: str = Field("mlm", description="the pre-training method, a name in methods.pretraining: mlm | ag")
    tokenizer: str | None = Field(None, description=
        "the vocabulary: a BERT folder (or one with only its tokenizer files) or hub id; None: the packaged MiniLM's. "
        "The new model's size is set below; only the tokenizer is taken from here")
    corpus: str | None = Field(None, description="a text file, one sentence or paragraph a line; None: see glue_dir")
    output_dir: str = Field("runs/pretrain", description=
        "checkpoints, the trained model folder and metrics.json; reruns resume")
    max_steps: int = Field(300, gt=0, description="optimiser steps of the run")
    max_len: int = Field(64, ge=8, description="tokens per block; lines are packed whole into blocks")
    eval_blocks: int = Field(64, gt=0, description="held-out blocks scored every eval_every steps, with fixed masks")
    eval_every: int = Field(50, gt=0, description="also the checkpoint interval")
    warmup_steps: int = Field(0, ge=0, description="steps the learning rate rises linearly, then decays linearly to 0")
    mlm_probability: float = Field(0.15, gt=0, lt=1, description=
        "share of real tokens predicted: 80% [MASK], 10% random, 10% kept")
    num_hidden_layers: int = Field(4, description="encoder layers of the new model")
    hidden_size: int = Field(128, description="its width d")
    num_attention_heads: int = Field(8, description="its attention heads; must divide hidden_size")
    intermediate_size: int = Field(512, description="its feed-forward width")
    hidden_dropout_prob: float = Field(0.1, description="dropout on embeddings and sub-layer outputs")
    attention_probs_dropout_prob: float = Field(0.1, description="dropout on the attention probabilities")
    lr: float = changed_default("lr", 1e-4)
    weight_decay: float = changed_default("weight_decay", 0.0)
    log_every: int = changed_default("log_every", 10)
    options: Settings | None = Field(None, description=
        "the method's options (None: their defaults): the patterns, and AG's scale")

    @model_validator(mode="after")
    def _model_and_heads(self):
        self.model_shape()  # BertConfig's checks: sizes > 0, dropout in [0, 1), heads dividing the width
        self.options.check_heads(self.num_attention_heads)
        return self

    def model_shape(self) -> BertConfig:
        """The new model's shape, without its vocabulary (the tokenizer's)."""
        return BertConfig(**{name: getattr(self, name) for name in MODEL_SHAPE})

    @classmethod
    def nested(cls, values: dict) -> dict[str, type]:
        return {"options": get_pretrain_method(values.get("method", cls.default("method"))).options}

    @classmethod
    def option_classes(cls) -> list[type]:
        return list(dict.fromkeys(m.options for m in PRETRAIN_METHODS.every().values()))

    @classmethod
    def foreign(cls, values: dict) -> dict[str, str]:
        return pretrain_option_owners()


MODEL_SHAPE = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "hidden_dropout_prob",
               "attention_probs_dropout_prob")  # PretrainConfig's fields that are BertConfig's


DEFAULT_MULTITASK_TASKS = "sst2,rte,stsb"
CS224N_TASKS = "cs224n_sst,cs224n_para,cs224n_sts"  # sentiment, paraphrase, similarity: the course's order
PAIR_ENCODINGS = ("separate", "cross")
COURSE_OPTIONS = ("finetune", "pretrain")
MULTITASK_SCHEDULES = ("round_robin", "proportional", "annealed")


class MultitaskConfig(TrainingRunConfig):
    """One multitask run: a shared BERT, a head per task, a schedule across tasks, SSA-Co per task.

    The CS224N default project's setup (sentiment, paraphrase, similarity) on any sentence-family presets (GLUE's,
    the course's own files with --cs224n), plus span QA (the report's SQuAD 2.0 head); the schedules are
    Stickland & Murray (2019)'s. The fields shared with FinetuneConfig (TrainingRunConfig's) mean the same
    thing, per task.
    """

    tasks: str | None = Field(None, description=
        "comma list of task presets, one head each (None: sst2,rte,stsb; with --cs224n: "
        "cs224n_sst,cs224n_para,cs224n_sts; e.g. sst2,qqp,stsb or cs224n_sst,cs224n_para,cs224n_sts,squad_v2)")
    output_dir: str = Field("runs/multitask", description=
        "checkpoints, weights and metrics.json; a rerun resumes from here")
    schedule: Literal[MULTITASK_SCHEDULES] = Field("proportional", description=
        "which task each step trains: round_robin | proportional | annealed")
    schedule_alpha_end: float = Field(0.2, ge=0, le=1, description=
        "annealed: sampling exponent of the last epoch (Stickland & Murray: 0.2)")
    ssa: str = Field("none", description=
        "tasks trained with `ssa_method`, SSA-Co's token loss by default: none | all | a comma list")
    ssa_method: str = Field("ssa-co", description=
        "the registry method of the tasks in `ssa`; the others are vanilla")
    cs224n: bool = Field(False, description=
        "the CS224N default project: its three tasks from --data-dir, its model interface, and "
        "predictions/{sst,para,sts}-{dev,test}-output.csv in the output folder")
    data_dir: str | None = Field(None, description=
        "the course's data folder (None: $CS224N_DATA_DIR), or another preset's folder")
    pair_encoding: Literal[PAIR_ENCODINGS] | None = Field(None, description=
        "separate: each sentence of a pair encoded alone, a head on both [CLS] (the course's); cross: one sequence "
        "[CLS] a [SEP] b [SEP] (BERT's). None: separate with --cs224n, else cross")
    option: Literal[COURSE_OPTIONS] = Field("finetune", description=
        "the course's --option: finetune trains everything; pretrain freezes the encoder")
    use_gpu: bool = Field(False, description=
        "the course's flag: insist on a CUDA GPU (without it a GPU is still used when present)")
    options: Settings | None = Field(None, description=
        "`ssa_method`'s options, for the tasks in `ssa` (None: its defaults); flat in from_dict, to_dict, the command "
        "line and metrics.json")
    span_qa_options: Settings | None = Field(None, description=
        "the span-QA family's options, for a span-QA task among `tasks` (None: their defaults); flat as options. The "
        "other families' options describe custom files, which a multitask run does not take")

    @classmethod
    def nested(cls, values: dict) -> dict[str, type]:
        return {"options": get_method(values.get("ssa_method", cls.default("ssa_method"))).options,
                "span_qa_options": get_family("span_qa").options}

    @classmethod
    def option_classes(cls) -> list[type]:
        classes = [*(get_method(m).options for m in multitask_methods()), get_family("span_qa").options]
        return list(dict.fromkeys(classes))

    @classmethod
    def foreign(cls, values: dict) -> dict[str, str]:
        return {**option_owners(), **family_option_owners()}

    def task_names(self) -> list[str]:
        """The tasks' registry names, in the order given ('SST-2' becomes 'sst2')."""
        return [get_task(name.strip()).name for name in self.tasks.split(",") if name.strip()]

    def ssa_task_names(self) -> list[str]:
        if self.ssa in ("none", "all"):
            return [] if self.ssa == "none" else self.task_names()
        return [get_task(name.strip()).name for name in self.ssa.split(",")]

    def separate_pair_tasks(self) -> list[str]:
        """The tasks whose sentence pairs are encoded one sentence at a time (pair_encoding separate)."""
        if self.pair_encoding != "separate":
            return []
        return [name for name in self.task_names() if len(getattr(get_task(name), "text_columns", ())) == 2]

    @model_validator(mode="before")
    @classmethod
    def _course_defaults(cls, values: dict) -> dict:
        """The tasks, the pair encoding and max_len a run left None: the course's with --cs224n; an unknown task is
        refused here, naming the valid ones."""
        cs224n = values.get("cs224n") is True
        values = {"tasks": CS224N_TASKS if cs224n else DEFAULT_MULTITASK_TASKS, **{k: v for k, v in values.items()
                  if v is not None}, "pair_encoding": values.get("pair_encoding") or ("separate" if cs224n else "cross")}
        if isinstance(values["tasks"], str) and values.get("max_len") is None:
            values["max_len"] = max((get_task(name.strip()).max_len for name in values["tasks"].split(",")
                                     if name.strip()), default=None)
        return values

    @model_validator(mode="after")
    def _tasks_and_ssa(self):
        names = self.task_names()
        if not names or len(set(names)) < len(names) or "custom" in names:
            raise UsageError(f"MultitaskConfig.tasks must name distinct task presets, got {self.tasks!r}")
        for name in self.ssa.split(",") if self.ssa not in ("none", "all") else []:
            if get_task(name.strip()).name not in names:
                raise choice_error("SSA task", name, ["none", "all", *names])
        if self.ssa_method not in multitask_methods():
            raise choice_error("multitask method", self.ssa_method, multitask_methods())
        if self.cs224n and names[:3] != CS224N_TASKS.split(","):
            raise UsageError(f"--cs224n trains {CS224N_TASKS} (in that order, others may follow), got {self.tasks!r}")
        both = sorted(set(self.ssa_task_names()) & set(self.separate_pair_tasks()))
        if both:
            raise UsageError(f"SSA on {both[0]} needs --pair-encoding cross: its token labels are positions of one "
                             f"encoded pair (separately encoded pairs: no SSA; valid SSA tasks here: "
                             f"{', '.join(n for n in names if n not in both) or 'none'})")
        if self.use_gpu:
            import torch

            if not torch.cuda.is_available():
                raise UsageError("--use-gpu: no CUDA GPU is visible here (leave the flag out to train on the CPU)")
        return self


# ----------------------------------------------------------------------------------------------
# What --help lists for the fields that take one of a few names


def field_choices(cls) -> dict[str, tuple[str, ...]]:
    """The valid names of the fields that take one, which --help lists: the `Literal` fields' and, for the run
    configs, the registries' names."""
    names = {  # built only for `cls`: listing a registry's names loads all of it
        FinetuneConfig: lambda: {"task": tuple(every_task()), "method": tuple(every_method())},
        MultitaskConfig: lambda: {"tasks": tuple(t for t in every_task() if t != "custom")},
        PretrainConfig: lambda: {"method": tuple(PRETRAIN_METHODS.every())},
    }
    literals = {name: literal_names(f.annotation) for name, f in cls.model_fields.items()}
    return {**names.get(cls, dict)(), **{name: valid for name, valid in literals.items() if valid}}
