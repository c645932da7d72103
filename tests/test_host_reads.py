"""No training step waits for the device: every loop, method and task family reads its losses, statistics and the
non-finite guard once per logging window, not once per step.

On a GPU a host read (`.item()`, `float(t)`, `if t:`, `.tolist()`, `.cpu()`, `.numpy()`) stops the CPU until
every kernel queued so far has run, so it cannot queue the next step ahead. A CPU has no such wait, so the test
counts the calls themselves, with the models' accelerator path on (`host_reads.READ_ON_CPU = False`: no branch
on values), during steps 2..N of short runs (the first may set things up; evaluation and SSA's probing between
epochs are not steps), and fails when there are more than the logging windows' reads.
"""
from __future__ import annotations

import contextlib
import json

import pytest
import torch

from course_lib.model import host_reads
from course_lib.training import loop as loop_module
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig
from course_lib.training.finetune import finetune
from course_lib.training.multitask import train_multitask
from course_lib.training.pretrain import pretrain

READS = ("item", "__float__", "__int__", "__bool__", "tolist", "cpu", "numpy")
LOG_EVERY = 5


class ReadCounter:
    """Counts host reads while on (`counting`), and the logging windows the loop read in the same time."""

    def __init__(self):
        self.on, self.reads, self.windows, self.started = False, [], 0, False

    @contextlib.contextmanager
    def paused(self):
        was, self.on = self.on, False
        try:
            yield
        finally:
            self.on = was


def install(monkeypatch, counter: ReadCounter) -> None:
    for name in READS:
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            if counter.on:
                counter.reads.append(_name)
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counted)

    real_step, real_read, real_segment = (loop_module.guarded_step, loop_module.TrainingLoop.read,
                                          loop_module.TrainingLoop._train_segment)

    def step(*args, **kwargs):
        taken = real_step(*args, **kwargs)
        counter.on = True  # from the end of the first step on
        return taken

    def read(self, bar=None):
        if counter.on and self._window:
            counter.windows += 1
        return real_read(self, bar)

    def segment(self, job, index):
        plan = job.plan

        def quiet_plan(s):  # SSA's probing and BERT-mask's copies happen between epochs, not in a step
            with counter.paused():
                return plan(s)
        job.plan = quiet_plan
        try:
            real_segment(self, job, index)
        finally:
            del job.plan
            counter.on = False  # evaluation at the segment's end is not a step
    monkeypatch.setattr(loop_module, "guarded_step", step)
    monkeypatch.setattr(loop_module.TrainingLoop, "read", read)
    monkeypatch.setattr(loop_module.TrainingLoop, "_train_segment", segment)
    monkeypatch.setattr(host_reads, "READ_ON_CPU", False)


@pytest.fixture
def counter(monkeypatch):
    counter = ReadCounter()
    install(monkeypatch, counter)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return counter


SMALL = {"max_train_samples": 48, "max_eval_samples": 16, "epochs": 2, "batch_size": 4, "lr": 1e-4,
         "log_every": LOG_EVERY}


def check(counter: ReadCounter, result: dict, steps: int) -> None:
    assert result["status"] == "complete" and result["train_steps"] == steps
    assert counter.windows >= steps // LOG_EVERY  # the windows were read
    assert len(counter.reads) <= counter.windows, (
        f"{len(counter.reads)} host reads in {counter.windows} logging windows: {sorted(set(counter.reads))}")


@pytest.mark.parametrize("method", ["vanilla", "ssaf", "asa", "bernoulli-mask", "ssa-co", "ssa-hybrid", "bert-mask",
                                    "mean-pool"])
def test_fine_tuning_reads_once_per_window_for_every_method(method, counter, tiny_model_dir, tmp_path):
    cfg = FinetuneConfig(task="sst2", method=method, model=str(tiny_model_dir), max_len=32,
                         output_dir=str(tmp_path), **SMALL)
    check(counter, finetune(cfg), 24)


