"""Every grid file and notebook preset that runs SSAF or ASA on a task its paper tuned uses the paper's value for
that task: Cui et al.'s lambda (`ssaf.PAPER_LAMBDA`), Wu et al.'s tau (`asa.PAPER_TAU`). A reproduction run at
another method's default measures something the paper did not claim, and nothing in its report would say so."""
from pathlib import Path

import pytest

from benchmarks.reproduce import PAPER_TASK
from course_lib.lab.sweep import load_grid
from course_lib.methods.asa import PAPER_TAU
from course_lib.methods.ssaf import PAPER_LAMBDA
from course_lib.notebook.params import load_preset

ROOT = Path(__file__).resolve().parent.parent
PAPER_VALUE = {"ssaf": ("sparsegen_lambda", PAPER_LAMBDA), "asa": ("asa_tau", PAPER_TAU)}
FINETUNE_GRIDS = sorted(p.name for p in (ROOT / "ci" / "grids").glob("*.yaml")
                        if "command: finetune" in p.read_text(encoding="utf-8"))


def off_paper(method: str, task: str, value) -> str | None:
    """What is wrong with running `method` on `task` at `value`, or None when the paper tuned nothing there."""
    field, table = PAPER_VALUE.get(method, (None, {}))
    wanted = table.get(PAPER_TASK.get(task, task))
    return None if wanted is None or value == wanted else f"{method} on {task}: {field}={value}, paper {wanted}"


@pytest.mark.parametrize("name", FINETUNE_GRIDS)
def test_every_grid_runs_the_papers_value_per_task(name, tmp_path):
    runs = load_grid(ROOT / "ci" / "grids" / name, tmp_path)
    wrong = [off_paper(r.config.method, r.config.task, getattr(r.config.options, PAPER_VALUE[r.config.method][0]))
             for r in runs if r.config.method in PAPER_VALUE]
    assert [w for w in wrong if w] == []


def test_the_grids_this_checks_include_the_reproductions():
    assert {"cpu_reproduction.yaml", "cpu_reproduction_families.yaml", "paper_squad.yaml"} <= set(FINETUNE_GRIDS)


def test_the_check_names_a_value_off_the_paper():
    assert off_paper("ssaf", "squad_articles", -4.0) == "ssaf on squad_articles: sparsegen_lambda=-4.0, paper -7.0"
    assert off_paper("asa", "wnut17", 0.3) == "asa on wnut17: asa_tau=0.3, paper 0.5"
    assert off_paper("asa", "cola", 0.3) is None and off_paper("vanilla", "sst2", None) is None


@pytest.mark.parametrize("preset", ["smoke", "cpu", "paper"])
def test_notebook_03_runs_ssaf_at_the_papers_lambda(preset):
    p = load_preset("03_cui2019_sparse_attention", preset)
    wrong = [off_paper("ssaf", task, p["task_overrides"].get(task, {}).get("sparsegen_lambda", p["sparsegen_lambda"]))
             for task in p["tasks"]]
    assert [w for w in wrong + [off_paper("ssaf", "squad", p["squad_lambda"])] if w] == []


@pytest.mark.parametrize("preset", ["smoke", "cpu", "paper"])
def test_notebook_05_runs_asa_at_the_papers_tau(preset):
    p = load_preset("05_wu2023_adversarial_self_attention", preset)
    wrong = [off_paper("asa", task, p["task_overrides"].get(task, {}).get("asa_tau", p["asa_tau"]))
             for task in p["tasks"]]
    if p["extra_task"]:  # section 10: vanilla and ASA on a task beyond sentences
        wrong.append(off_paper("asa", p["extra_task"], p["extra_asa_tau"]))
    assert [w for w in wrong if w] == []
