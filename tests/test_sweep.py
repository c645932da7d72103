"""The batch runner and the results table: failures recorded, finished runs never redone, SIGKILL, shards."""
import csv
import importlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from course_lib.lab import collect
from course_lib.lab import sweep, sweep_cli
from course_lib.methods.asa import ASAOptions
from course_lib.cli import build_parser
from course_lib.runtime.errors import UsageError
from course_lib.training.config import FinetuneConfig

ROOT = Path(__file__).resolve().parents[1]
ENV = {"CI": "true", "HF_HUB_OFFLINE": "1"}


def write_grid(path: Path, grid: dict, **base) -> Path:
    path.write_text(yaml.safe_dump({"command": "finetune", "base": base, "grid": grid}, sort_keys=False))
    return path


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.fixture
def tiny_base(tiny_model_dir, keyword_glue, monkeypatch) -> dict:
    """Two optimiser steps on the tiny BERT; no clipping, so lr 1e30 gives a NaN loss at step 2."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    return {"model": str(tiny_model_dir), "glue_dir": str(keyword_glue), "epochs": 1, "batch_size": 16,
            "max_len": 32, "max_train_samples": 32, "max_eval_samples": 32, "max_grad_norm": 0.0}


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (dead, not yet reaped by whoever adopted it) counts as gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _stamp(folder: Path) -> tuple:
    return (folder / "metrics.json").stat().st_mtime_ns, (folder / "run.json").read_text()


def test_sigkill_failure_and_reruns_never_redo_a_finished_run(tmp_path, tiny_base, capsys):
    """One grid through its whole life (each child costs seconds, so the stages share it):
    SIGKILL mid-grid -> rerun finishes it, records the failing run and goes on -> rerun retries only that."""
    grid = write_grid(tmp_path / "grid.yaml", {"lr": [0.001, 0.002, 1e30]}, **tiny_base)
    out = tmp_path / "runs"
    args = [str(grid), "--output-dir", str(out)]
    first, second, bad = out / "lr=0.001", out / "lr=0.002", out / "lr=1e+30"

    # 1. SIGKILL the sweep while its second run is in flight.
    proc = subprocess.Popen([sys.executable, "-m", "course_lib", "sweep", *args], cwd=ROOT, env={**os.environ, **ENV},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, record = time.time() + 120, {}
    while time.time() < deadline and proc.poll() is None and record.get("status") != "running":
        record = read_json(second / "run.json")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert record.get("status") == "running", "the sweep ended before its second run started"
    if sys.platform.startswith("linux"):  # the child dies with the sweep (PR_SET_PDEATHSIG)
        deadline = time.time() + 10
        while _alive(record["pid"]) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(record["pid"]), "the run's child outlived the killed sweep"
    assert read_json(first / "metrics.json")["status"] == "complete"
    assert read_json(second / "metrics.json").get("status") != "complete"
    finished = _stamp(first)

    # 2. Rerun: the finished run is skipped, the killed one completes, the NaN run fails and is recorded.
    assert sweep_cli.main(args) == 1
    printed = capsys.readouterr().out
    assert _stamp(first) == finished
    assert "1 complete, 1 failed, 1 skipped" in printed
    failed = read_json(bad / "run.json")
    assert failed["status"] == "failed" and failed["exit_code"] == 1
    assert "run failed: loss is nan" in failed["error"] or "run failed: loss is inf" in failed["error"]
    assert f"failed lr=1e+30: {sweep.one_line(failed['error'])}" in printed
    for folder in (first, second):
        assert read_json(folder / "run.json")["status"] == "complete"
        first_epoch = read_json(folder / "metrics.json")["history"][0]["dev"]["accuracy"]
        assert f"epoch 1: dev accuracy {100 * first_epoch:.2f}" in (folder / "log.txt").read_text()  # in points
    rows = collect.collect(out)
    assert sorted(row["run"] for row in rows) == ["lr=0.001", "lr=0.002"]
    expected = {f.name: read_json(f / "metrics.json")["dev"]["accuracy"] for f in (first, second)}
    assert {row["run"]: row["metrics"]["dev accuracy"] for row in rows} == expected
    with open(out / "results.csv") as f:
        assert sorted(row["run"] for row in csv.DictReader(f)) == ["lr=0.001", "lr=0.002"]
    assert "1e+30" not in (out / "results.md").read_text()
    assert not list(out.rglob(".*.tmp")), "a temporary file was left behind"

    assert sweep_cli.main([*args, "--dry-run"]) == 0
    listed = capsys.readouterr().out
    assert "complete  lr=0.001" in listed and "failed    lr=1e+30" in listed
    assert "3 runs: 2 complete, 1 failed, 0 todo" in listed

    # 3. Rerun: complete runs are not executed again, the failed one is retried.
    finished = {f: _stamp(f) for f in (first, second)}
    assert sweep_cli.main(args) == 1
    assert "0 complete, 1 failed, 2 skipped" in capsys.readouterr().out
    assert {f: _stamp(f) for f in (first, second)} == finished
    assert read_json(bad / "run.json")["attempt"] == 2
    assert "=== attempt 2" in (bad / "log.txt").read_text()

    # 4. --no-retry-failed runs nothing.
    assert sweep_cli.main([*args, "--no-retry-failed"]) == 1
    assert "1 failed and not retried" in capsys.readouterr().out
    assert read_json(bad / "run.json")["attempt"] == 2


def test_a_run_past_its_timeout_is_killed_and_recorded_as_failed(tmp_path, tiny_base, capsys):
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0]}, **tiny_base)
    assert sweep_cli.main([str(grid), "--output-dir", str(tmp_path / "runs"), "--timeout", "0.5"]) == 1
    record = read_json(tmp_path / "runs" / "seed=0" / "run.json")
    assert record["status"] == "failed" and record["exit_code"] == -signal.SIGKILL
    assert sweep.one_line(record["error"]) == "timed out after 0.5 s and was killed; the same command resumes it"
    assert "failed seed=0: timed out after 0.5 s" in capsys.readouterr().out


def test_shards_split_the_grid_and_dry_run_runs_nothing(tmp_path, capsys):
    grid = write_grid(tmp_path / "grid.yaml", {"task": ["sst2", "rte", "cola"], "seed": [0, 1, 2]}, epochs=1)
    out = tmp_path / "runs"
    everything = [run.name for run in sweep.load_grid(grid, out)]
    assert len(set(everything)) == 9 and everything[:3] == ["task=sst2,seed=0", "task=sst2,seed=1", "task=sst2,seed=2"]
    assert everything[3] == "task=rte,seed=0"  # the file's order, its first list outermost
    parts = []
    for i in range(4):
        assert sweep_cli.main([str(grid), "--output-dir", str(out), "--shard", f"{i}/4", "--dry-run"]) == 0
        parts.append([line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("todo")])
    assert sorted(name for part in parts for name in part) == sorted(everything)  # disjoint, and the union
    assert [len(part) for part in parts] == [3, 2, 2, 2]
    assert sweep_cli.main([str(grid), "--output-dir", str(out), "--dry-run"]) == 0
    assert "9 runs: 0 complete, 0 failed, 9 todo" in capsys.readouterr().out
    assert not out.exists(), "a dry run must not write anything"



def test_a_grid_reordered_to_run_its_baseline_first_keeps_the_names_of_its_runs(tmp_path):
    by_task = write_grid(tmp_path / "a.yaml", {"task": ["sst2", "rte"], "method": ["vanilla", "ssaf"],
                                               "seed": [0, 1]}, epochs=1)
    by_method = write_grid(tmp_path / "b.yaml", {"seed": [0, 1], "method": ["vanilla", "ssaf"],
                                                 "task": ["sst2", "rte"]}, epochs=1)
    first, second = (sweep.load_grid(grid, tmp_path / "runs") for grid in (by_task, by_method))
    assert [run.name for run in second][:2] == ["task=sst2,method=vanilla,seed=0", "task=rte,method=vanilla,seed=0"]
    assert sorted(run.name for run in first) == sorted(run.name for run in second)  # the same folders
    assert {run.name: run.config for run in first} == {run.name: run.config for run in second}

def test_exclude_leaves_a_methods_runs_on_one_task_out_and_a_bad_rule_is_one_line(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    raw = {"command": "finetune", "base": {"epochs": 1},
           "grid": {"method": ["vanilla", "ssaf", "asa"], "task": ["sst2", "rte"], "seed": [0, 1]},
           "exclude": [{"task": "rte", "method": "ssaf"}, {"method": "asa", "seed": 1}]}
    grid.write_text(yaml.safe_dump(raw, sort_keys=False))
    names = [run.name for run in sweep.load_grid(grid, tmp_path / "runs")]
    assert len(names) == 12 - 2 - 2  # ssaf's two rte seeds, asa's seed 1 on both tasks
    assert names[:4] == ["task=sst2,method=vanilla,seed=0", "task=sst2,method=vanilla,seed=1",
                         "task=rte,method=vanilla,seed=0", "task=rte,method=vanilla,seed=1"]
    assert "task=rte,method=ssaf,seed=0" not in names and "task=sst2,method=ssaf,seed=1" in names
    assert [n for n in names if "asa" in n] == ["task=sst2,method=asa,seed=0", "task=rte,method=asa,seed=0"]
    for rule, message in (({"task": "cola", "method": "ssaf"}, "task='cola' is not in the grid (valid: sst2, rte)"),
                          ({"lr": 1.0}, "lr=1.0 is not in the grid (valid: grid keys: method, task, seed)")):
        grid.write_text(yaml.safe_dump({**raw, "exclude": [rule]}, sort_keys=False))
        assert sweep_cli.main([str(grid), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.strip().count("\n") == 0

def test_each_run_has_its_folder_and_a_command_line_that_parses_back_to_its_config(tmp_path):
    grid = write_grid(tmp_path / "grid.yaml", {"task": ["sst2"], "lr": [5e-5, 1e-3], "bucket_by_length": [True]},
                      epochs=2, weight_decay=0.0, sparsegen_lambda=-4)
    runs = sweep.load_grid(grid, tmp_path / "runs")
    assert [run.name for run in runs] == ["task=sst2,lr=5e-05,bucket_by_length=True",
                                          "task=sst2,lr=0.001,bucket_by_length=True"]
    for run in runs:
        assert run.folder == tmp_path / "runs" / run.name
        parsed = vars(build_parser().parse_args(run.command_line()[3:]))
        parsed.pop("command")
        assert FinetuneConfig.from_dict(parsed) == run.config
    assert sweep.run_name({"model": "/data/models/bert base"}) == "model=_data_models_bert_base"


def test_task_overrides_change_their_task_only_and_hours_add_up_per_task(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("command: finetune\nbase: {epochs: 1, lr: 2.0e-5}\ngrid: {task: [sst2, rte], seed: [0, 1]}\n"
                    "task_overrides:\n  rte: {lr: 3.0e-5, epochs: 2}\ngpu_hours: {sst2: 0.5, rte: 0.25}\n")
    runs = sweep.load_grid(grid, tmp_path / "runs")
    assert {(r.config.task, r.config.lr, r.config.epochs) for r in runs} == {("sst2", 2e-5, 1), ("rte", 3e-5, 2)}
    assert [r.name for r in runs][2] == "task=rte,seed=0"  # the overrides are the recipe, not part of the name
    assert sweep.gpu_hours(grid, runs) == 2 * 0.5 + 2 * 0.25


def test_a_methods_own_option_in_task_overrides_leaves_the_other_methods_runs_as_they_were(tmp_path):
    """ASA's tau for one task (Wu et al.'s 0.5 on WNUT-17) must not make that task's vanilla runs new runs."""
    grid = tmp_path / "grid.yaml"
    grid.write_text("command: finetune\nbase: {epochs: 1}\ngrid: {task: [wnut17, sst2], method: [vanilla, asa]}\n"
                    "task_overrides:\n  wnut17: {asa_tau: 0.5, lr: 3.0e-5}\n")
    configs = {r.name: r.config for r in sweep.load_grid(grid, tmp_path / "runs")}
    default = ASAOptions().asa_tau
    assert default != 0.5
    assert configs["task=wnut17,method=asa"].options.asa_tau == 0.5
    vanilla = configs["task=wnut17,method=vanilla"]
    assert "asa_tau" not in vanilla.to_dict() and vanilla.lr == 3e-5  # the shared recipe still applies
    assert configs["task=sst2,method=asa"].options.asa_tau == default


