"""`report_to`: live curves while a run trains. The `jsonl` tracker's file read back: the run named by its folder,
the training loss and learning rate every logging window, each epoch's history entry (method statistics, dev
metrics) at its step; a tracker whose package is missing is one line naming the pip package, before any run."""
import json
import math

import pytest

from course_lib import cli
from course_lib.runtime import tracking
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import METRICS
from course_lib.runtime.tracking import CURVES, scalars
from course_lib.training.config import FinetuneConfig, PretrainConfig
from course_lib.training.finetune import finetune
from course_lib.training.pretrain import pretrain


def _curves(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / CURVES).read_text().splitlines()]


def test_a_fine_tuning_run_logs_its_windows_and_epochs(tiny_model_dir, keyword_glue, tmp_path):
    out = tmp_path / "task=sst2,method=asa,seed=0"  # a sweep's cell: the tracker's run takes the folder's name
    cfg = FinetuneConfig(task="sst2", method="asa", glue_dir=str(keyword_glue), model=str(tiny_model_dir), epochs=2,
                         max_train_samples=64, batch_size=16, lr=1e-3, max_len=32, log_every=2, report_to="jsonl",
                         output_dir=str(out))
    result = finetune(cfg)
    lines = _curves(out)
    assert lines[0]["run"] == out.name
    assert lines[0]["config"] == {k: "None" if v is None else v for k, v in cfg.to_dict().items()}
    windows = [line for line in lines[1:] if "train/loss" in line]
    assert [line["step"] for line in windows] == [2, 4, 6, 8]  # 4 steps an epoch, a window every 2
    assert all(math.isfinite(line["train/loss"]) and line["train/lr"] >= 0 for line in windows)
    epochs = [line for line in lines[1:] if any(k.startswith("epoch/") for k in line)]
    assert [line["step"] for line in epochs] == [4, 8]
    for logged, entry in zip(epochs, result["history"]):
        assert {k: v for k, v in logged.items() if k != "step"} == scalars(entry, "epoch/")
    assert epochs[-1]["epoch/dev/accuracy"] == result["dev"]["accuracy"]
    assert any(k.startswith("epoch/") and "cut" in k for k in epochs[0])  # ASA's statistics among them


def test_a_pre_training_run_logs_its_held_out_losses(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sees the dog .\nthe dog sees a cat .\n" * 40)
    out = tmp_path / "ag"
    result = pretrain(PretrainConfig.from_dict({
        "method": "ag", "corpus": str(corpus), "output_dir": str(out), "max_steps": 8, "eval_every": 4,
        "log_every": 4, "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
        "max_len": 16, "batch_size": 8, "eval_blocks": 8, "ag_head_types": "0,1,1,1", "report_to": "jsonl"}))
    evaluated = [line for line in _curves(out)[1:] if any(k.startswith("held_out/") for k in line)]
    scored = [e for e in result["eval_curve"] if e["step"] > 0]  # the scores after training began
    assert [line["step"] for line in evaluated] == [e["step"] for e in scored] == [4, 8]
    assert [line["held_out/mlm_loss"] for line in evaluated] == [e["mlm_loss"] for e in scored]


def test_report_to_is_no_part_of_a_runs_identity(tiny_model_dir, keyword_glue, tmp_path):
    options = dict(task="sst2", glue_dir=str(keyword_glue), model=str(tiny_model_dir), epochs=1, max_train_samples=32,
                   batch_size=16, max_len=32, output_dir=str(tmp_path / "run"))
    first = finetune(FinetuneConfig(**options))
    again = finetune(FinetuneConfig(**options, report_to="jsonl"))  # the finished run, read back
    assert again == first == json.loads((tmp_path / "run" / METRICS).read_text())


def test_a_missing_tracker_package_or_an_unknown_name_is_one_line_before_any_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError, match=r"^report_to tensorboard needs the tensorboard package: pip install "
                                         r"tensorboard \(or --report-to jsonl, which needs none\)$"):
        FinetuneConfig(report_to="tensorboard")
    assert cli.main(["finetune", "--report-to", "tensorbored", "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown report_to 'tensorbored' (valid: none, jsonl, tensorboard, wandb")
    assert err.count("\n") == 1 and not (tmp_path / "x").exists()


def test_a_multitask_run_logs_each_heads_dev_metrics_by_name(tiny_model_dir, glue_dir, tmp_path):
    from course_lib.training.config import MultitaskConfig
    from course_lib.training.multitask import train_multitask

    out = tmp_path / "mt"
    result = train_multitask(MultitaskConfig(tasks="sst2,stsb", model=str(tiny_model_dir), glue_dir=str(glue_dir),
                                             max_train_samples=32, max_eval_samples=16, epochs=1, batch_size=16,
                                             max_len=32, report_to="jsonl", output_dir=str(out)))
    epoch = next(line for line in _curves(out)[1:] if any(k.startswith("epoch/") for k in line))
    assert epoch == {"step": epoch["step"], **scalars(result["history"][-1], "epoch/")}
    assert {"epoch/tasks/sst2/dev/accuracy", "epoch/tasks/stsb/dev/pearson", "epoch/overall"} <= set(epoch)
