"""docs/extending.md is run, not only read: its code blocks are the toys. The method block and the family block
are written to a module of their own and imported (as a user would), then trained on a tiny model; the
notebook recipe is followed with a toy notebook, which a `notebook: all` grid picks up before 06_results."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from course_lib.lab import notebooks, sweep
from course_lib.methods.registry import METHODS
from course_lib.notebook import params as notebook_params
from course_lib import cli
from course_lib.tasks.registry import FAMILIES, TASKS
from course_lib.training import finetune as finetune_module
from course_lib.training.config import FinetuneConfig

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "extending.md"


def blocks(section: str) -> list[str]:
    """The python code blocks of one `## ` section of the guide, in order."""
    text = GUIDE.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, re.S)


def import_block(code: str, name: str, folder: Path):
    """The block as the user's own module, imported (its dataclasses' help texts are then --help text)."""
    path = folder / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SMALL = {"epochs": 1, "max_len": 32, "batch_size": 16, "lr": 1e-3}


@pytest.fixture
def guide_method(tmp_path):
    import_block(blocks("A method")[0], "guide_method", tmp_path)
    yield METHODS.get("scaled-embeddings")
    METHODS.pop("scaled-embeddings")
    sys.modules.pop("guide_method")


def test_the_guides_method_registers_trains_and_has_its_flag(guide_method, tiny_model_dir, keyword_glue, tmp_path,
                                                            monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(finetune_module, "finetune", asked.append)  # the guide's second block, its config only
    exec(blocks("A method")[1], {})
    assert asked[0].method == "scaled-embeddings" and asked[0].options.embedding_scale == 0.8
    small = {**asked[0].to_dict(), "model": str(tiny_model_dir), "glue_dir": str(keyword_glue), **SMALL,
             "output_dir": str(tmp_path / "run")}
    monkeypatch.undo()
    result = finetune_module.finetune(FinetuneConfig.from_dict(small))
    assert result["status"] == "complete" and result["config"]["embedding_scale"] == 0.8
    with pytest.raises(SystemExit):
        cli.main(["finetune", "--help"])
    assert "--embedding-scale" in capsys.readouterr().out
    assert cli.main(["finetune", "--method", "scaled-embeddings", "--embedding-scale", "2"]) == 2  # validate()
    assert "embedding_scale" in capsys.readouterr().err


def test_the_guides_task_family_registers_and_trains(tiny_model_dir, keyword_glue, tmp_path):
    import_block(blocks("A task family")[0], "guide_family", tmp_path)
    try:
        cfg = FinetuneConfig.from_dict({"task": "long-sentences", "long_from": 9, "model": str(tiny_model_dir),
                                        "glue_dir": str(keyword_glue), "output_dir": str(tmp_path / "run"),
                                        **SMALL})
        result = finetune_module.finetune(cfg)
        assert result["status"] == "complete" and set(result["dev"]) == {"error_rate"}
        assert len((tmp_path / "run" / "dev_predictions.txt").read_text().splitlines()) == 64
    finally:
        TASKS.pop("long-sentences", None)
        FAMILIES.pop("length", None)
        sys.modules.pop("guide_family", None)


def toy_notebook(folder: Path, name: str, params: dict) -> None:
    """A notebook file and its three presets, as the guide's steps 1 and 2 say."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# A toy\n\nLearning goals: none. Runs in about 1 s."},
             {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None, "outputs": [],
              "source": "\n".join(f"{k} = {v!r}" for k, v in params.items())}]
    (folder / f"{name}.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    (folder / "params" / name).mkdir(parents=True)
    for preset in ("smoke", "cpu", "paper"):
        (folder / "params" / name / f"{preset}.yaml").write_text(yaml.safe_dump({**params, "preset": preset}))


def test_a_new_notebook_joins_the_notebook_grids_before_the_results_notebook(tmp_path, monkeypatch):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    toy_notebook(folder, "00_intro", {"preset": "smoke", "lr": 1e-4})
    toy_notebook(folder, "06_results", {"preset": "smoke", "runs_dir": "../runs"})
    toy_notebook(folder, "07_toy", {"preset": "smoke", "lr": 1e-4, "seed": 0})
    monkeypatch.setattr(notebook_params, "NOTEBOOK_DIR", folder)
    for grid in ("notebooks_smoke", "notebooks_cpu", "notebooks_paper"):
        text = (ROOT / "ci" / "grids" / f"{grid}.yaml").read_text()
        assert "notebook: all" in text, grid  # no grid file names the notebooks
        raw = yaml.safe_load(text)
        raw.pop("gpu_hours", None)
        path = tmp_path / f"{grid}.yaml"
        path.write_text(yaml.safe_dump(raw))
        runs = sweep.load_grid(path, tmp_path / "out")
        assert [r.config.notebook for r in runs] == ["00_intro", "07_toy", "06_results"], grid
    notebooks.check_parameters("07_toy", notebooks.load_preset("07_toy", "cpu"))
