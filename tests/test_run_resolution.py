"""A run resolves each name once (`training.run.resolve`): the task, its family, the method and the model folder
are looked up in one place, and everything below the run (data, model, job, evaluation) takes the resolved
objects. Counted on the calls themselves, wherever the caller imported them from."""
from __future__ import annotations

import sys
from collections import Counter

from course_lib.model import model_folder
from course_lib.runtime.registry import Registry
from course_lib.training.config import FinetuneConfig, MultitaskConfig
from course_lib.training.finetune import finetune
from course_lib.training.loop import TrainingLoop
from course_lib.training.multitask import train_multitask


def _count_lookups(run) -> Counter:
    """{registry kind or "model folder": calls} while `run()` runs, counted by a profile hook on the functions'
    code, so a name bound at import (`get_task = TASKS.get`) is counted too."""
    calls: Counter = Counter()
    lookup, folder = Registry.get.__code__, model_folder.resolve_model_dir.__code__

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is lookup:
            calls[frame.f_locals["self"].kind] += 1
        elif event == "call" and frame.f_code is folder:
            calls["model folder"] += 1

    previous = sys.getprofile()  # a count around this one goes on after it
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return calls


def test_one_finetune_run_resolves_its_task_family_method_and_model_folder_once(tiny_model_dir, keyword_glue,
                                                                                tmp_path):
    """SSA-Co over two epochs: the second epoch's labels probe the model (the method's epoch data), each epoch
    evaluates (the family's decoding and scores), so every place that once asked a registry again runs."""
    cfg = FinetuneConfig(task="sst2", method="ssa-co", model=str(tiny_model_dir), glue_dir=str(keyword_glue),
                         output_dir=str(tmp_path / "run"), epochs=2, batch_size=16, max_len=32,
                         max_train_samples=32, max_eval_samples=16)
    calls = _count_lookups(lambda: finetune(cfg))
    assert calls == {"task": 1, "task family": 1, "method": 1, "model folder": 1}, calls


def test_a_multitask_run_resolves_the_model_folder_once_and_its_training_asks_no_registry(tiny_model_dir, tmp_path,
                                                                                          monkeypatch):
    """Each task's run is resolved before training (`multitask.task_runs`, sharing the one model folder); the
    training loop (epoch data, steps, evaluation) takes those objects and looks nothing up. (Each task's config
    is a fine-tuning config, whose own checks look its names up when it is built.)"""
    cfg = MultitaskConfig(tasks="sst2,rte", ssa="sst2", model=str(tiny_model_dir),
                          output_dir=str(tmp_path / "run"), epochs=2, batch_size=16, max_len=32,
                          max_train_samples=16, max_eval_samples=16)
    in_loop, run_loop = Counter(), TrainingLoop.run

    def counted_run(loop, job):
        result = {}
        in_loop.update(_count_lookups(lambda: result.setdefault("metrics", run_loop(loop, job))))
        return result["metrics"]

    monkeypatch.setattr(TrainingLoop, "run", counted_run)
    calls = _count_lookups(lambda: train_multitask(cfg))
    assert calls["model folder"] == 1 and in_loop == {}, (calls, in_loop)