def test_the_demo_grid_points_notebook_06_at_the_demos_own_runs(tmp_path):
    """make demo: notebook 06 tabulates the runs notebooks 01-05 made in this sweep's folder, and only 06 gets
    that parameter."""
    grid = Path(__file__).resolve().parents[1] / "ci/grids/notebooks_smoke.yaml"
    runs = {r.config.notebook: r.config for r in sweep.load_grid(grid, tmp_path)}
    assert runs["06_results"].parameters == {"runs_dir": "../runs/sweep/notebooks_smoke"}
    assert all(not config.parameters for name, config in runs.items() if name != "06_results")


def test_a_float_yaml_11_reads_as_text_is_the_number(tmp_path):
    """PyYAML reads `5e-5` (no '.') as text; a float field takes the number, as a reader of the file means it."""
    (tmp_path / "grid.yaml").write_text("command: finetune\nbase: {lr: 5e-5}\ngrid: {seed: [0]}\n")
    [run] = sweep.load_grid(tmp_path / "grid.yaml", tmp_path / "runs")
    assert run.config.lr == 5e-5
    with pytest.raises(UsageError, match="lr must be float or int, got 'inf'"):  # text that is no finite number
        FinetuneConfig.from_dict({"lr": "inf"})


@pytest.mark.parametrize("text, message", [
    ("command: finetune\ngrid: {sed: [0, 1]}\n", "grid.yaml: grid.sed=0: unknown FinetuneConfig option 'sed' (valid: "),
    ("command: finetune\nbase: {epoch: 2}\ngrid: {seed: [0]}\n", "grid.yaml: base: unknown FinetuneConfig option 'epoch' (valid: "),
    ("command: finetune\ngrid: {epochs: ['2']}\n",
     "grid.yaml: grid.epochs='2': FinetuneConfig.epochs must be int, got '2' (str)"),
    ("command: finetune\nbase: {lr: fast}\ngrid: {seed: [0]}\n", "base: FinetuneConfig.lr must be float or int, got 'fast'"),
    ("command: finetune\ngrid: {task: [sst2, sst3]}\n", "grid.task='sst3': unknown task 'sst3' (valid: anli, cola"),
    ("command: finetune\ngrid: {seed: 0}\n", "grid.yaml: GridFile.grid['seed'] must be list, got 0 (int)"),
    ("command: finetune\ngrid: {seed: [0]}\nbase: {output_dir: x}\n", "base.output_dir is set per run"),
    ("command: finetune\nbase: {seed: 1}\ngrid: {seed: [0]}\n", "'seed' is in both base and grid"),
    ("command: train\ngrid: {seed: [0]}\n", "grid.yaml: unknown command 'train' (valid: finetune, notebook)"),
    ("command: finetune\ngrids: {seed: [0]}\n",
     "grid.yaml: unknown GridFile option 'grids' (valid: base, command, exclude, gpu_hours, grid, notebook_overrides, "
     "task_overrides)"),
    ("command: finetune\ngrid: {seed: []}\n", "grid.yaml: GridFile.grid['seed'] must hold at least 1, got []"),
    ("grid: {seed: [0]}\n", "grid.yaml: GridFile needs command (valid: finetune, notebook)"),
    ("command: finetune\ngrid: {seed: [0]}\ngpu_hours: lots\n", "GridFile.gpu_hours must be float or int or dict[str, float] or None, got 'lots'"),
    ("command: finetune\ngrid: {seed: [0]}\ntask_overrides: {sst2: {lrr: 1}}\n",
     "grid.yaml: task_overrides.sst2: unknown FinetuneConfig option 'lrr'"),
    ("- task: sst2\n", "grid.yaml must be a mapping with keys command, base, grid, exclude, task_overrides, "
                      "notebook_overrides, gpu_hours; it holds a list"),
    ("command: notebook\ngrid: {notebook: [06_results]}\ntask_overrides: {sst2: {lr: 1}}\n",
     "grid.yaml: task_overrides is for finetune grids; this grid runs notebook (use notebook_overrides)"),
    ("command: finetune\ngrid: {task: [sst2], seed: [0]}\ntask_overrides: {sst2: {seed: 3}}\n",
     "grid.yaml: task_overrides.sst2.seed is not a field it may set (the grid sets output_dir, seed, task per run)"),
    ("command: finetune\ngrid: {seed: [0, 1]\n", "grid.yaml is not valid YAML at line"),
])
def test_bad_grid_file_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    (tmp_path / "grid.yaml").write_text(text)
    assert sweep_cli.main([str(tmp_path / "grid.yaml"), "--dry-run", "--output-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert err.strip().count("\n") == 0


@pytest.mark.parametrize("args, message", [
    (["--shard", "4/4"], "--shard must be I/N with 0 <= I < N (0-based"),
    (["--shard", "1"], "--shard must be I/N"),
    (["--timeout", "0"], "--timeout must be > 0, got 0.0"),
    (["--frobnicate"], "unknown option '--frobnicate' (valid: --array-parallelism, "),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0]})
    assert sweep_cli.main([str(grid), "--dry-run", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0


def test_a_changed_grid_refuses_old_run_folders_and_the_exit_code_is_2(tmp_path, capsys):
    out = tmp_path / "runs"
    saved = FinetuneConfig(seed=0, epochs=1).to_dict()  # the whole config, as a run saves it
    write_metrics(out / "seed=0", saved.pop("task"), {"dev": {"accuracy": 0.5}}, **saved)
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0]}, epochs=2)
    result = subprocess.run([sys.executable, "-m", "course_lib", "sweep", str(grid), "--output-dir", str(out)],
                            cwd=ROOT, env={**os.environ, **ENV}, capture_output=True, text=True)
    assert result.returncode == 2
    assert "seed=0 holds a run with epochs=1, but the grid gives epochs=2" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    write_grid(grid, {"seed": [0]}, epochs=1)  # the same config: the run is complete
    assert sweep_cli.main([str(grid), "--output-dir", str(out), "--dry-run"]) == 0
    assert "complete  seed=0" in capsys.readouterr().out
    # A field the saved config lacks differs: an older version that did not save it may have done otherwise.
    saved = json.loads((out / "seed=0" / "metrics.json").read_text())
    del saved["config"]["max_len"]
    (out / "seed=0" / "metrics.json").write_text(json.dumps(saved))
    assert sweep_cli.main([str(grid), "--output-dir", str(out), "--dry-run"]) == 2
    assert "seed=0 holds a run with no max_len (saved by an older version), but the grid gives max_len=128" in \
        capsys.readouterr().err