@pytest.mark.parametrize("task, method, max_len", [
    ("stsb", "asa", 48), ("stsb", "ssa-hybrid", 48), ("wnut17", "asa", 48), ("wnut17", "vanilla", 48),
    ("squad_articles", "asa", 64), ("squad_articles", "vanilla", 64),
])
def test_every_task_family_reads_once_per_window(task, method, max_len, counter, tiny_model_dir, tmp_path):
    extra = {"doc_stride": 24, "max_query_length": 16} if task.startswith("squad") else {}
    cfg = FinetuneConfig.from_dict({"task": task, "method": method, "model": str(tiny_model_dir), "max_len": max_len,
                                    "output_dir": str(tmp_path), **SMALL, **extra})
    result = finetune(cfg)
    check(counter, result, result["train_steps"])


@pytest.mark.parametrize("method", ["vanilla", "asa", "ssaf"])
def test_multiple_choice_reads_once_per_window(method, counter, tiny_model_dir, tmp_path):
    colours = ["red", "blue", "green", "yellow"]
    for split, n in (("train", 24), ("dev", 8)):
        rows = [{"ctx": f"she picked up the {colours[i % 4]} ball", "label": i % 4,
                 "endings": [f"the {c} one" for c in colours]} for i in range(n)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = FinetuneConfig(task="custom", task_type="multiple-choice", train_file=str(tmp_path / "train.jsonl"),
                         validation_file=str(tmp_path / "dev.jsonl"), method=method, model=str(tiny_model_dir),
                         max_len=32, output_dir=str(tmp_path / "run"), **SMALL)
    check(counter, finetune(cfg), 12)


def test_multitask_with_ssa_reads_once_per_window(counter, tiny_model_dir, tmp_path):
    cfg = MultitaskConfig(tasks="sst2,stsb", ssa="stsb", model=str(tiny_model_dir), max_len=32,
                          output_dir=str(tmp_path), **SMALL)
    check(counter, train_multitask(cfg), 48)


def test_cs224n_mode_reads_once_per_window(counter, tiny_model_dir, tmp_path):
    from cs224n_fixture import learnable_course_folder

    from course_lib.teaching.cs224n_project import run_cs224n

    data = learnable_course_folder(tmp_path / "data", n_train=48, n_dev=16)
    cfg = MultitaskConfig(cs224n=True, data_dir=str(data), model=str(tiny_model_dir), max_len=32,
                          output_dir=str(tmp_path / "run"), **SMALL)
    result = run_cs224n(cfg)
    check(counter, result, result["train_steps"])


@pytest.mark.parametrize("method", ["mlm", "ag"])
def test_pre_training_reads_once_per_window(method, counter, tmp_path):
    cfg = PretrainConfig.from_dict({"method": method, "output_dir": str(tmp_path), "max_steps": 20,
                                    "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                    "intermediate_size": 128, "max_len": 32,
                                    "batch_size": 8, "eval_every": 10, "log_every": LOG_EVERY, "eval_blocks": 8,
                                    "ag_head_types": "0,1,1,1"})
    check(counter, pretrain(cfg), 20)


def test_a_per_step_read_is_caught(counter, tiny_model_dir, tmp_path, monkeypatch):
    """The test can fail: a job that reads its loss every step, as the loops did before, is counted."""
    from course_lib.training.finetune import FinetuneJob

    real_loss = FinetuneJob.loss

    def reading_loss(self, rows):
        loss, value, record = real_loss(self, rows)
        value.item()
        return loss, value, record
    monkeypatch.setattr(FinetuneJob, "loss", reading_loss)
    cfg = FinetuneConfig(task="sst2", model=str(tiny_model_dir), max_len=32, output_dir=str(tmp_path), **SMALL)
    result = finetune(cfg)
    assert len(counter.reads) > counter.windows and result["train_steps"] == 24
