"""GLUE's rule (Wang et al. 2019): each task's score, the average of the nine, and their place in collect's tables.

The papers' rows below are transcribed from Devlin et al. 2019, Tab. 1 (BERT-base) and Kou et al. 2020, Tab. 2;
their printed averages are what the rule must give back."""
import csv
import json
import math
import statistics

import pytest

from course_lib.lab import collect
from course_lib.lab.glue_score import (GLUE_AVERAGE, GLUE_SCORE_PARTS, glue_average, glue_score,
                                       missing_glue_tasks)
from course_lib.lab.reported import GLUE, REPORTED
from course_lib.methods.registry import get_method
from course_lib.tasks.glue import GLUE_TASKS

# A paper's GLUE row in percent, in its column order: CoLA, SST-2, MRPC F1/acc, STS-B Pearson/Spearman,
# QQP F1/acc, MNLI matched/mismatched, QNLI, RTE, WNLI.
DEVLIN_BERT_BASE = (52.1, 93.5, (88.9, 84.8), (87.1, 85.8), (71.2, 89.2), (84.6, 83.4), 90.5, 66.4, 65.1)
KOU_ROWS = {  # method -> (row, the printed "Avg")
    "bert-mask": ((53.1, 93.7, (88.1, 83.9), (86.6, 85.4), (69.8, 88.6), (84.2, 83.1), 90.6, 67.2, 65.1), 78.3),
    "ssa-co": ((52.8, 94.1, (89.0, 85.2), (87.2, 86.1), (71.1, 89.1), (84.6, 83.7), 90.8, 69.8, 65.1), 79.0),
    "ssa-hybrid": ((54.1, 94.4, (89.1, 85.4), (87.2, 86.3), (71.5, 89.3), (84.7, 84.1), 91.3, 70.3, 65.1), 79.3),
}
COLUMNS = {"cola": ("dev", ("matthews_correlation",)), "sst2": ("dev", ("accuracy",)),
           "mrpc": ("dev", ("f1", "accuracy")), "stsb": ("dev", ("pearson", "spearmanr")),
           "qqp": ("dev", ("f1", "accuracy")), "mnli": (("dev_matched", "dev_mismatched"), ("accuracy",)),
           "qnli": ("dev", ("accuracy",)), "rte": ("dev", ("accuracy",)), "wnli": ("dev", ("accuracy",))}


def splits_of(task: str, cell) -> dict:
    """A paper's cell for one task (percent; a pair where the task has two numbers) as metrics.json keeps dev
    metrics: fractions by split."""
    values = [v / 100 for v in (cell if isinstance(cell, tuple) else (cell,))]
    split, metrics = COLUMNS[task]
    if isinstance(split, tuple):  # MNLI: one accuracy per dev split
        return {s: {metrics[0]: v} for s, v in zip(split, values)}
    return {split: dict(zip(metrics, values))}


def paper_average(row: tuple) -> float:
    """The GLUE average of a paper's row, in percent."""
    return 100 * glue_average({task: glue_score(task, splits_of(task, cell)) for task, cell in zip(COLUMNS, row)})


def test_devlins_bert_base_row_gives_its_printed_average():
    average = paper_average(DEVLIN_BERT_BASE)
    assert math.isclose(average, 78.3444, abs_tol=1e-3) and round(average, 1) == 78.3
    assert [r.value for r in REPORTED["finetune", "vanilla", GLUE] if r.metric == GLUE_AVERAGE] == [78.3]


@pytest.mark.parametrize("method", list(KOU_ROWS))
def test_kous_rows_give_the_averages_the_paper_prints_and_reported_keeps(method):
    row, printed = KOU_ROWS[method]
    assert round(paper_average(row), 1) == printed
    assert [r.value for r in REPORTED["finetune", method, GLUE] if r.metric == GLUE_AVERAGE] == [printed]


def test_the_average_is_the_unweighted_mean_of_the_nine_task_scores():
    scores = {"cola": 0.31, "sst2": 0.9, "mrpc": 0.84, "stsb": 0.85, "qqp": 0.8, "mnli": 0.78, "qnli": 0.87,
              "rte": 0.6, "wnli": 0.56}
    assert math.isclose(glue_average(scores), sum(scores.values()) / 9)
    assert math.isclose(glue_average({**scores, "sst5": 0.1, "squad": 88.0}), sum(scores.values()) / 9)


