"""The task-family registry: GLUE's tasks are presets of the sentence family, and a family defined and registered
outside course_lib (reader, features, head, decoding, scoring, predictions file, an option of its own) fine-tunes
like the built-in one: its option is a flag with its help, checked before anything is written, saved in
metrics.json, refused for another family's run (issue 41)."""
import json
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
from pydantic import Field

from course_lib.methods.registry import get_method
from course_lib.cli import main
from course_lib.runtime.errors import UsageError
from course_lib.runtime.settings import Settings
from course_lib.tasks import glue, sentence
from course_lib.tasks.registry import (FAMILIES, TASKS, TaskFamily, every_task, family_of, get_task, register_family,
                                       register_task, run_task)
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune


def test_every_glue_task_is_a_preset_of_the_sentence_family():
    assert {name for name, task in every_task().items() if task.family == "sentence"} >= set(glue.GLUE_TASKS)
    assert get_task("SST-2") is glue.GLUE_TASKS["sst2"] and get_task("sts-b") is glue.GLUE_TASKS["stsb"]
    valid = r"anli, cola, conll2003, cs224n_cfimdb, cs224n_para, cs224n_sst, cs224n_sts, custom, "
    with pytest.raises(UsageError, match=r"unknown task 'sst3' \(valid: " + valid):
        get_task("sst3")


def test_a_glue_preset_refuses_the_options_of_a_custom_sentence_file():
    """The sentence family's options describe a run's own files; a GLUE preset reads its own columns (it used to
    ignore them)."""
    with pytest.raises(UsageError, match=r"--text-columns is for --task custom; sst2 reads its own columns "
                                         r"\(sentence, label\)"):
        run_task(FinetuneConfig.from_dict({"task": "sst2", "text_columns": "x"}))


class LengthOptions(Settings):
    """The toy family's option."""

    long_from: int = Field(7, gt=0, description="a sentence of this many words or more is long")


@dataclass(frozen=True)
class WordCountTask:
    """A toy preset: is a sentence long (the family's option `long_from`)? Scored by a metric of its own."""

    name: str = "toy-long-sentences"
    family: str = "toy-length"
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
    return [sentence.Example(ex.texts, int(len(ex.texts[0].split()) >= cfg.task_options.long_from)) for ex in rows]


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
        predictions_suffix="json", options=LengthOptions))
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


def toy_args(tiny_model_dir, keyword_glue, out, *extra):
    return ["finetune", "--task", "toy-long-sentences", "--model", str(tiny_model_dir), "--glue-dir",
            str(keyword_glue), "--epochs", "1", "--max-len", "32", "--batch-size", "16", "--output-dir", str(out),
            *extra]


