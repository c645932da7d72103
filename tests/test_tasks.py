"""The task-family registry: GLUE's tasks are presets of the sentence family, and a family defined and registered
outside course_lib (reader, features, head, decoding, scoring, predictions file) fine-tunes like the built-in one."""
import json
from dataclasses import dataclass

import pytest
import torch

from course_lib.errors import UsageError
from course_lib.methods.registry import METHODS
from course_lib.tasks import glue, sentence
from course_lib.tasks.registry import (FAMILIES, TASKS, TaskFamily, get_task, register_family, register_task,
                                      run_family)
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune


def test_every_glue_task_is_a_preset_of_the_sentence_family():
    assert {name for name, task in TASKS.items() if task.family == "sentence"} >= set(glue.GLUE_TASKS)
    assert get_task("SST-2") is glue.GLUE_TASKS["sst2"] and get_task("sts-b") is glue.GLUE_TASKS["stsb"]
    valid = r"anli, cola, conll2003, cs224n_cfimdb, cs224n_para, cs224n_sst, cs224n_sts, custom, "
    with pytest.raises(UsageError, match=r"unknown task 'sst3' \(valid: " + valid):
        get_task("sst3")


@dataclass(frozen=True)
class WordCountTask:
    """A toy preset: is a JSON line's sentence longer than `threshold` words? Scored by a metric of its own."""

    name: str = "toy-long-sentences"
    family: str = "toy-length"
    threshold: int = 6
    dev_splits: tuple[str, ...] = ("dev",)
    num_labels: int = 2
    is_regression: bool = False
    max_len: int = 128
    metrics: tuple[str, ...] = ("error_rate",)  # its main metric first

    def bind(self, cfg):
        """The preset for a run (a preset reading files would resolve them here)."""
        return self


def read_by_length(task, split, cfg):
    """The toy family's reader: the sentences of the SST-2 files, labelled by their length."""
    rows = glue.load_split("sst2", split, cfg.glue_dir)
    return [sentence.Example(ex.texts, int(len(ex.texts[0].split()) > task.threshold)) for ex in rows]


def score_errors(task, predictions, features):
    labels = torch.tensor([f["label"] for f in features])
    return {"error_rate": (predictions.long() != labels).float().mean().item()}, None


def write_json(path, task, predictions, scores):
    path.write_text(json.dumps({"task": task.name, "long": predictions.long().tolist(), "scores": scores}))


@pytest.fixture
def toy_family():
    family = register_family(TaskFamily(
        "toy-length", "a toy family", read=read_by_length, encode=sentence.encode, collate=sentence.collate,
        build_head=sentence.plain_head, decode=sentence.decode, score=score_errors, write_predictions=write_json,
        predictions_suffix="json"))
    task = WordCountTask()
    register_task(task)
    yield family, task
    FAMILIES.pop(family.name)
    TASKS.pop(task.name)


def test_a_family_registered_outside_course_lib_fine_tunes(toy_family, tiny_model_dir, keyword_glue, tmp_path):
    _, task = toy_family
    cfg = FinetuneConfig(task=task.name, model=str(tiny_model_dir), glue_dir=str(keyword_glue), epochs=1, max_len=32,
                         batch_size=16, lr=1e-3, output_dir=str(tmp_path))
    result = finetune(cfg)
    assert result["status"] == "complete" and result["task"] == task.name
    assert set(result["dev"]) == {"error_rate"} and 0.0 <= result["dev"]["error_rate"] <= 1.0  # its own score
    written = json.loads((tmp_path / "dev_predictions.json").read_text())  # its own predictions file
    assert written["task"] == task.name and len(written["long"]) == 64 and set(written["long"]) <= {0, 1}
    assert written["scores"] == result["dev"]


def test_a_method_is_refused_on_a_family_it_does_not_declare(toy_family, tiny_model_dir, keyword_glue, tmp_path):
    _, task = toy_family
    assert METHODS["ssa-co"].families == ("sentence",)
    cfg = FinetuneConfig(task=task.name, model=str(tiny_model_dir), glue_dir=str(keyword_glue), method="ssa-co",
                         output_dir=str(tmp_path / "run"))
    with pytest.raises(UsageError, match=r"method 'ssa-co' does not apply to toy-length tasks"):
        finetune(cfg)
    assert not (tmp_path / "run").exists()


def test_a_glue_run_writes_its_predictions_in_glues_layout(tiny_model_dir, keyword_glue, tmp_path):
    cfg = FinetuneConfig(task="sst2", model=str(tiny_model_dir), glue_dir=str(keyword_glue), epochs=1, max_len=32,
                         batch_size=16, lr=1e-3, output_dir=str(tmp_path))
    result = finetune(cfg)
    lines = (tmp_path / "dev_predictions.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 1 + 64
    rows = [line.split("\t") for line in lines[1:]]
    assert [int(i) for i, _ in rows] == list(range(64)) and {p for _, p in rows} <= {"0", "1"}
    gold = [ex.label for ex in glue.load_split("sst2", "dev", keyword_glue)]
    accuracy = sum(int(p) == y for (_, p), y in zip(rows, gold)) / len(gold)
    assert accuracy == pytest.approx(result["dev"]["accuracy"])  # the file holds what was scored


def test_a_runs_family_is_known_without_its_files(monkeypatch, tmp_path):
    for env in ("SQUAD_DIR", "WNUT17_DIR", "DREAM_DIR"):
        monkeypatch.delenv(env, raising=False)  # no data anywhere: binding these presets would fail
    monkeypatch.chdir(tmp_path)
    families = {task: run_family(FinetuneConfig(task=task)) for task in ("sst2", "squad_articles", "wnut17", "dream")}
    assert families == {"sst2": "sentence", "squad_articles": "span_qa", "wnut17": "tagging",
                        "dream": "multiple_choice"}
    assert run_family(FinetuneConfig(task="custom", task_type="tagging")) == "tagging"
    with pytest.raises(UsageError, match="unknown --task-type for --task custom None"):
        run_family(FinetuneConfig(task="custom"))
