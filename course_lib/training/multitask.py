"""Multitask BERT: one encoder, a head per task, a schedule across tasks, SSA per task.

The CS224N default project (minBERT) trains one BERT for sentiment (SST), paraphrase (Quora) and similarity
(SemEval STS) at once; the CS224N report "Enhancing BERT with Self-Supervised Attention" adds an SSA loss to
every task and scores a run by the mean of the three dev metrics (quoted in notebook 02).
Here the tasks are any presets of the task registry: GLUE's (sst2, mrpc or qqp, stsb; rte stands in for paraphrase
where only SST-2, CoLA, RTE and STS-B are at hand), the course's own files (cs224n_sst, cs224n_para, cs224n_sts;
`course_lib.teaching.cs224n_project` adds the course's interface and predictions files), and span QA (the report's
SQuAD 2.0 head, squad_v2). A pair is one sequence [CLS] a [SEP] b [SEP] (BERT's cross-encoding), or with
pair_encoding "separate" each sentence on its own under a bi-encoder head (`course_lib.model.pair_heads`, the
course's default). SSA is SSA-Co of Kou et al. (2020), not the
report's loosely described variant: per task, the token head of `course_lib.methods.ssa` learns which tokens the
current model needs, from labels made by probing the model at the start of every epoch.

Reuse is the design. Each task's model is the one `finetune` builds for it (SequenceClassifier, or
SSAClassifier for an SSA task), all holding one encoder object; each task's epoch data comes from
`finetune.epoch_features`; the optimiser, learning-rate schedule, guarded step, checkpoints and resume are
the training loop's (`course_lib.training.loop`), as for finetune. A one-task run is therefore a finetune run,
step for step (tests/test_multitask.py checks this).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save as safetensors_save
from torch import nn

from course_lib.model.heads import ClassifierOutput, SequenceClassifier
from course_lib.model.pair_heads import SeparatePairClassifier, encode_separately
from course_lib.model.weights import check_runnable, load_from_folder, load_pretrained
from course_lib.readers.cs224n import CourseTask
from course_lib.model.model_folder import resolve_model_dir
from course_lib.runtime.compiled import step_collate
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import METRICS, WEIGHTS, atomic_write, remove_stale_temporaries, seed_everything
from course_lib.runtime.run_folder import finished_run
from course_lib.tasks.metrics import shown
from course_lib.tasks.registry import get_task
from course_lib.tasks.span_qa import SPAN_QA
from course_lib.training.config import FinetuneConfig, MultitaskConfig, TrainingRunConfig
from course_lib.training.finetune import (batch_loss, check_epoch_caches, dev_entry, encode_split, epoch_features,
                                         task_examples)
from course_lib.training.loop import Job, TrainingLoop, add_stats, data_ready_line, open_run, present_stats
from course_lib.training.run import Run, resolve, resolve_preset
from course_lib.training.task_model import build_classifier
from course_lib.training.task_schedules import epoch_plan, schedule_alpha

# ----------------------------------------------------------------------------------------------
# The model


class MultitaskBert(nn.Module):
    """One encoder, one task model per task (`heads[name]`: pooled [CLS] → dropout → linear, a regressor for
    STS-B, plus the SSA token head for an SSA task). Every head holds the same encoder object, so a step on
    any task moves the shared encoder; parameters() lists each tensor once, encoder first."""

    def __init__(self, encoder: nn.Module, heads: dict[str, SequenceClassifier]):
        super().__init__()
        if any(head.encoder is not encoder for head in heads.values()):
            raise ValueError("every task head must hold the shared encoder")
        self.encoder = encoder
        self.heads = nn.ModuleDict(heads)

    def forward(self, task: str, input_ids, attention_mask=None, token_type_ids=None, **labels) -> ClassifierOutput:
        return self.heads[task](input_ids, attention_mask, token_type_ids, **labels)

    def unique_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights with each tensor once (safetensors refuses tensors that share memory): the heads'
        references to the encoder are dropped, `encoder.*` keeps it."""
        return {k: v for k, v in self.state_dict().items() if not (k.startswith("heads.") and ".encoder." in k)}


