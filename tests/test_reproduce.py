"""benchmarks reproduce: the grid runs through the sweep, and the report's tests and verdicts are the data's."""
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from benchmarks import reproduce
from benchmarks.__main__ import main as bench
from course_lib.lab import collect, sweep
from course_lib.methods.registry import get_method
from course_lib import cli
from course_lib.runtime.errors import UsageError
from course_lib.lab import significance as metrics

ENV = {"CI": "true", "HF_HUB_OFFLINE": "1"}


def fake_run(root: Path, task: str, method: str, seed: int, value: float, metric: str = "accuracy",
             **config) -> None:
    folder = root / f"{task}-{method}-{seed}"
    folder.mkdir(parents=True)
    options = get_method(method).options().to_dict()  # a run of today writes its method's options
    config = {"task": task, "method": method, "seed": seed, "epochs": 2, **options, **config}
    (folder / "metrics.json").write_text(json.dumps(
        {"kind": "finetune", "status": "complete", "task": task, "config": config, "dev": {metric: value},
         "timing": {"train_seconds": 60}}))


def table(text: str, task: str) -> dict[str, list[str]]:
    """A task's table as {method: its cells}: method, seeds, metric, Δ, p, p (Holm), detectable Δ, paper's Δ,
    verdict."""
    section = text.split(f"## {task} (")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}


def fake_report_runs(root: Path, glue: Path) -> dict[str, dict[str, list[float]]]:
    """sst2 (vanilla 0.81, short of its 0.83 target), stsb (vanilla 0.83, past 0.80; mean-pool the control) and
    cola at chance; returns {task: {method: values by seed}}."""
    values = {"sst2": {"vanilla": [0.80, 0.82, 0.81], "ssa-hybrid": [0.70, 0.71, 0.69], "asa": [0.805, 0.825, 0.812]},
              "stsb": {"vanilla": [0.82, 0.84, 0.83], "ssa-hybrid": [0.835, 0.865, 0.86],
                       "mean-pool": [0.86, 0.87, 0.875]},
              "cola": {"vanilla": [0.0] * 3, "asa": [0.0] * 3}}
    metric = {"sst2": "accuracy", "stsb": "pearson", "cola": "matthews_correlation"}
    for task, methods in values.items():
        for method, by_seed in methods.items():
            for seed, value in enumerate(by_seed):
                fake_run(root, task, method, seed, value, metric[task], **({"glue_dir": str(glue)} if task == "sst2"
                                                                            else {}))
    return values


def test_report_pairs_seeds_and_says_where_the_papers_gain_does_not_show(tmp_path, keyword_glue):
    values = fake_report_runs(tmp_path, keyword_glue)
    base, hybrid, asa = (values["sst2"][m] for m in ("vanilla", "ssa-hybrid", "asa"))
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    rows = table(text, "sst2")
    p_hybrid = stats.ttest_rel(hybrid, base).pvalue
    assert rows["ssa-hybrid"][3] == f"{sum(hybrid) / 3 - sum(base) / 3:+.4f}"
    assert rows["ssa-hybrid"][4] == f"{p_hybrid:.3f}"
    assert rows["ssa-hybrid"][7] == "+0.9 (Kou et al. 2020, Tab. 2)"  # 94.4 - 93.5 on SST-2
    assert rows["ssa-hybrid"][8].startswith("worse than vanilla; the paper's gain does not show")
    assert rows["asa"][7] == "+0.9 (Wu et al. 2023, Tab. 1)"  # 94.1 - 93.2
    assert "## cola (dev matthews_correlation)" in text and "24 complete runs" in text
    assert "chance level here is 0.0000: this budget does not learn cola" in text  # MCC 0: a constant guess
    assert "does not learn sst2" not in text  # vanilla 0.81 is far above the majority share of the dev set
    assert table(text, "cola")["asa"] == ["asa", "3", "0.0000 ± 0.0000", "+0.0000", "", "", "±0.0000 (0.0 pts)", "",
                                          "equal to vanilla on every seed"]
    # the targets of 'budgets where vanilla clearly learns': SST-2 0.83 missed, STS-B 0.80 reached, CoLA 0.25 missed
    assert "Does vanilla learn sst2? Target dev accuracy ≥ 0.83: vanilla scores 0.8100 (mean of 3 seeds), **no**." \
        in text
    assert "Does vanilla learn stsb? Target dev pearson ≥ 0.80: vanilla scores 0.8300 (mean of 3 seeds), **yes**." \
        in text
    assert "Does vanilla learn cola? Target dev matthews_correlation ≥ 0.25: vanilla scores 0.0000" in text


