"""A fine-tuning run's names resolved once: its task bound to the run's files, the task's family, the method and
the model folder. Everything below the run (data, model, job, evaluation) takes these objects instead of asking
the registries again, so a run reads each name in one place and fails on a bad one before anything is written."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from course_lib.methods.registry import Method, get_method
from course_lib.model.model_folder import resolve_model_dir
from course_lib.tasks.registry import TaskFamily, get_family, get_task, run_task
from course_lib.training.config import FinetuneConfig


@dataclass(frozen=True)
class Run:
    """A fine-tuning run: its config and what its names resolve to."""

    cfg: FinetuneConfig
    task: object  # the task preset bound to the run's files and options (its `.bind(cfg)`, via `run_task`)
    family: TaskFamily
    method: Method
    model_dir: Path | None  # None: a head built on an encoder already loaded (`resolve_preset`)


def resolve(cfg: FinetuneConfig, model_dir: Path | None = None) -> Run:
    """The run's task (a missing file or column stops here), family, method (one that does not apply to the
    task's family stops here) and model folder (a hub id is fetched here). model_dir: already resolved (a
    multitask run's tasks share one model)."""
    task = run_task(cfg)
    method = get_method(cfg.method)
    method.check_family(task.family)
    return Run(cfg, task, get_family(task.family), method,
               resolve_model_dir(cfg.model) if model_dir is None else model_dir)


def resolve_preset(cfg: FinetuneConfig) -> Run:
    """The run as a head built on an encoder already loaded needs it: the task's preset as it is (no file read)
    and no model folder (a multitask model rebuilt from a finished run's folder, or on a toy encoder)."""
    preset = get_task(cfg.task)
    return Run(cfg, preset, get_family(preset.family), get_method(cfg.method), None)