def write_metrics(folder: Path, task: str, dev: dict, status: str = "complete", **config) -> None:
    """A metrics.json as course_lib.training.finetune writes it, with only the fields the collector reads (the
    whole config where a test passes it)."""
    folder.mkdir(parents=True)
    config = {"task": task, "method": "vanilla", "lr": 2e-5, "output_dir": str(folder), **config}
    (folder / "metrics.json").write_text(json.dumps({"kind": "finetune", "config": config, "task": task,
                                                     "status": status, "history": [], **dev,
                                                     "timing": {"train_seconds": 1.5}}))


def test_collector_mean_and_sample_std_over_seeds(tmp_path, capsys):
    sst2 = [0.80, 0.85, 0.93]
    for seed, accuracy in enumerate(sst2):
        write_metrics(tmp_path / f"sst2_{seed}", "sst2", {"dev": {"accuracy": accuracy}}, seed=seed)
    write_metrics(tmp_path / "sst2_partial", "sst2", {"dev": {"accuracy": 0.1}}, status="running", seed=3)
    write_metrics(tmp_path / "sst2_hi_lr", "sst2", {"dev": {"accuracy": 0.7}}, seed=0, lr=1e-4)
    for seed, mcc in enumerate([0.31, 0.42]):
        write_metrics(tmp_path / "nested" / f"cola_{seed}", "cola", {"dev": {"matthews_correlation": mcc}}, seed=seed)
    write_metrics(tmp_path / "mnli_0", "mnli", {"dev_matched": {"accuracy": 0.70},
                                                "dev_mismatched": {"accuracy": 0.72}}, seed=0)

    rows = collect.collect(tmp_path)
    assert len(rows) == 7 and "sst2_partial" not in {row["run"] for row in rows}
    groups = {(g["task"], g["lr"]): g for g in collect.summarize(rows)}
    mean = sum(sst2) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in sst2) / (3 - 1))  # sample std, ddof=1
    accuracy = groups["sst2", 2e-5]["metrics"]["dev accuracy"]
    assert groups["sst2", 2e-5]["seeds"] == [0, 1, 2]
    assert math.isclose(accuracy["mean"], mean) and math.isclose(accuracy["std"], std)
    assert groups["sst2", 1e-4]["metrics"]["dev accuracy"] == {"mean": 0.7, "std": None, "n": 1, "counts": False}
    assert math.isclose(groups["cola", 2e-5]["metrics"]["dev matthews_correlation"]["std"], 0.11 / math.sqrt(2))

    assert collect.main([str(tmp_path), "--out", str(tmp_path / "tables" / "glue")]) == 0
    table = (tmp_path / "tables" / "glue.md").read_text()
    header = "| task | method | lr | seeds | dev accuracy | dev matthews_correlation | dev_matched accuracy |"
    assert header in table
    assert f"| sst2 | vanilla | 2e-05 | 3 | {100 * mean:.2f} ± {100 * std:.2f} |  |  |" in table  # in percent
    assert "| sst2 | vanilla | 0.0001 | 1 | 70.00 |  |  |" in table
    assert "| mnli | vanilla | 2e-05 | 1 |  |  | 70.00 | 72.00 |" in table
    with open(tmp_path / "tables" / "glue.csv") as f:
        table_rows = list(csv.DictReader(f))
    assert len(table_rows) == 7 and {"dev_accuracy", "dev_mismatched_accuracy", "lr", "seed"} <= set(table_rows[0])
    assert not list(tmp_path.rglob(".*.tmp"))