def test_report_holm_corrects_across_the_learnt_tasks_and_verdicts_read_it(tmp_path, keyword_glue):
    values = fake_report_runs(tmp_path, keyword_glue)
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    family = {(task, method): stats.ttest_rel(values[task][method], values[task]["vanilla"]).pvalue
              for task in ("sst2", "stsb") for method in values[task] if method != "vanilla"}  # cola is at chance
    ranked = sorted(family, key=family.get)  # Holm by hand: (m - k) p_(k), kept non-decreasing, capped at 1
    holm, running = {}, 0.0
    for k, key in enumerate(ranked):
        running = max(running, min(1.0, (4 - k) * family[key]))
        holm[key] = running
    for (task, method), p in family.items():
        cells = table(text, task)[method]
        assert cells[4] == f"{p:.3f}" and cells[5] == f"{holm[task, method]:.3f}"
        said = cells[8].removeprefix("control: vanilla with a mean-pooling head; ")
        assert said.startswith(("better", "worse") if holm[task, method] < 0.05 else "no difference beyond seed noise")
    assert holm["stsb", "mean-pool"] < 0.05 <= holm["stsb", "ssa-hybrid"]  # the raw p of ssa-hybrid is below 0.05
    assert family["stsb", "ssa-hybrid"] < 0.05
    assert table(text, "stsb")["mean-pool"][8].startswith("control: vanilla with a mean-pooling head; better than")
    assert "`mean-pool` is a control" in text and "+0.057, p = 0.001" in text
    kept = sorted(f"{m} on {t}" for (t, m), p in holm.items() if p < 0.05)
    raw = sum(p < 0.05 for p in family.values())
    assert "(above chance level: sst2, stsb) there are 4 paired tests" in text
    assert raw == 3 and len(kept) == 2  # one test that passes raw fails Holm: stsb's ssa-hybrid
    assert f"{raw} did; after Holm's correction for 4 tests, {len(kept)} remain: " in text
    assert all(name in text.split("## Many tests at once")[1] for name in kept) and table(text, "cola")["asa"][5] == ""


def test_report_states_what_the_seeds_can_detect(tmp_path, keyword_glue):
    values = fake_report_runs(tmp_path, keyword_glue)
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    for task in ("sst2", "stsb"):
        gaps = [np.subtract(values[task][m], values[task]["vanilla"]) for m in values[task] if m != "vanilla"]
        sd = math.sqrt(np.mean([np.var(g, ddof=1) for g in gaps]))  # pooled: the root mean of the variances
        detectable = metrics.detectable_difference(sd, 3)
        assert detectable == pytest.approx(metrics.detectable_difference(1.0, 3) * sd)
        assert f"sd {sd:.4f} (pooled over 2 methods) with 3 seeds" in text
        assert f"detects a true difference of ±{detectable:.4f} ({100 * detectable:.1f} points)" in text
        for method, cells in table(text, task).items():
            assert cells[6] == ("" if method == "vanilla" else f"±{detectable:.4f} ({100 * detectable:.1f} pts)")
    sst2 = table(text, "sst2")
    points = 100 * metrics.detectable_difference(
        math.sqrt(np.mean([np.var(np.subtract(values["sst2"][m], values["sst2"]["vanilla"]), ddof=1)
                           for m in ("asa", "ssa-hybrid")])), 3)
    assert points > 0.9  # so the paper's +0.9 on SST-2 is below what 3 seeds detect
    needed = metrics.seeds_to_detect(points / 100 / metrics.detectable_difference(1.0, 3), 0.009)
    assert needed > 3
    assert sst2["asa"][8] == f"no difference beyond seed noise; the paper's +0.9 is below what 3 seeds can detect " \
                             f"here (±{points:.1f}); about {needed} seeds would detect it"
    assert sst2["ssa-hybrid"][8].endswith(f"the paper's +0.9 is below what 3 seeds can detect here (±{points:.1f}); "
                                          f"about {needed} seeds would detect it")


