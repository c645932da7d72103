"""`sweep --launcher slurm` without a cluster: the batch script, the checks before submitting, the queue as
`--status` reads it, and an array task stopped by its time-limit notice that requeues itself and resumes to the
same numbers. Slurm's programs are stand-ins on the PATH that record their arguments; CI runs the real thing
(ci/slurm_check.py on ci/slurm_cluster.sh's one-node cluster)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from course_lib.lab import slurm, sweep_cli
from course_lib.lab.sweep import load_grid
from course_lib.runtime.errors import PREEMPTED, UsageError

ROOT = Path(__file__).resolve().parents[1]


def write_grid(path: Path, grid: dict, **base) -> Path:
    path.write_text(yaml.safe_dump({"command": "finetune", "base": base, "grid": grid}, sort_keys=False))
    return path


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> Path:
    """sbatch (prints job 4242), sinfo (partitions debug and gpu), squeue (prints $FAKE_QUEUE) and scontrol,
    each appending its arguments to calls.txt."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    bodies = {"sbatch": "echo 4242", "sinfo": "printf 'debug*\\ngpu\\n'", "squeue": 'printf "$FAKE_QUEUE"',
              "scontrol": "true"}
    for name, body in bodies.items():
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{body}\n')
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_QUEUE", "")
    return calls


@pytest.fixture
def tiny_base(tiny_model_dir, keyword_glue, monkeypatch) -> dict:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return {"model": str(tiny_model_dir), "glue_dir": str(keyword_glue), "batch_size": 16, "max_len": 32,
            "max_train_samples": 64, "max_eval_samples": 32}


@pytest.mark.parametrize("text, seconds", [("90", 5400), ("90:30", 5430), ("02:00:00", 7200), ("1-0", 86400),
                                           ("1-02:03", 93780), ("1-02:03:04", 93784)])
def test_slurm_time_limits_parse_in_each_of_its_forms(text, seconds):
    assert slurm.time_seconds(text) == seconds


def test_the_batch_script_gives_each_task_its_own_run(tmp_path, tiny_base):
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0, 1, 2]}, **tiny_base)
    runs = load_grid(grid, tmp_path / "runs")
    run_list = tmp_path / "runs.txt"
    run_list.write_text("".join(f"{run.name}\n" for run in runs))
    options = slurm.SlurmOptions(partition="gpu", time="01:00:00", gpus_per_run=2, cpus_per_run=8, mem_per_run="32G",
                                 array_parallelism=2)
    script = slurm.batch_script(grid, tmp_path / "runs", run_list, len(runs), options, timeout=None)
    settings = [line.split(maxsplit=1)[1] for line in script.splitlines() if line.startswith("#SBATCH")]
    assert {"--array=0-2%2", "--partition=gpu", "--time=01:00:00", "--gres=gpu:2", "--cpus-per-task=8",
            "--mem=32G", "--requeue", "--signal=B:USR1@180"} <= set(settings)
    body = script.replace("exec ", "echo ")  # what each task would run, without running it
    for index, run in enumerate(runs):
        done = subprocess.run(["bash", "-c", body], env={**os.environ, "SLURM_ARRAY_TASK_ID": str(index)},
                              capture_output=True, text=True, check=True)
        assert done.stdout.strip().endswith(f"--run {run.name} --gpus-per-run 2")


