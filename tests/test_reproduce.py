"""bench reproduce: the grid runs through the sweep, and the report's tests and verdicts are the data's."""
import json
from pathlib import Path

import yaml
from scipy import stats

from course_lib import cli
from course_lib.experiments import reproduce

ENV = {"CI": "true", "HF_HUB_OFFLINE": "1"}


def fake_run(root: Path, task: str, method: str, seed: int, value: float, metric: str = "accuracy",
             **config) -> None:
    folder = root / f"{task}-{method}-{seed}"
    folder.mkdir(parents=True)
    config = {"task": task, "method": method, "seed": seed, "epochs": 2, **config}
    (folder / "metrics.json").write_text(json.dumps(
        {"status": "complete", "task": task, "config": config, "dev": {metric: value}, "timing": {"train_seconds": 60}}))


def test_report_pairs_seeds_and_says_where_the_papers_gain_does_not_show(tmp_path, keyword_glue):
    base, hybrid, asa = [0.80, 0.82, 0.81], [0.70, 0.71, 0.69], [0.805, 0.825, 0.812]
    for seed in range(3):
        fake_run(tmp_path, "sst2", "vanilla", seed, base[seed], glue_dir=str(keyword_glue))
        fake_run(tmp_path, "sst2", "ssa-hybrid", seed, hybrid[seed], glue_dir=str(keyword_glue))
        fake_run(tmp_path, "sst2", "asa", seed, asa[seed], glue_dir=str(keyword_glue))
        fake_run(tmp_path, "cola", "vanilla", seed, 0.0, "matthews_correlation")
        fake_run(tmp_path, "cola", "asa", seed, 0.0, "matthews_correlation")
    text = reproduce.report(tmp_path, "python -m course_lib bench reproduce", "grid.yaml")
    sst2 = text.split("## sst2")[1]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in sst2.splitlines() if line.startswith("| ")}
    p_hybrid = stats.ttest_rel(hybrid, base).pvalue
    assert rows["ssa-hybrid"][3] == f"{sum(hybrid) / 3 - sum(base) / 3:+.4f}" and rows["ssa-hybrid"][4] == f"{p_hybrid:.3f}"
    assert rows["ssa-hybrid"][5] == "+0.9 (Kou et al. 2020, Tab. 2)"  # 94.4 - 93.5 on SST-2
    assert rows["ssa-hybrid"][6].startswith("worse than vanilla; the paper's gain does not show")
    assert rows["asa"][5] == "+0.9 (Wu et al. 2023, Tab. 1)"  # 94.1 - 93.2
    p_asa = stats.ttest_rel(asa, base).pvalue
    assert (p_asa < 0.05) == rows["asa"][6].startswith("better than vanilla, as the paper claims")
    assert "## cola (dev matthews_correlation)" in text and "15 complete runs" in text
    assert "chance level here is 0.0000: this budget does not learn cola" in text  # MCC 0: a constant guess
    assert "does not learn sst2" not in text  # vanilla 0.81 is far above the majority share of the dev set
    assert "| asa | 3 | 0.0000 ± 0.0000 | +0.0000 |  |  | equal to vanilla on every seed |" in text
    holm = sum(p < 0.05 / (2 - i) for i, p in enumerate(sorted([p_hybrid, p_asa])))  # both pass, or the first
    assert "there are 2 paired tests" in text and f"after Holm's correction for 2 tests, {holm} remain" in text


def test_bench_reproduce_runs_the_grid_resumes_and_writes_the_report(tmp_path, tiny_model_dir, keyword_glue,
                                                                     monkeypatch, capsys):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"command": "finetune", "base": {
        "model": str(tiny_model_dir), "glue_dir": str(keyword_glue), "epochs": 1, "batch_size": 16, "max_len": 32,
        "max_train_samples": 32, "max_eval_samples": 32}, "grid": {"method": ["vanilla", "bert-mask"], "seed": [0, 1]}}))
    report, runs = tmp_path / "results" / "repro.md", tmp_path / "runs"
    argv = ["bench", "reproduce", "--grid", str(grid), "--output-dir", str(runs), "--report", str(report)]
    assert cli.main(argv) == 0
    text = report.read_text()
    assert text.startswith("# CPU reproduction") and f"--report {report}" in text and "4 complete runs" in text
    assert "| bert-mask | 2 |" in text and "| vanilla | 2 |" in text
    stamps = {p: p.stat().st_mtime_ns for p in runs.rglob("metrics.json")}
    assert len(stamps) == 4
    assert cli.main(argv) == 0  # a rerun redoes nothing and writes the same report
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("metrics.json")} == stamps
    assert report.read_text() == text


def test_bench_reproduce_rejects_a_bad_shard_before_running(tmp_path, capsys):
    assert cli.main(["bench", "reproduce", "--shard", "3/2", "--output-dir", str(tmp_path)]) == 2
    assert "shard" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_holm_counts_step_down_rejections():
    assert reproduce.holm_rejections([0.001, 0.03, 0.04]) == 1  # 0.03 >= 0.05 / 2 stops the count
    assert reproduce.holm_rejections([0.01, 0.02, 0.03]) == 3  # 0.01 < .05/3, 0.02 < .05/2, 0.03 < .05
    assert reproduce.holm_rejections([0.2, 0.001]) == 1 and reproduce.holm_rejections([]) == 0