@pytest.mark.parametrize("task, splits, expected", [
    ("cola", {"dev": {"matthews_correlation": 0.3, "accuracy": 0.99}}, 0.3),  # MCC, never accuracy
    ("sst2", {"dev": {"accuracy": 0.9}, "test": {"accuracy": 0.1}}, 0.9),  # dev only
    ("mrpc", {"dev": {"f1": 0.9, "accuracy": 0.8}}, (0.9 + 0.8) / 2),
    ("qqp", {"dev": {"f1": 0.7, "accuracy": 0.88}}, (0.7 + 0.88) / 2),
    ("stsb", {"dev": {"pearson": 0.8, "spearmanr": 0.6}}, (0.8 + 0.6) / 2),
    ("mnli", {"dev_matched": {"accuracy": 0.70}, "dev_mismatched": {"accuracy": 0.72}}, (0.70 + 0.72) / 2),
    ("qnli", {"dev": {"accuracy": 0.87}}, 0.87),
    ("rte", {"dev": {"accuracy": 0.6}}, 0.6),
    ("wnli", {"dev": {"accuracy": 0.56}}, 0.56),
])
def test_each_tasks_score_follows_glues_rule(task, splits, expected):
    assert math.isclose(glue_score(task, splits), expected)


@pytest.mark.parametrize("task, splits", [
    ("sst5", {"dev": {"accuracy": 0.5}}),  # not a GLUE task
    ("stsb", {"dev": {"pearson": 0.8}}),  # half the rule is not GLUE's score
    ("mnli", {"dev_matched": {"accuracy": 0.7}}),
    ("mrpc", {"dev": {"f1": 0.9, "accuracy": None}}),
    ("sst2", {}),
])
def test_no_score_outside_glue_or_with_a_metric_missing(task, splits):
    assert glue_score(task, splits) is None


def test_a_method_missing_a_task_has_no_average_and_the_missing_one_is_named():
    scores = {task: 0.8 for task in GLUE_SCORE_PARTS}
    assert glue_average(scores) is not None
    assert glue_average({**scores, "wnli": None}) is None
    without_qqp = {task: s for task, s in scores.items() if task != "qqp"}
    assert glue_average(without_qqp) is None and missing_glue_tasks(without_qqp) == ["qqp"]


def test_the_rule_reads_exactly_the_metrics_a_glue_run_writes():
    """Every GLUE task has a rule, made of every dev split and metric the task's runs write: no part that no run
    has, no official metric left out."""
    assert set(GLUE_SCORE_PARTS) == set(GLUE_TASKS)
    for task, parts in GLUE_SCORE_PARTS.items():
        preset = GLUE_TASKS[task]
        assert set(parts) == {(split, metric) for split in preset.dev_splits for metric in preset.metrics}


# collect: a folder of metrics.json files shaped as finetune writes them

def write_run(root, task: str, method: str, seed: int, dev: dict, **config) -> None:
    folder = root / f"task={task},method={method},seed={seed}"
    folder.mkdir(parents=True)
    config = {"task": task, "method": method, "seed": seed, "lr": 2e-5, "output_dir": str(folder),
              **get_method(method).options().to_dict(), **config}
    main = GLUE_TASKS[task].metrics[0] if task in GLUE_TASKS else next(iter(next(iter(dev.values()))))
    folder.joinpath("metrics.json").write_text(json.dumps({
        "kind": "finetune", "status": "complete", "task": task, "main_metric": main,
        "family": "sentence" if task in GLUE_TASKS else "tagging",
        "config": config, "history": [], "timing": {"train_seconds": 1.0}, "warnings": [], **dev}))


def dev_of(row: tuple, shift: float) -> dict:
    """{task: dev splits}: a paper's row as fractions, every number moved by `shift`."""
    return {task: {s: {m: v + shift for m, v in metrics.items()} for s, metrics in splits_of(task, cell).items()}
            for task, cell in zip(COLUMNS, row)}