@pytest.mark.parametrize("args, message", [
    (["--partition", "nope"], "unknown partition 'nope' (valid: debug, gpu)"),
    (["--time", "soon"], "--time 'soon' does not parse"),
    (["--mem-per-run", "lots"], "--mem-per-run 'lots' is not a size"),
    (["--array-parallelism", "0"], "--array-parallelism must be >= 1, got 0"),
    (["--cpus-per-run", "0"], "--cpus-per-run must be >= 1, got 0"),
    (["--shard", "0/2"], "--shard with --launcher slurm"),
])
def test_bad_slurm_options_are_one_line_exit_2_and_nothing_is_submitted(tmp_path, tiny_base, fake_slurm, capsys,
                                                                        args, message):
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0, 1]}, **tiny_base)
    out = tmp_path / "runs"
    assert sweep_cli.main([str(grid), "--output-dir", str(out), "--launcher", "slurm", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and "sbatch" not in (fake_slurm.read_text() if fake_slurm.exists() else "")


def test_without_sbatch_or_with_a_slurm_option_alone_it_says_what_is_missing(tmp_path, tiny_base, monkeypatch,
                                                                             capsys):
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0]}, **tiny_base)
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    assert sweep_cli.main([str(grid), "--output-dir", str(tmp_path / "runs"), "--launcher", "slurm"]) == 2
    assert "needs Slurm's sbatch on the PATH" in capsys.readouterr().err
    assert sweep_cli.main([str(grid), "--output-dir", str(tmp_path / "runs"), "--partition", "gpu"]) == 2
    assert "--partition is a Slurm option: add --launcher slurm" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_submission_marks_runs_queued_and_status_follows_the_queue(tmp_path, tiny_base, fake_slurm, monkeypatch,
                                                                    capsys):
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0, 1]}, **tiny_base)
    out = tmp_path / "runs"
    args = [str(grid), "--output-dir", str(out)]
    assert sweep_cli.main([*args, "--launcher", "slurm", "--sbatch-arg", "--qos=high", "--sbatch-arg=-x"]) == 0
    sbatch = [line for line in fake_slurm.read_text().splitlines() if line.startswith("sbatch")]
    assert len(sbatch) == 1 and sbatch[0].startswith("sbatch --parsable --qos=high -x ")
    jobs = [json.loads((out / f"seed={s}" / "run.json").read_text())["job_id"] for s in (0, 1)]
    assert jobs == ["4242_0", "4242_1"]
    monkeypatch.setenv("FAKE_QUEUE", "4242_0 RUNNING\\n4242_1 PENDING\\n")
    capsys.readouterr()
    assert sweep_cli.main([*args, "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["running", "4242_0", "seed=0"] and lines[1].split()[:2] == ["queued", "4242_1"]
    assert sweep_cli.main([*args, "--launcher", "slurm"]) == 0  # both still in the queue: nothing new submitted
    assert len([line for line in fake_slurm.read_text().splitlines() if line.startswith("sbatch")]) == 1
    monkeypatch.setenv("FAKE_QUEUE", "")  # the jobs left the queue unfinished (cancelled, say)
    capsys.readouterr()
    assert sweep_cli.main([*args, "--status"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("todo")


def metrics(folder: Path) -> dict:
    result = json.loads((folder / "metrics.json").read_text())
    result.pop("timing")
    result["config"].pop("output_dir")
    return result


def test_a_task_near_its_time_limit_saves_requeues_itself_and_resumes_to_the_same_numbers(tmp_path, tiny_base,
                                                                                         fake_slurm):
    """SIGUSR1 (the script's --signal B:USR1) to the task's process mid-run: the run saves and exits 75, the task
    asks `scontrol requeue` for its own job; the task run again resumes, to the numbers of a run never stopped."""
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0]}, **{**tiny_base, "epochs": 3, "max_train_samples": 192})
    local = tmp_path / "local"
    assert sweep_cli.main([str(grid), "--output-dir", str(local)]) == 0
    out, env = tmp_path / "slurm", {**os.environ, "SLURM_JOB_ID": "777", "SLURM_ARRAY_JOB_ID": "776",
                                    "SLURM_ARRAY_TASK_ID": "0"}
    task = [sys.executable, "-m", "course_lib", "sweep", str(grid), "--output-dir", str(out), "--run", "seed=0"]
    proc = subprocess.Popen(task, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, written = time.time() + 120, out / "seed=0" / "metrics.json"
    while time.time() < deadline and proc.poll() is None:
        if written.exists() and json.loads(written.read_text())["status"] == "running":  # stop it in epoch 2
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == PREEMPTED, output
    run = json.loads((out / "seed=0" / "run.json").read_text())
    assert run["status"] == "stopped" and run["job_id"] == "776_0"
    assert "scontrol requeue 777" in fake_slurm.read_text()
    again = subprocess.run(task, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming" in (out / "seed=0" / "log.txt").read_text()
    assert metrics(out / "seed=0") == metrics(local / "seed=0")


def test_a_notebook_grid_refuses_several_gpus_per_run(tmp_path, fake_slurm):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"command": "notebook", "base": {"preset": "smoke"},
                                    "grid": {"notebook": ["00_bert_from_scratch"]}}))
    with pytest.raises(UsageError, match="a notebook runs in one kernel"):
        slurm.check_options(slurm.SlurmOptions(gpus_per_run=2), load_grid(grid, tmp_path / "runs"))


def test_several_gpus_per_run_start_the_run_through_accelerate(tmp_path, tiny_base):
    """--gpus-per-run 2: one run, two processes (CPU processes here, as accelerate's own multi-process test runs
    them); each batch is split between them, so the numbers match one process up to the order of float sums."""
    grid = write_grid(tmp_path / "grid.yaml", {"seed": [0]}, **{**tiny_base, "epochs": 2})
    for folder, gpus in (("one", "0"), ("two", "2")):
        assert sweep_cli.main([str(grid), "--output-dir", str(tmp_path / folder), "--gpus-per-run", gpus]) == 0
    command = json.loads((tmp_path / "two" / "seed=0" / "run.json").read_text())["command"]
    assert command[1:5] == ["-m", "accelerate.commands.launch", "--num_processes", "2"]
    one, two = metrics(tmp_path / "one" / "seed=0"), metrics(tmp_path / "two" / "seed=0")
    for a, b in zip(one["history"], two["history"], strict=True):
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-4
        assert abs(a["dev"]["accuracy"] - b["dev"]["accuracy"]) <= 1 / 32  # at most one of 32 dev examples


def test_status_of_a_local_sweep_names_each_failure_by_its_logs_last_line(tmp_path, tiny_base, capsys):
    grid = write_grid(tmp_path / "grid.yaml", {"lr": [0.001, 1e30]}, **{**tiny_base, "epochs": 1, "max_grad_norm": 0.0})
    args = [str(grid), "--output-dir", str(tmp_path / "runs")]
    assert sweep_cli.main(args) == 1  # lr 1e30: a non-finite loss stops that run
    capsys.readouterr()
    assert sweep_cli.main([*args, "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    log = (tmp_path / "runs" / "lr=1e+30" / "log.txt").read_text().strip().splitlines()[-1].strip()
    assert lines[0].split()[:3] == ["done", "-", "lr=0.001"]
    done_log = (tmp_path / "runs" / "lr=0.001" / "log.txt").read_text().splitlines()  # a file: lines, not a bar
    assert any(line.startswith("data ready: ") for line in done_log), done_log
    step, total = [line.split()[1] for line in done_log if line.startswith("step ")][-1].split("/")
    assert step == total, done_log  # the last step's line
    assert lines[1].startswith("failed") and lines[1].endswith(log) and "loss is nan" in log
    assert lines[-1].endswith("2 runs: 1 done, 1 failed")