def test_a_method_with_fewer_seeds_gets_its_own_detectable_difference_and_not_the_others(tmp_path, keyword_glue):
    values = fake_report_runs(tmp_path, keyword_glue)
    more = {"vanilla": [0.845, 0.825], "ssa-hybrid": [0.875, 0.845]}  # stsb's vanilla and ssa-hybrid on 5 seeds
    for method, by_seed in more.items():
        for seed, value in enumerate(by_seed, start=3):
            fake_run(tmp_path, "stsb", method, seed, value, "pearson")
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    base = values["stsb"]["vanilla"] + more["vanilla"]
    gaps = {"ssa-hybrid": np.subtract(values["stsb"]["ssa-hybrid"] + more["ssa-hybrid"], base),
            "mean-pool": np.subtract(values["stsb"]["mean-pool"], base[:3])}
    sd = math.sqrt(np.mean([np.var(g, ddof=1) for g in gaps.values()]))
    five, three = metrics.detectable_difference(sd, 5), metrics.detectable_difference(sd, 3)
    rows = table(text, "stsb")
    assert rows["ssa-hybrid"][1] == "5" and rows["ssa-hybrid"][6] == f"±{five:.4f} ({100 * five:.1f} pts)"
    assert rows["mean-pool"][1] == "3" and rows["mean-pool"][6] == f"±{three:.4f} ({100 * three:.1f} pts)"
    assert "below what 5 seeds can detect" in rows["ssa-hybrid"][8]  # the paper's +0.1 on STS-B
    assert f"sd {sd:.4f} (pooled over 2 methods) with 5 seeds" in text  # the task's note: its fullest method


def test_a_claim_on_another_metric_is_shown_with_it_and_tested_on_it(tmp_path, keyword_glue):
    """Wu et al. give ASA's STS-B gain in Spearman's rho; the report judges STS-B on Pearson's r."""
    values = fake_report_runs(tmp_path, keyword_glue)
    rho = {"vanilla": [0.81, 0.845, 0.826], "asa": [0.83, 0.85, 0.846]}
    for method, by_seed in rho.items():
        for seed, value in enumerate(by_seed):
            name = f"stsb-{method}-{seed}"
            pearson = values["stsb"]["vanilla"][seed] if method == "vanilla" else value - 0.01
            if method == "vanilla":
                shutil.rmtree(tmp_path / name)
            fake_run(tmp_path, "stsb", method, seed, pearson, "pearson")
            path = tmp_path / name / "metrics.json"
            record = json.loads(path.read_text())
            record["dev"]["spearmanr"] = value
            path.write_text(json.dumps(record))
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    assert reproduce.paper_delta("asa", "stsb", "dev pearson") == (pytest.approx(1.8), "Wu et al. 2023, Tab. 1",
                                                                   "spearmanr")  # 86.5 - 84.7
    assert reproduce.paper_delta("ssa-hybrid", "stsb", "dev pearson")[2] == "pearson"  # Kou et al.: Pearson
    assert table(text, "stsb")["asa"][7] == "+1.8 spearmanr (Wu et al. 2023, Tab. 1)"
    assert table(text, "stsb")["ssa-hybrid"][7] == "+0.1 (Kou et al. 2020, Tab. 2)"
    diff = np.mean(rho["asa"]) - np.mean(rho["vanilla"])
    p = stats.ttest_rel(rho["asa"], rho["vanilla"]).pvalue
    assert (f"asa: Wu et al. 2023, Tab. 1 give the gain on spearmanr, not pearson; on dev spearmanr: Δ {diff:+.4f} "
            f"({100 * diff:+.1f} pts) over 3 seeds, p {p:.3f} (outside Holm's family") in text
    assert text.count("give the gain on") == 1  # no other method's claim is on another metric