def test_a_toy_familys_option_is_a_flag_with_its_help(toy_family, capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = capsys.readouterr().out
    assert "options of task family toy-length:" in text
    assert "--long-from INT" in text and "a sentence of this many words or more is long" in text


def test_a_bad_toy_family_option_is_one_line_and_exit_2_before_training(toy_family, tiny_model_dir, keyword_glue,
                                                                       tmp_path, capsys):
    out = tmp_path / "run"
    assert main(toy_args(tiny_model_dir, keyword_glue, out, "--long-from", "0")) == 2
    assert capsys.readouterr().err.strip() == "error: LengthOptions.long_from must be > 0, got 0" and not out.exists()
    sst2 = ["finetune", "--task", "sst2", "--glue-dir", str(keyword_glue), "--output-dir", str(out), "--long-from", "5"]
    assert main(sst2) == 2  # another family's run
    assert "option 'long_from' belongs to task family toy-length, not to this run" in capsys.readouterr().err
    assert not out.exists()


def test_a_toy_familys_option_lands_in_metrics_json_and_changes_the_labels(toy_family, tiny_model_dir,
                                                                           keyword_glue, tmp_path):
    runs = {}
    for words in ("4", "10"):
        out = tmp_path / words
        assert main(toy_args(tiny_model_dir, keyword_glue, out, "--long-from", words)) == 0
        runs[words] = json.loads((out / "metrics.json").read_text())
    assert runs["4"]["config"]["long_from"] == 4 and runs["4"]["status"] == "complete"
    assert runs["4"]["history"][0]["train_loss"] != runs["10"]["history"][0]["train_loss"]  # it reached the data


def test_a_method_is_refused_on_a_family_it_does_not_declare(toy_family, tiny_model_dir, keyword_glue, tmp_path):
    _, task = toy_family
    assert get_method("ssa-co").families == ("sentence",)
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
    families = {task: family_of(task, None).name for task in ("sst2", "squad_articles", "wnut17", "dream")}
    assert families == {"sst2": "sentence", "squad_articles": "span_qa", "wnut17": "tagging",
                        "dream": "multiple_choice"}
    assert family_of("custom", "tagging").name == "tagging"
    assert type(FinetuneConfig(task="custom", task_type="tagging").task_options).__name__ == "TaggingFileOptions"
    with pytest.raises(UsageError, match="unknown --task-type for --task custom None"):
        family_of("custom", None)


def _in_a_fresh_interpreter(code: str):
    """What `code` prints last, as JSON, run where no family, preset or method is loaded yet."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


LOADED = "import json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('course_lib.'))))\n"


def test_an_sst2_run_with_ssa_loads_neither_other_families_nor_other_methods():
    loaded = set(_in_a_fresh_interpreter(
        "from course_lib.training.config import FinetuneConfig\n"
        "from course_lib.tasks.registry import family_of, run_task\n"
        "cfg = FinetuneConfig(task='SST-2', method='ssa-co')\n"
        "family_of(cfg.task, cfg.task_type).options, run_task(cfg)\n" + LOADED))
    assert {"course_lib.tasks.glue", "course_lib.tasks.sentence", "course_lib.methods.ssa"} <= loaded
    others = {"course_lib.tasks.squad", "course_lib.tasks.span_qa", "course_lib.tasks.tagging",
              "course_lib.tasks.multiple_choice", "course_lib.readers.cs224n", "course_lib.methods.asa",
              "course_lib.methods.ssaf"}
    assert not loaded & others


def test_the_listing_order_does_not_depend_on_what_was_looked_up_first():
    listing = ("from course_lib.tasks.registry import every_family, every_task\n"
               "from course_lib.methods.registry import every_method\n"
               "print(json.dumps([list(every_task()), list(every_family()), list(every_method())]))\n")
    direct = _in_a_fresh_interpreter("import json\n" + listing)
    after_lookups = _in_a_fresh_interpreter(
        "import json\nfrom course_lib.tasks.registry import get_task, get_family\n"
        "from course_lib.methods.registry import get_method\n"
        "get_task('wnut17'), get_family('multiple_choice'), get_method('asa')\n" + listing)
    assert direct == after_lookups
    assert direct[0][0] == "cola" and direct[0][-1] == "custom" and direct[1][0] == "sentence"


def test_a_name_taken_by_a_built_in_is_refused_before_the_built_in_loads():
    refused = _in_a_fresh_interpreter(
        "import json\nfrom course_lib.tasks.registry import FAMILIES, TaskFamily, register_family\n"
        "from course_lib.methods.registry import METHODS, Method, register\n"
        "before = ['tagging' in FAMILIES, 'asa' in METHODS]\n"
        "errors = []\n"
        "from course_lib.tasks.registry import register_task\n"
        "from course_lib.tasks.tagging import PRESETS\n"
        "import dataclasses\n"
        "for add in (lambda: register_family(TaskFamily('tagging', 'mine', *[print] * 7, predictions_suffix='txt')),\n"
        "            lambda: register(Method('asa', 'mine')),\n"
        "            lambda: register_task(dataclasses.replace(PRESETS[0]))):\n"
        "    try:\n        add()\n    except ValueError as err:\n        errors.append(str(err))\n"
        "print(json.dumps([before, errors]))\n")
    assert refused == [[False, False], ["a task family named 'tagging' is registered already",
                                        "a method named 'asa' is registered already",
                                        "a task named 'wnut17' is registered already"]]


def test_every_built_in_preset_belongs_to_a_built_in_family():
    from course_lib.tasks.registry import FAMILIES

    for name, task in every_task().items():
        assert task.family is None and name == "custom" or task.family in FAMILIES.builtin_names, name