@pytest.fixture
def runs(tmp_path):
    """Vanilla on all nine tasks (two seeds; CoLA at its own lr, as grids give a task its own budget), SSA-Co on
    three of them, and a WNUT-17 run that has no GLUE score."""
    for seed in (0, 1):
        for task, dev in dev_of(DEVLIN_BERT_BASE, seed / 100).items():
            write_run(tmp_path, task, "vanilla", seed, dev, lr=3e-5 if task == "cola" else 2e-5)
        for task, dev in dev_of(KOU_ROWS["ssa-co"][0], seed / 100).items():
            if task in ("sst2", "mrpc", "rte"):
                write_run(tmp_path, task, "ssa-co", seed, dev)
    write_run(tmp_path, "wnut17", "vanilla", 0, {"dev": {"f1": 0.5}})
    return tmp_path


def test_collect_puts_each_runs_glue_score_in_the_csv(runs):
    collect.write_results(runs)
    with open(runs / "results.csv") as f:
        table = list(csv.DictReader(f))
    for line in table:
        saved = json.loads((runs / line["run"] / "metrics.json").read_text())
        if line["task"] in GLUE_TASKS:
            parts = [saved[split][metric] for split, metric in GLUE_SCORE_PARTS[line["task"]]]
            assert math.isclose(float(line["dev_glue_score"]), statistics.fmean(parts))
        else:
            assert line["dev_glue_score"] == ""


def test_collects_glue_section_shows_task_scores_and_the_average_beside_the_papers(runs):
    collect.write_results(runs)
    page = (runs / "results.md").read_text()
    section = page.split("## GLUE score")[1].split("\n## ")[0]
    header = next(line for line in section.splitlines() if line.startswith("| method"))
    assert header.split(" | ")[2:11] == list(COLUMNS)  # seeds, then the nine tasks in the papers' order
    vanilla = next(line for line in section.splitlines() if line.startswith("| vanilla |"))
    cells = [c.strip() for c in vanilla.strip("|").split("|")]
    assert cells[1] == "2"  # one row for vanilla, its CoLA lr notwithstanding; two seeds
    seed_means = [statistics.fmean(100 * glue_score(task, dev_of(DEVLIN_BERT_BASE, seed / 100)[task])
                                   for seed in (0, 1)) for task in COLUMNS]
    shown = [float(c.split(" ± ")[0]) for c in cells[2:11]]
    assert all(math.isclose(s, m, abs_tol=0.0051) for s, m in zip(shown, seed_means))  # in percent, 2 decimals
    assert math.isclose(float(cells[11]), statistics.fmean(seed_means), abs_tol=0.0051)  # mean of the nine means
    assert cells[12].startswith("78.3 glue_average (Kou et al. 2020, Tab. 2; GLUE test server")
    ssa = next(line for line in section.splitlines() if line.startswith("| ssa-co |"))
    assert [c.strip() for c in ssa.strip("|").split("|")][11] == ""  # three tasks: no average
    assert "- no GLUE average for ssa-co: missing cola, stsb, qqp, mnli, qnli, wnli" in section
    assert "wnut17" not in section


def test_two_recipes_of_one_task_split_a_method_into_rows_and_no_glue_run_means_no_section(tmp_path):
    for lr in (2e-5, 1e-4):
        write_run(tmp_path / str(lr), "sst2", "vanilla", 0, {"dev": {"accuracy": 0.9}}, lr=lr)
    write_run(tmp_path / "rte", "rte", "vanilla", 0, {"dev": {"accuracy": 0.6}}, lr=3e-5)
    lines = collect.glue_table(collect.collect(tmp_path))
    header = next(line for line in lines if line.startswith("| method"))
    assert header.startswith("| method | lr | seeds |")
    assert len([line for line in lines if line.startswith("| vanilla |")]) == 3
    only_tagging = tmp_path / "tagging"
    write_run(only_tagging, "wnut17", "vanilla", 0, {"dev": {"f1": 0.5}})
    assert collect.glue_table(collect.collect(only_tagging)) == []
    assert "## GLUE score" not in collect.to_markdown(collect.collect(only_tagging), only_tagging)