def task_config(cfg: MultitaskConfig, name: str) -> FinetuneConfig:
    """The single-task run of one task: the shared fields, cfg.ssa_method for a task in cfg.ssa, else vanilla, and the
    span-QA options for a span-QA task. The data folder goes to the course's presets only: the others find
    theirs as they do alone (GLUE_DIR, SQUAD_DIR, ...)."""
    recipe = {name: getattr(cfg, name) for name in TrainingRunConfig.model_fields}
    ssa, task = name in cfg.ssa_task_names(), get_task(name)
    return FinetuneConfig(**recipe, task=name, output_dir=str(Path(cfg.output_dir) / name),
                          method=cfg.ssa_method if ssa else "vanilla", options=cfg.options if ssa else None,
                          task_options=cfg.span_qa_options if task.family == SPAN_QA else None,
                          data_dir=cfg.data_dir if isinstance(task, CourseTask) else None)


def task_runs(cfg: MultitaskConfig, model_dir: Path) -> list[Run]:
    """Each task's single-task run (`task_config`), resolved before anything loads: a missing file, or the method
    on a task family it does not apply to, stops the run here."""
    return [resolve(task_config(cfg, name), model_dir) for name in cfg.task_names()]


def build_multitask(cfg: MultitaskConfig, encoder, tokenizer, runs: list[Run] | None = None) -> MultitaskBert:
    """Each task's head on one encoder, in the order of cfg.tasks: exactly as finetune builds it, or a
    bi-encoder head for a pair task encoded separately. With option "pretrain" the encoder is frozen.
    runs: the tasks' resolved runs; None: each task's preset as it is (no file read, no model folder looked up:
    the model is rebuilt from a finished run's folder, or built on a toy encoder)."""
    separate = cfg.separate_pair_tasks()

    def head(run: Run) -> SequenceClassifier:
        if run.task.name in separate:
            return SeparatePairClassifier(encoder, run.task.num_labels, cfg.classifier_dropout,
                                          tokenizer.pad_token_id)
        return build_classifier(run, encoder, tokenizer)

    if runs is None:
        runs = [resolve_preset(task_config(cfg, name)) for name in cfg.task_names()]
    model = MultitaskBert(encoder, {run.task.name: head(run) for run in runs})
    encoder.requires_grad_(cfg.option != "pretrain")  # the course's --option pretrain: only the heads train
    return model


def encode_task(cfg: MultitaskConfig, run: Run, examples: list, tokenizer, training: bool) -> list[dict]:
    """A task's features as its family encodes them, or both sentences of a pair apart (pair_encoding separate)."""
    if run.task.name in cfg.separate_pair_tasks():
        from course_lib.runtime import feature_cache  # here: a notebook's first cell loads the lesson, not the cache

        what = {"family": "separate_pairs", "task": run.task.name, "training": training, "max_len": cfg.max_len}
        return feature_cache.cached(what, examples, tokenizer,
                                    lambda: encode_separately(examples, tokenizer, cfg.max_len))
    return encode_split(run, examples, tokenizer, training)


def overall_score(tasks: list, dev: dict[str, dict]) -> float:
    """Mean over tasks of each one's primary metric on its first dev split (SST accuracy, paraphrase accuracy,
    STS Pearson: the report's "Overall")."""
    return float(np.mean([dev[t.name][t.dev_splits[0]][t.metrics[0]] for t in tasks]))


# ----------------------------------------------------------------------------------------------
# Training