def test_the_sweep_summary_line_carries_a_runs_warnings(tmp_path):
    """A run that learnt nothing is complete, but its line in the sweep's output says what its metrics.json says."""
    run = sweep.GridRun("seed=0", FinetuneConfig(output_dir=str(tmp_path / "seed=0")))
    write_metrics(run.folder, "mrpc", {"dev": {"accuracy": 0.665, "f1": 0.799}})
    assert sweep.dev_summary(run) == "dev accuracy 66.50, dev f1 79.90"  # in points, as the results tables
    metrics = json.loads((run.folder / "metrics.json").read_text())
    line = "mrpc dev: all 408 predictions are class 1: the scores are those of a constant guess"
    (run.folder / "metrics.json").write_text(json.dumps({**metrics, "warnings": [line]}))
    assert sweep.dev_summary(run) == f"dev accuracy 66.50, dev f1 79.90  (warning: {line})"


# ----------------------------------------------------------------------------------------------
# Locks


def test_a_run_folder_held_by_another_claim_is_left_to_it(tmp_path):
    with sweep.claim(tmp_path) as first:
        assert first is not None
        with sweep.claim(tmp_path) as second:  # another open file of the lock: another holder to flock
            assert second is None
    with sweep.claim(tmp_path) as again:
        assert again is not None


def test_without_fcntl_collect_and_sweep_import_and_go_on_unlocked(tmp_path, monkeypatch):
    """Windows has no fcntl, and notebook 06 imports collect there: the modules import and the tables are
    written, unlocked."""
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` now raises ImportError
    try:
        for module in (collect, sweep):
            importlib.reload(module)
        with sweep.claim(tmp_path) as first, sweep.claim(tmp_path) as second:
            assert first is not None and second is not None  # nothing to lock with: both go on
        write_metrics(tmp_path / "runs" / "seed_0", "sst2", {"dev": {"accuracy": 0.8}})
        csv_path, md_path, rows = collect.write_results(tmp_path / "runs")
        assert len(rows) == 1 and "| sst2 | vanilla | 1 | 80.00 |" in md_path.read_text() and csv_path.is_file()
    finally:
        monkeypatch.undo()
        for module in (collect, sweep):
            importlib.reload(module)
