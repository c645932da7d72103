"""What each kind of run's `metrics.json` contributes to the results table.

Every training job writes its `kind` into metrics.json: `finetune` (one task of any family), `multitask` (one
encoder, a head per task) and `pretrain` (masked-language-model pre-training, with or without AG). A kind
says how its file becomes table rows (one per task head; multitask adds the overall score), which method a run
stands for, the baseline it is tested against, and which of its config fields belong to the method (left out
when two runs are paired): the kind's own method fields and the options of every method in its registry.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Callable

from course_lib.lab.glue_score import GLUE_SCORE, glue_score
from course_lib.methods.pretraining import PRETRAIN_METHODS
from course_lib.methods.registry import every_method
from course_lib.runtime.errors import UsageError
from course_lib.tasks.metrics import is_score
from course_lib.tasks.registry import find_task, get_family
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig

LOWER_IS_BETTER = ("loss", "perplexity")  # metric names containing these improve downwards
READ_ON = {  # options a run reads only on some tasks (a table leaves them out of the others' labels): ASA's
    # divergence of a tagger's outputs, and of a regressor's (one score per sentence)
    "asa_tagging_divergence": lambda task: task.family == "tagging",
    "asa_regression_divergence": lambda task: task.family == "sentence" and getattr(task, "num_labels", None) == 1,
}


def task_reads(key: str, task) -> bool:
    """Whether a run on `task` (a task preset; None: unknown here) reads option `key` at all."""
    return task is None or READ_ON.get(key, lambda _: True)(task)


def lower_is_better(metric: str) -> bool:
    return any(word in metric for word in LOWER_IS_BETTER)


def percent_scale(task: str, metric: str) -> int | None:
    """What a results table multiplies this metric by to show it in percent, the papers' scale: 100 for a score
    the task's family gives as a fraction ('dev accuracy' 0.79 shows as 79.00), 1 for one it gives in percent
    already (SQuAD's exact match and F1), None for a metric that is no score (a loss, a count)."""
    if not is_score(metric):
        return None
    family = getattr(find_task(task), "family", None)
    return 1 if family is not None and get_family(family).percent_scores else 100


def _defaults(config_class) -> dict:
    """Each flat key's declared default: the config's fields and those of every options class it may nest."""
    flat = config_class.flat_hints()
    values: dict = {}
    for klass in (config_class, *config_class.option_classes()):
        for name in klass.model_fields:
            if name in flat:
                values.setdefault(name, klass.default(name))
    return values


def _option_names(methods: dict) -> tuple[str, ...]:
    """The flat keys of the methods' options classes (`methods`: a registry's entries by name), not a task
    family's: those describe the data."""
    return tuple(dict.fromkeys(name for m in methods.values() for name in m.options.model_fields))


@dataclasses.dataclass(frozen=True)
class RunKind:
    name: str
    title: str  # the heading of its section in the results table
    defaults: dict  # each field's and option's declared default: a label names the options off it
    baseline: str  # the method every other one of this kind is tested against
    method_fields: tuple[str, ...]  # config fields that choose the method, beside its options
    method: Callable[[dict], str]  # config -> the method a run stands for
    tasks: Callable[[dict], list[dict]]  # metrics.json -> [{"task", "metrics", "main_metric"}]
    option_fields: tuple[str, ...] = ()  # the methods' own options (their registry entries' options classes)
    config_class: type | None = None  # its config: which options its method reads
    by_family: bool = False  # its results table is one per task family (their metrics and settings differ)

    def is_method_field(self, name: str) -> bool:
        return name in self.method_fields or name in self.option_fields

    def config_of(self, saved: dict) -> dict:
        """A saved run's config, as its metrics.json holds it: every key the run read (its fields, its method's
        and its task family's options) and no other. Files of an older shape are not read here: the results
        archive was migrated once to this one."""
        return dict(saved)

    def label_options(self, config: dict, task: str) -> dict:
        """The method's own options a row's label names: those off today's defaults that a run on `task` reads;
        none for the baseline, which reads no method's options."""
        if self.method(config) == self.baseline:
            return {}
        options = self.config_class.nested(config).get("options") if self.config_class else None
        preset = find_task(task)
        return {k: v for k, v in sorted(config.items())
                if self.is_method_field(k) and k not in self.method_fields and v != self.defaults.get(k)
                and (options is None or task_reads(k, preset))}

    def reads(self, config: dict, task: str, key: str) -> bool:
        """Whether a run with this config, on `task`, reads setting `key`: a field of its kind's own, or an
        option of its method or its task family that a run on that task reads (ASA's tagging divergence is read
        on tagging tasks only). A results table shows a row only the settings it reads."""
        if self.config_class is None:
            return True
        choice = {k: config[k] for k in ("method", "ssa_method", "task", "task_type") if k in config}
        try:
            return key in _keys_read(self.config_class, json.dumps(choice, sort_keys=True), task)
        except UsageError:  # a method or task this copy does not know: say everything it saved
            return True


@functools.lru_cache(maxsize=None)
def _keys_read(config_class: type, choice: str, task: str) -> frozenset[str]:
    """The flat keys a run of `config_class` with the choosing values `choice` (JSON) reads on `task`."""
    nested = config_class.nested(json.loads(choice))
    preset = find_task(task)
    own = set(config_class.model_fields) - set(nested)
    options = {name for klass in nested.values() for name in klass.model_fields if task_reads(name, preset)}
    return frozenset(own | options)


KINDS: dict[str, RunKind] = {}


def register_kind(kind: RunKind) -> RunKind:
    KINDS[kind.name] = kind
    return kind


def kind_of(result: dict) -> RunKind | None:
    """The kind a metrics.json says (its `kind`); None for a file that names no kind of ours."""
    kind = result.get("kind")
    return KINDS.get(kind) if isinstance(kind, str) else None


def split_metrics(splits: dict) -> dict[str, float]:
    """{'dev accuracy': 0.84, 'test accuracy': 0.83, ...}: each dev or test split's numbers as '<split> <metric>'."""
    return {f"{split} {name}": value for split, values in splits.items()
            if split.startswith(("dev", "test")) and isinstance(values, dict)
            for name, value in values.items() if isinstance(value, (int, float))}


def _main_metric(result: dict, metrics: dict[str, float]) -> str | None:
    """'<first dev split> <the task's main metric>'; a file without `main_metric` falls back to its first."""
    split = next((s for s in result if s.startswith("dev") and isinstance(result[s], dict)), "dev")
    name = result.get("main_metric")
    if name is not None and f"{split} {name}" in metrics:
        return f"{split} {name}"
    return next(iter(metrics), None)


def _finetune_tasks(result: dict) -> list[dict]:
    """One row: every dev and test metric; a GLUE task's row also its GLUE score, 'dev glue_score', which spans
    MNLI's two dev splits (`lab.glue_score`)."""
    metrics = split_metrics(result)
    main = _main_metric(result, metrics)
    score = glue_score(result["task"], result)
    if score is not None:
        metrics[f"dev {GLUE_SCORE}"] = score
    return [{"task": result["task"], "metrics": metrics, "main_metric": main}]


def _multitask_tasks(result: dict) -> list[dict]:
    """A row per head (its dev metrics) and an 'overall' row: the report's mean of the heads' main metrics."""
    rows = []
    for task, splits in result.get("dev", {}).items():
        metrics = split_metrics(splits)
        preset = find_task(task)
        main = next((f"{split} {preset.metrics[0]}" for split in splits if preset is not None), None)
        main = main if main in metrics else next(iter(metrics), None)
        rows.append({"task": task, "metrics": metrics, "main_metric": main})
    if isinstance(result.get("overall"), (int, float)):
        rows.append({"task": "overall", "metrics": {"dev overall": result["overall"]}, "main_metric": "dev overall"})
    return rows


def _pretrain_tasks(result: dict) -> list[dict]:
    """One row: the held-out MLM loss, its perplexity exp(loss), and the held-out AG loss (measured for both)."""
    final = result.get("final", {})
    loss = final.get("eval_mlm_loss")
    if not isinstance(loss, (int, float)):
        return []
    metrics = {"held-out mlm_loss": loss, "held-out perplexity": math.exp(min(loss, 700.0))}
    if isinstance(final.get("eval_ag_loss"), (int, float)):
        metrics["held-out ag_loss"] = final["eval_ag_loss"]
    return [{"task": "mlm", "metrics": metrics, "main_metric": "held-out mlm_loss"}]


register_kind(RunKind(
    "finetune", "Fine-tuning", _defaults(FinetuneConfig), "vanilla", ("method",),
    method=lambda config: config.get("method", "vanilla"), tasks=_finetune_tasks,
    option_fields=_option_names(every_method()), config_class=FinetuneConfig, by_family=True))
register_kind(RunKind(
    "multitask", "Multitask (one encoder, a head per task)", _defaults(MultitaskConfig), "vanilla",
    ("ssa", "ssa_method"),
    method=lambda config: "vanilla" if config.get("ssa", "none") == "none" else config.get("ssa_method", "ssa-co"),
    tasks=_multitask_tasks, option_fields=_option_names(every_method()), config_class=MultitaskConfig))
register_kind(RunKind(
    "pretrain", "MLM pre-training (held-out blocks)", _defaults(PretrainConfig), "mlm", ("method",),
    method=lambda config: config.get("method", "mlm"), tasks=_pretrain_tasks,
    option_fields=_option_names(PRETRAIN_METHODS.every()), config_class=PretrainConfig))