class MultitaskJob(Job):
    """Multitask training as the loop sees it: each epoch every task's (relabelled) training set, interleaved by
    the task schedule, one task per batch; at its end each task's dev metrics and the overall score."""

    def __init__(self, cfg: MultitaskConfig, runs: list[Run], train: dict, dev: dict, tokenizer, out: Path):
        self.cfg, self.train, self.dev, self.tokenizer, self.out = cfg, train, dev, tokenizer, out
        self.runs, self.tasks = {r.task.name: r for r in runs}, [r.task for r in runs]
        self.families = {r.task.name: r.family for r in runs}
        self.collates = {r.task.name: step_collate(r.family.collate, cfg.compile, r.cfg.max_len)
                         for r in runs}  # padded under `graphs`
        self.segments, self.pad_id = cfg.epochs, tokenizer.pad_token_id
        self.steps_per_epoch = sum(math.ceil(len(train[t.name]) / cfg.batch_size) for t in self.tasks)
        self.epoch_train, self.epoch_stats = {}, {}

    def plan(self, epoch: int) -> list:
        loop, cfg = self.loop, self.cfg
        with loop.accelerator.autocast():  # heads are called directly, past the prepared model's autocast wrapper
            for t in self.tasks:
                self.epoch_train[t.name], self.epoch_stats[t.name] = epoch_features(
                    self.runs[t.name], epoch, self.train[t.name], loop.base.heads[t.name], self.tokenizer,
                    loop.accelerator, self.out / t.name)
        lengths = [[self.families[t.name].length(f) for f in self.epoch_train[t.name]] for t in self.tasks]
        return epoch_plan(cfg.schedule, lengths, cfg.batch_size, cfg.seed, epoch, cfg.epochs, cfg.schedule_alpha_end, cfg.bucket_by_length)

    def loss(self, item):
        task, rows = self.tasks[item[0]], item[1]
        name = task.name
        with self.loop.accelerator.autocast():
            loss, stats = batch_loss(self.loop.base.heads[name], [self.epoch_train[name][i] for i in rows],
                                     self.pad_id, self.loop.accelerator, self.collates[name])
        totals = self.loop.state.setdefault("epoch_totals", {}).setdefault(name, {"steps": 0, "loss": 0.0})
        totals["steps"] += 1  # skipped steps count too: the task's share of the epoch
        value = loss.detach()
        return loss, value, {"task": name, "loss": value, "stats": stats}

    def record(self, record: dict, taken) -> None:
        state, name = self.loop.state, record["task"]
        self.loop.totals.add(state, ("epoch_totals", name, "loss"), record["loss"], taken)
        self.loop.totals.count(state, ("epoch_totals", name, "taken"), taken)  # the loss's mean leaves skips out
        add_stats(self.loop.totals, state, ("epoch_totals", name), ("epoch_seen", name), record["stats"], taken)

    def where(self, segment: int, index: int, item) -> str:
        return f"epoch {segment + 1}, step {index + 1} ({self.tasks[item[0]].name})"

    def compiled_modules(self, model) -> list:
        return list(model.heads.values())  # a step calls its task's head, which holds the shared encoder

    def end_segment(self, epoch: int, state: dict) -> None:
        per_task, epoch_loss, epoch_taken = {}, 0.0, 0
        for t in self.tasks:
            totals = state.setdefault("epoch_totals", {}).pop(t.name, {"steps": 0, "loss": 0.0})
            n, seen = totals.pop("steps"), state.get("epoch_seen", {}).pop(t.name, {})
            taken = totals.pop("taken", 0)
            epoch_loss, epoch_taken = epoch_loss + totals["loss"], epoch_taken + taken
            with self.loop.accelerator.autocast():
                metrics = dev_entry(self.loop.base.heads[t.name], t, self.families[t.name], self.dev[t.name],
                                    self.cfg.eval_batch_size, self.loop.accelerator, self.pad_id)
            per_task[t.name] = {"steps": n, "train_loss": totals.pop("loss") / taken if taken else None,
                                **self.epoch_stats[t.name],
                                **{key: v / taken for key, v in present_stats(totals, seen).items() if taken},
                                **metrics}  # e.g. ssa_loss
        state.pop("epoch_seen", None)
        cfg = self.cfg
        state["history"].append({"epoch": epoch + 1, "train_loss": epoch_loss / epoch_taken if epoch_taken else None,
                                 "schedule_alpha": schedule_alpha(cfg.schedule, epoch, cfg.epochs,
                                                                  cfg.schedule_alpha_end),
                                 "tasks": per_task, "overall": overall_score(self.tasks, per_task)})
        main = {t.name: shown(t.metrics[0], per_task[t.name][t.dev_splits[0]][t.metrics[0]],
                              self.families[t.name].percent_scores) for t in self.tasks}
        self.loop.accelerator.print(f"epoch {epoch + 1}: overall {shown('overall', state['history'][-1]['overall'])}; "
                                    + ", ".join(f"{t.name} {t.metrics[0]} {main[t.name]}" for t in self.tasks))

    def summary(self, state: dict, status: str) -> dict:
        result = {"kind": "multitask", "config": self.cfg.to_dict(), "tasks": [t.name for t in self.tasks],
                  "status": status,
                  "history": state["history"], "train_steps": state["global_step"],
                  "skipped_steps": state["skipped_steps"], "train_examples": {k: len(v) for k, v in self.train.items()},
                  "timing": {"train_seconds": round(state["train_seconds"], 1)}, "warnings": []}
        if state["history"]:
            last = state["history"][-1]
            result.update(dev={k: {s: m for s, m in v.items() if s.startswith("dev")}
                               for k, v in last["tasks"].items()}, overall=last["overall"],
                          warnings=[w for v in last["tasks"].values() for w in v.get("warnings", [])])
        return result

    def save_final(self) -> None:
        atomic_write(self.out / WEIGHTS, lambda f: f.write(safetensors_save(self.loop.base.unique_state_dict())))