def test_report_opens_with_one_row_per_task_including_the_grids_tasks_not_run_yet(tmp_path, keyword_glue):
    values = fake_report_runs(tmp_path / "runs", keyword_glue)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"command": "finetune", "base": {"epochs": 2},
                                    "grid": {"task": ["sst2", "stsb", "cola", "rte"], "seed": [0, 1, 2, 3, 4],
                                             "method": ["vanilla", "ssa-hybrid", "asa", "mean-pool"]}}))
    text = reproduce.report(tmp_path / "runs", "python -m benchmarks reproduce", grid)
    sst2 = [r for r in collect.collect(tmp_path / "runs") if r["task"] == "sst2" and r["method"] == "vanilla"]
    glance = text.split("## At a glance")[1].split("\n## ")[0]
    rows = {cells[0].split()[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                                      for line in glance.splitlines()[3:] if line.startswith("| "))}
    assert list(rows) == ["cola", "sst2", "stsb", "rte"]  # the runs' tasks, then the grid's others
    # seeds 3 and 4 of the 8 cells with runs and all 5 of the 4 cells without, at their task's 60 s a run: 36 min;
    # rte has no pace to go by
    assert ("24 complete runs of the grid's 80 (the rest to come: about 0.6 hours of training at the complete "
            "runs' pace, plus 20 runs of tasks with none complete yet)") in text
    assert rows["sst2"][1:5] == ["0.8100 (3)", f"{reproduce.chance_level(sst2, 'dev accuracy'):.4f}", "0.83",
                                 "**no**"]
    assert rows["stsb"][1:5] == ["0.8300 (3)", "0.0000", "0.8", "yes"]
    assert rows["cola"][4] == "**at chance**" and rows["rte"][1:5] == ["", "", "0.58", "not run yet"]
    assert rows["sst2"][6] == "0 / 2"  # 3 seeds each: no method has the 5 seeds of a finished cell
    mean_pool = np.mean(values["stsb"]["mean-pool"]) - np.mean(values["stsb"]["vanilla"])
    hybrid = np.mean(values["sst2"]["ssa-hybrid"]) - np.mean(values["sst2"]["vanilla"])
    assert rows["stsb"][7] == f"mean-pool {100 * mean_pool:+.1f} pts"  # stsb's ssa-hybrid: p < 0.05, not after Holm
    assert rows["sst2"][7] == f"ssa-hybrid {100 * hybrid:+.1f} pts" and rows["cola"][7] == "none"
    detectable = table(text, "sst2")["asa"][6]  # '±0.0123 (1.2 pts)'
    assert rows["sst2"][5] == "±" + detectable.split("(")[1].rstrip(")")


def test_verdict_sets_the_test_against_the_claim_and_the_seeds():
    assert reproduce.verdict(0.02, 0.01, 1.5, 3, 0.01, 3) == "better than vanilla, as the paper claims"
    assert reproduce.verdict(0.02, 0.01, 0.5, 3, 0.01, 3) == (
        "better than vanilla, in the paper's direction; the paper's +0.5 is below what 3 seeds can detect here (±1.0)")
    assert reproduce.verdict(0.001, 0.3, 1.5, 3, 0.01, 3) == ("no difference beyond seed noise; the paper's gain does "
                                                              "not show at this scale")
    assert reproduce.verdict(0.001, 0.3, -0.5, 5, 0.021, 5) == ("no difference beyond seed noise; the paper's -0.5 is "
                                                                "below what 5 seeds can detect here (±2.1)")
    assert reproduce.verdict(-0.02, 0.01, 1.5, 3, 0.01, 3) == "worse than vanilla; the paper's gain does not show"
    assert reproduce.verdict(0.02, None, None, 1) == "not tested (fewer than 2 paired seeds)"
    assert reproduce.verdict(0.001, 0.3, 0.5, 5, 0.021, 5, needed=61).endswith(
        "the paper's +0.5 is below what 5 seeds can detect here (±2.1); about 61 seeds would detect it")
    assert reproduce.verdict(0.001, 0.3, 0.5, 5, 0.021, 5, needed=1001).endswith(
        "(±2.1); more than 1000 seeds would be needed")


