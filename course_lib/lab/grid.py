"""Grids of runs inside the notebook's own process: tasks x methods x seeds, and labelled variants beside them.

`python -m course_lib sweep` runs a grid file with one child process per run; a notebook wants its runs in its
own kernel, to look inside the trained models afterwards. `run_grid` is that form of a grid:

    base = FinetuneConfig(model=p.model or None, epochs=p.epochs, lr=p.lr)   # the recipe every run shares
    ssa = {"ssa_target_weight": p.ssa_target_weight, "ssa_threshold": p.ssa_threshold}  # the SSA methods' options
    results = run_grid(base, tasks=p.tasks, methods=p.methods, seeds=p.seeds, method_options=ssa,
                       variants=[Variant("paper labels", {"ssa_label_mode": "paper"}, methods=("ssa-co",))])
    results["sst2", "ssa-co", 0, "paper labels"]                 # that run's metrics.json, by its RunKey

Each run gets a folder under the output folder (the base's `output_dir` unless given), named the way the sweep
names its runs (`sweep.run_name`): the task, the method, a variant's fields, the seed, as in
`task=sst2,method=ssa-co,ssa_label_mode=paper,seed=0`. A notebook's runs and a sweep's therefore read alike,
and `course_lib.lab.collect` tabulates both. Every run is validated before the first one starts; then each
runs as `finetune`, `train_multitask` or `pretrain` (by the base config's class) runs on its own: a finished
folder is read back, not trained again, and an interrupted one resumes from its checkpoint.

A run keeps only its own method's options (its registry entry's `options` class): `method_options` holds the
options of the grid's methods, flat, and each run takes those its method reads (each is checked by the class that
declares it before the first run, though no run reads it). A vanilla run is then the same run in every notebook
and grid, and collect counts it once. Make demo's read-back (`lab.reuse`) happens here, before each run.
"""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import NamedTuple

from course_lib.lab.records import percent_scale
from course_lib.lab.reuse import reuse_finished_run
from course_lib.lab.sweep import check_method_options, run_name
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import progress
from course_lib.runtime.settings import Settings
from course_lib.tasks.registry import get_task
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig
from course_lib.training.finetune import finetune
from course_lib.training.multitask import train_multitask
from course_lib.training.pretrain import pretrain

RUNNERS = {FinetuneConfig: finetune, MultitaskConfig: train_multitask, PretrainConfig: pretrain}
AXES = ("task", "method", "seed")  # the fields a grid crosses, where its config has them


class RunKey(NamedTuple):
    """A run's place in `run_grid`'s answer. task and method are None where the config has no such field
    (a multitask run has tasks, a pre-training run no task); variant is the label of its settings."""

    task: str | None
    method: str | None
    seed: int
    variant: str = ""

    @property
    def name(self) -> str:
        """What a table calls the run: 'vanilla', 'ssa-co, paper labels', a multitask run's label."""
        return ", ".join(part for part in (self.method, self.variant) if part)


@dataclasses.dataclass(frozen=True)
class Variant:
    """More runs beside the grid: its tasks and seeds again, with `fields` changed, for the grid's methods among
    `methods` (None: all of them). Notebook 01's contrast: `Variant("paper labels", {"ssa_label_mode": "paper"},
    methods=("ssa-co",))`."""

    label: str
    fields: dict
    methods: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class GridRun:
    key: RunKey
    name: str  # its folder under the grid's output folder: 'task=sst2,method=vanilla,seed=0'
    config: Settings  # output_dir is that folder


def _axis(base: Settings, field: str, values) -> list:
    """The values the grid crosses for one field: those given, else the base's own; [None] without the field."""
    if field not in type(base).model_fields:
        if values is not None:
            raise UsageError(f"a grid of {type(base).__name__} runs cannot cross {field}s: the config has no "
                             f"{field!r} (its fields: {', '.join(type(base).model_fields)})")
        return [None]
    if values is None:
        return [getattr(base, field)]
    if isinstance(values, (str, int)) or not values:
        raise UsageError(f"the grid's {field}s must be a non-empty list, got {values!r}")
    return list(values)


def _check_fields(fields: dict, where: str) -> None:
    """A variant or a task's overrides may not set what the grid sets per run (unknown fields: from_dict)."""
    clash = sorted(set(fields) & {*AXES, "output_dir"})
    if clash:
        raise UsageError(f"{where} sets {clash[0]!r}, which the grid sets for each run (tasks, methods and "
                         f"seeds are its axes; output_dir its folder)")


def _keys_of_run(config_cls: type, values: dict) -> set[str]:
    """The flat keys a run of `config_cls` with these values has: its own fields and its chosen method's (and
    task family's) options."""
    nested = config_cls.nested(values)
    return {name for klass in (config_cls, *nested.values()) for name in klass.model_fields} - set(nested)