def train_multitask(cfg: MultitaskConfig) -> dict:
    """Train all tasks on one encoder, evaluate each on its dev split every epoch, checkpoint, resume;
    return the metrics.json content (per task and epoch, plus `overall`)."""
    out = Path(cfg.output_dir)
    done = finished_run(out, cfg)
    if done is not None:
        return done  # the same command after completion costs nothing
    model_dir = resolve_model_dir(cfg.model)
    check_runnable(cfg, model_dir)  # fp16 without a GPU, sequences longer than the model's positions
    runs = task_runs(cfg, model_dir)
    accelerator = open_run(cfg, out, "multitask")
    seed_everything(cfg.seed)
    encoder, tokenizer = load_from_folder(model_dir)
    model = build_multitask(cfg, encoder, tokenizer, runs)
    train, dev, seconds = {}, {}, [0.0, 0.0]  # reading, encoding
    for run in runs:
        started = time.perf_counter()
        name, (examples, dev_examples) = run.task.name, task_examples(run)
        seconds[0] += time.perf_counter() - started
        started = time.perf_counter()
        train[name] = encode_task(cfg, run, examples, tokenizer, training=True)
        dev[name] = {s: encode_task(cfg, run, ex, tokenizer, training=False) for s, ex in dev_examples.items()}
        seconds[1] += time.perf_counter() - started
    for folder in (out / r.task.name for r in runs if (out / r.task.name).is_dir()):  # they hold SSA's caches
        remove_stale_temporaries(folder)
        check_epoch_caches(folder)
    job = MultitaskJob(cfg, runs, train, dev, tokenizer, out)
    job.data_ready = data_ready_line(*seconds, ", ".join(f"{name} {len(t)}" for name, t in train.items())
                                     + " training examples")
    total_steps = job.steps_per_epoch * cfg.epochs
    return TrainingLoop(cfg, out, accelerator, model, total_steps, round(cfg.warmup_ratio * total_steps)).run(job)


def load_multitask(output_dir) -> tuple[MultitaskBert, object]:
    """(MultitaskBert in eval mode, tokenizer) of a run that `train_multitask` completed in output_dir.

    Rebuilt from the config saved in metrics.json and the weights in model.safetensors, so a notebook can look
    at the shared encoder's attention and each task's SSA token scores after training. The file holds each
    tensor once (`unique_state_dict`): the heads' references to the encoder are filled by `encoder.*`.
    """
    from safetensors.torch import load_file

    out = Path(output_dir)
    if not (out / METRICS).is_file() or not (out / WEIGHTS).is_file():
        raise UsageError(f"{out} holds no completed multitask run ({METRICS} and {WEIGHTS}): run train_multitask "
                         f"there first")
    cfg = MultitaskConfig.from_dict(json.loads((out / METRICS).read_text())["config"], others="drop")
    encoder, tokenizer = load_pretrained(cfg.model)
    model = build_multitask(cfg, encoder, tokenizer)
    missing, unexpected = model.load_state_dict(load_file(out / WEIGHTS), strict=False)
    if unexpected or any(not (k.startswith("heads.") and ".encoder." in k) for k in missing):
        raise UsageError(f"{out / WEIGHTS} does not match its config: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    return model.eval(), tokenizer