def test_bench_reproduce_runs_the_grid_resumes_and_writes_the_report(tmp_path, tiny_model_dir, keyword_glue,
                                                                     monkeypatch, capsys):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"command": "finetune", "base": {
        "model": str(tiny_model_dir), "glue_dir": str(keyword_glue), "epochs": 1, "batch_size": 16, "max_len": 32,
        "max_train_samples": 32, "max_eval_samples": 32},
        "grid": {"method": ["vanilla", "bert-mask"], "seed": [0, 1]}}))
    report, runs = tmp_path / "results" / "repro.md", tmp_path / "runs"
    argv = ["reproduce", "--grid", str(grid), "--output-dir", str(runs), "--report", str(report)]
    assert bench(argv) == 0
    text = report.read_text()
    assert text.startswith("# CPU reproduction") and f"--report {report}" in text and "4 complete runs" in text
    assert "| bert-mask | 2 |" in text and "| vanilla | 2 |" in text
    stamps = {p: p.stat().st_mtime_ns for p in runs.rglob("metrics.json")}
    assert len(stamps) == 4
    assert bench(argv) == 0  # a rerun redoes nothing and writes the same report
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("metrics.json")} == stamps
    assert report.read_text() == text
    # the archive, runs/<grid name> beside the report: each run's metrics.json as it is, and nothing else
    archive = tmp_path / "results" / "runs" / "grid"
    assert sorted(p.relative_to(archive) for p in archive.rglob("*") if p.is_file()) == \
        sorted(p.relative_to(runs) for p in stamps)
    assert all((archive / p.relative_to(runs)).read_bytes() == p.read_bytes() for p in stamps)
    rebuild = ["reproduce", "--from-archive", "--grid", str(grid), "--report", str(report)]
    assert f"running nothing: `python -m benchmarks {' '.join(rebuild)}`" in text
    shutil.rmtree(runs)  # the archive alone gives the same report, and nothing runs
    report.unlink()
    assert bench(rebuild) == 0 and report.read_text() == text and not runs.exists()