def _grid_run(base: Settings, parent: Path, key: RunKey, fields: dict, task_overrides: dict,
              method_options: dict) -> GridRun:
    """One run: the base, the method options its method reads, the task's overrides, the variant's fields, then
    the run's task, method and seed."""
    own = set(type(base).model_fields)
    axes = {field: value for field, value in zip(AXES, key) if field in own}
    name = run_name({**{k: v for k, v in axes.items() if k != "seed"}, **fields, "seed": key.seed})
    changes = {**task_overrides.get(key.task, {}), **fields, **axes, "output_dir": str(parent / name)}
    try:
        reads = _keys_of_run(type(base), {**base.to_dict(), **changes})  # an unknown method: refused here
        values = {**base.to_dict(), **{k: v for k, v in method_options.items() if k in reads}, **changes}
        return GridRun(key, name, type(base).from_dict(values, others="drop"))
    except UsageError as err:
        raise UsageError(f"grid run {name}: {err}") from None


def plan_grid(base: Settings, output_dir=None, *, tasks=None, methods=None, seeds=None,
              variants: list[Variant] | tuple = (), task_overrides: dict | None = None,
              label: str = "", method_options: dict | None = None) -> list[GridRun]:
    """Every run of the grid, validated, in the order `run_grid` runs them: the base settings (called `label`)
    over tasks x methods x seeds, then each variant's runs. An axis left None is the base's own value.
    task_overrides: {task: {field: value}}, the fields one task changes (a task the grid lacks is ignored).
    method_options: {option: value} for the grid's methods (SSA's, ASA's, ...), flat; each run takes those its
    method reads, over the base's; every one is checked now."""
    if type(base) not in RUNNERS:
        raise UsageError(f"run_grid runs {', '.join(c.__name__ for c in RUNNERS)}, not {type(base).__name__}")
    parent = Path(output_dir if output_dir is not None else base.output_dir)
    crossed = [_axis(base, field, values) for field, values in zip(AXES, (tasks, methods, seeds))]
    task_overrides = task_overrides or {}
    method_options = dict(method_options or {})
    check_method_options(type(base), method_options)
    for task, fields in task_overrides.items():
        _check_fields(fields, f"task_overrides[{task!r}]")
    runs: dict[str, GridRun] = {}
    for variant in (Variant(label, {}), *variants):
        _check_fields(variant.fields, f"variant {variant.label!r}")
        for task, method, seed in itertools.product(*crossed):
            if variant.methods is None or method in variant.methods:
                run = _grid_run(base, parent, RunKey(task, method, seed, variant.label), variant.fields,
                                task_overrides, method_options)
                if run.name in runs or run.key in {r.key for r in runs.values()}:
                    raise UsageError(f"two runs of the grid would share the folder or key {run.name!r}; "
                                     f"give each variant its own label and fields")
                runs[run.name] = run
    return list(runs.values())


def run_grid(base: Settings, output_dir=None, *, tasks=None, methods=None, seeds=None,
             variants: list[Variant] | tuple = (), task_overrides: dict | None = None,
             label: str = "", method_options: dict | None = None) -> dict[RunKey, dict]:
    """Run the grid `plan_grid` lays out, in this process, with one progress bar over the runs; return each
    run's metrics.json content by its RunKey, in run order. A finished run is read back, not trained again."""
    runs = plan_grid(base, output_dir, tasks=tasks, methods=methods, seeds=seeds, variants=variants,
                     task_overrides=task_overrides, label=label, method_options=method_options)
    results = {}
    for run in progress(runs, desc="runs", unit="run"):
        reuse_finished_run(Path(run.config.output_dir), run.config)  # make demo: the run nbval already finished
        results[run.key] = RUNNERS[type(run.config)](run.config)
    return results


def dev_rows(results: dict[RunKey, dict]) -> list[dict]:
    """The dev scores as table rows (for pandas and `plots.results`): run (the key's name), task, seed, metric
    and dev score, the task's main metric on its first dev split (MNLI: dev_matched) in points, the papers' scale
    (accuracy 0.7925 is 79.25; `records.percent_scale`). A multitask run gives a row per task and one for its
    Overall; a pre-training run, which has no dev set, none."""
    rows = []
    for key, result in results.items():
        scores = result["dev"] if "overall" in result else {result["task"]: result} if "task" in result else {}
        for name, splits in scores.items():
            metric = splits.get("main_metric") or get_task(name).metrics[0]  # a multitask head: its GLUE task's
            split = next(s for s, values in splits.items() if s.startswith("dev") and isinstance(values, dict))
            rows.append({"run": key.name, "task": name, "seed": key.seed, "metric": metric,
                         "dev score": splits[split][metric] * (percent_scale(name, metric) or 1)})
        if "overall" in result:
            rows.append({"run": key.name, "task": "Overall", "seed": key.seed, "metric": "overall",
                         "dev score": result["overall"] * percent_scale("Overall", "overall")})
    return rows