def two_run_grid(tmp_path: Path, model: Path, glue: Path) -> Path:
    """A grid file of two fine-tuning runs (vanilla, bert-mask) for tests that fake the runs' execution."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"command": "finetune", "base": {"model": str(model), "glue_dir": str(glue)},
                                    "grid": {"method": ["vanilla", "bert-mask"]}}))
    return grid


def completed_metrics(run) -> str:
    """The metrics.json of a run that completed at once."""
    return json.dumps({"kind": "finetune", "status": "complete", "task": "sst2", "config": run.config.to_dict(),
                       "dev": {"accuracy": 0.8}})


def test_the_archive_keeps_each_run_as_it_completes_even_when_the_sweep_is_killed(tmp_path, tiny_model_dir,
                                                                                 keyword_glue, monkeypatch):
    grid = two_run_grid(tmp_path, tiny_model_dir, keyword_glue)
    finished = []

    def execute(run, lock_fd, timeout, **_):  # a run that completes at once, leaving the files a real one leaves
        if finished and len(finished) == kill_after:
            raise KeyboardInterrupt  # the sweep is killed during this run
        (run.folder / "metrics.json").write_text(completed_metrics(run))
        (run.folder / "checkpoint.pt").write_bytes(b"weights")
        finished.append(run.folder)
        return {"status": "complete", "seconds": 1.0}

    monkeypatch.setattr(sweep, "execute", execute)
    runs, archive, kill_after = tmp_path / "runs", tmp_path / "archive", 1
    with pytest.raises(KeyboardInterrupt):
        sweep.sweep(grid, runs, archive=archive)
    assert [p.relative_to(archive) for p in archive.rglob("*") if p.is_file()] == [
        Path(finished[0].name, "metrics.json")]  # the run that finished, only its metrics.json, byte for byte
    assert (archive / finished[0].name / "metrics.json").read_bytes() == (finished[0] / "metrics.json").read_bytes()
    shutil.rmtree(archive)
    kill_after = 0  # the same sweep again: the second run completes, the first is archived though skipped
    assert sweep.sweep(grid, runs, archive=archive) == 0
    assert sorted(p.relative_to(archive) for p in archive.rglob("*") if p.is_file()) == sorted(
        p.relative_to(runs) for p in runs.rglob("metrics.json"))
    assert len(finished) == 2 and not list(archive.rglob("*.tmp"))


def test_bench_reproduce_from_the_archive_needs_one_and_runs_nothing(tmp_path):
    report = tmp_path / "results" / "repro.md"
    assert bench(["reproduce", "--from-archive", "--report", str(report)]) == 2  # no archive there
    assert bench(["reproduce", "--from-archive", "--shard", "0/2", "--report", str(report)]) == 2
    assert not report.exists()


def test_bench_reproduce_rejects_a_bad_shard_before_running(tmp_path, capsys):
    assert bench(["reproduce", "--shard", "3/2", "--output-dir", str(tmp_path)]) == 2
    assert "shard" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_holm_counts_step_down_rejections():
    assert reproduce.holm_rejections([0.001, 0.03, 0.04]) == 1  # 0.03 >= 0.05 / 2 stops the count
    assert reproduce.holm_rejections([0.01, 0.02, 0.03]) == 3  # 0.01 < .05/3, 0.02 < .05/2, 0.03 < .05
    assert reproduce.holm_rejections([0.2, 0.001]) == 1 and reproduce.holm_rejections([]) == 0


def test_report_judges_squad_on_f1_in_points_and_finds_the_papers_row(tmp_path):
    """SQuAD by article: judged on F1, whose official scale is 0-100 already, so detectable Δ is in the metric's
    own points and the paper's SQuAD v1.1 row (Cui et al.: F1 88.5 -> 88.8) is the one set beside it."""
    values = {"vanilla": [40.0, 42.0, 41.0], "ssaf": [41.0, 43.5, 41.5]}
    for method, by_seed in values.items():
        for seed, value in enumerate(by_seed):
            fake_run(tmp_path, "squad_articles", method, seed, value, "f1")
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    detectable = metrics.detectable_difference(float(np.std(np.subtract(values["ssaf"], values["vanilla"]), ddof=1)),
                                               3)
    row = table(text, "squad_articles")["ssaf"]
    assert row[3] == "+1.0000" and row[6] == f"±{detectable:.4f} ({detectable:.1f} pts)"
    assert row[7] == "+0.3 (Cui et al. 2019, Tab. 3)" and "## squad_articles (dev f1)" in text
    assert "Does vanilla learn squad_articles? Target dev f1 ≥ 30.00: vanilla scores 41.0000" in text
    assert "chance level here" not in text  # F1 41 is far above an empty answer's 0


@pytest.mark.skipif(not os.environ.get("DREAM_DIR"), reason="DREAM_DIR is not set (the real DREAM files)")
def test_dreams_chance_level_is_its_most_common_answer_position(tmp_path):
    """A multiple-choice task's chance level is read from the dev questions the run scored: the share of the
    most common right choice, near 1/3 for DREAM's three."""
    from collections import Counter

    from course_lib.tasks.registry import get_family, get_task
    from course_lib.training.config import FinetuneConfig

    rows = [{"config": {"task": "dream", "method": "vanilla", "seed": seed, "max_eval_samples": 600,
                        "output_dir": str(tmp_path)}} for seed in (0, 1)]
    chance = reproduce.chance_level(rows, "dev accuracy")
    cfg = FinetuneConfig(task="dream", output_dir=str(tmp_path))
    dev = get_family("multiple_choice").read(get_task("dream").bind(cfg), "dev", cfg)
    whole = max(Counter(q.label for q in dev).values()) / len(dev)
    assert 0.30 < chance < 0.40 and abs(chance - whole) < 0.05 and chance != whole  # 600 of 2,040, per seed


def test_many_tests_paragraph_agrees_in_number():
    one = {"task": "squad_articles", "method": "ssaf", "p_value": 0.004, "p_holm": 0.004}
    text = " ".join(reproduce._many_tests([one]))
    assert "there is 1 paired test;" in text and "correction for 1 test, 1 remains: ssaf on squad_articles." in text
    two = [one, {**one, "method": "asa", "p_value": 0.2, "p_holm": 0.2}]
    assert "correction for 2 tests, 1 remains: ssaf on squad_articles." in " ".join(reproduce._many_tests(two))


def test_a_fresh_clone_goes_on_from_the_committed_archive_without_training_its_runs_again(tmp_path, tiny_model_dir,
                                                                                         keyword_glue, monkeypatch):
    grid = two_run_grid(tmp_path, tiny_model_dir, keyword_glue)
    trained = []

    def execute(run, lock_fd, timeout, **_):  # a run that completes at once
        (run.folder / "metrics.json").write_text(completed_metrics(run))
        trained.append(run.folder.name)
        return {"status": "complete", "seconds": 1.0}

    monkeypatch.setattr(sweep, "execute", execute)
    runs, archive = tmp_path / "runs", tmp_path / "archive"
    assert sweep.sweep(grid, runs, archive=archive) == 0 and len(trained) == 2
    first = trained[0]
    shutil.rmtree(runs / trained[1])  # as in a fresh clone: one run folder gone, the other without its metrics
    (runs / first / "metrics.json").unlink()
    assert sweep.sweep(grid, runs, archive=archive) == 0
    assert len(trained) == 2  # nothing trained again
    assert all((runs / name / "metrics.json").read_bytes() == (archive / name / "metrics.json").read_bytes()
               for name in trained)
    assert len(collect.collect(runs)) == 2  # and both are in the sweep's results table
    shutil.rmtree(runs)
    saved = json.loads((archive / first / "metrics.json").read_text())
    saved["config"]["seed"] = 7  # an archived run of another configuration is refused, not taken for this one
    (archive / first / "metrics.json").write_text(json.dumps(saved))
    with pytest.raises(UsageError, match="seed=7"):
        sweep.sweep(grid, runs, archive=archive)
    assert len(trained) == 2


def test_a_method_run_with_its_own_option_off_the_default_is_paired_and_named_in_its_row(tmp_path, keyword_glue):
    values = {"vanilla": [0.80, 0.82, 0.81], "asa (asa_tau=0.5)": [0.70, 0.73, 0.71], "asa": [0.79, 0.83, 0.80]}
    for label, by_seed in values.items():
        own = {"asa_tau": 0.5} if "0.5" in label else {}
        for seed, value in enumerate(by_seed):
            fake_run(tmp_path / label, "sst2", label.split()[0], seed, value, glue_dir=str(keyword_glue), **own)
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    rows = table(text, "sst2")
    assert sorted(rows) == sorted(values)  # each setting its own row, each against vanilla over the same seeds
    for label in ("asa", "asa (asa_tau=0.5)"):
        assert rows[label][3] == f"{np.mean(values[label]) - np.mean(values['vanilla']):+.4f}"
        assert rows[label][4] == f"{stats.ttest_rel(values[label], values['vanilla']).pvalue:.3f}"
        assert rows[label][7] == "+0.9 (Wu et al. 2023, Tab. 1)"  # the paper's claim is the method's, whatever tau
    assert not any(cells[8].startswith("not tested") for cells in rows.values())


def test_a_chance_level_that_cannot_be_read_is_said_to_be_unknown_not_left_blank(tmp_path):
    for method in ("vanilla", "asa"):
        for seed in range(2):
            fake_run(tmp_path, "sst2", method, seed, 0.8 + 0.01 * seed, glue_dir=str(tmp_path / "no-glue-here"))
    text = reproduce.report(tmp_path, "python -m benchmarks reproduce", "grid.yaml")
    glance = [line for line in text.splitlines() if line.startswith("| sst2 (accuracy)")]
    assert glance[0].split(" | ")[2] == "unknown (dev data not found here)"
