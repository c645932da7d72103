"""A run's progress, read where no bar can be: a log file (a Slurm task's output, a sweep's log.txt). The run says
when its data is ready, then writes the bar's numbers as a line every `log_every` steps and at least every
$ATTENTION_LAB_PROGRESS_SECONDS (60 s) in between; `sweep --status` shows a running run's last such line."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.lab import sweep_slurm
from course_lib.lab.sweep import LOG, RUN, GridRun
from course_lib.runtime import repro
from course_lib.runtime.errors import UsageError
from course_lib.training.config import FinetuneConfig

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^step (\d+)/36 epoch ([123]) loss (\d+\.\d{3}) lr (\d\.\de[+-]\d\d) ([\d.e+-]+) steps/s "
                  r"ETA (\d+s|\d+m|\d+h\d\dm)$")


def run_with_log(model_dir, glue_dir, out, log_every: int, **env) -> tuple[int, list[str]]:
    """A three-epoch fine-tuning run (12 steps an epoch) whose stderr is a file, as under Slurm or a sweep."""
    args = ["--task", "sst2", "--model", str(model_dir), "--glue-dir", str(glue_dir), "--output-dir", str(out),
            "--epochs", "3", "--batch-size", "16", "--max-len", "32", "--lr", "1e-3", "--log-every", str(log_every)]
    log = out.parent / f"{out.name}.log"
    with open(log, "w") as stderr:
        code = subprocess.run([sys.executable, "-m", "course_lib", "finetune", *args], cwd=ROOT, stderr=stderr,
                              stdout=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1", **env}).returncode
    return code, log.read_text().splitlines()


def test_a_log_gets_data_ready_then_a_line_every_log_every_steps(tiny_model_dir, keyword_glue, tmp_path):
    code, lines = run_with_log(tiny_model_dir, keyword_glue, tmp_path / "run", log_every=5)
    assert code == 0, lines
    ready = [i for i, line in enumerate(lines) if line.startswith("data ready")]
    steps = [STEP.match(line) for line in lines if line.startswith("step ")]
    assert len(ready) == 1 and re.fullmatch(r"data ready: read \d+\.\d s, encoded \d+\.\d s \(192 training and 64 "
                                            r"dev examples\)", lines[ready[0]]), lines
    assert all(steps) and ready[0] < lines.index(steps[0].group(0)), lines
    # every 5th step, and each epoch's last (the loop reads the loss there too)
    assert [int(m.group(1)) for m in steps] == [5, 10, 12, 15, 20, 24, 25, 30, 35, 36]
    assert [int(m.group(2)) for m in steps] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    assert float(steps[-1].group(4)) == 0.0 and steps[-1].group(6) == "0s"  # the schedule's end, nothing left


def test_between_the_loops_reads_a_line_comes_on_time_with_the_loss_last_read(tiny_model_dir, keyword_glue,
                                                                              tmp_path):
    """log_every 1000: the loop reads the loss at each epoch's end only; a line still comes at every step when
    the longest gap allowed is 0 s, each with the loss read last (none yet in epoch 1: '-')."""
    code, lines = run_with_log(tiny_model_dir, keyword_glue, tmp_path / "run", log_every=1000,
                               ATTENTION_LAB_PROGRESS_SECONDS="0")
    assert code == 0, lines
    steps = [line.split() for line in lines if line.startswith("step ")]
    assert [s[1] for s in steps] == [f"{k}/36" for k in range(1, 37)]
    losses = [s[5] for s in steps]
    assert set(losses[:11]) == {"-"} and losses[11] != "-"  # read first at step 12, the end of epoch 1
    assert set(losses[12:23]) == {losses[11]} and losses[23] != losses[11]


def test_the_longest_gap_is_sixty_seconds_of_training(monkeypatch):
    """Under the default, a log with few reads (a slow step, a large log_every) gets a line once 60 s have
    passed since the last, and not before."""
    clock = [1000.0]
    monkeypatch.setattr(repro.time, "perf_counter", lambda: clock[0])
    monkeypatch.delenv(repro.PROGRESS_SECONDS_ENV, raising=False)
    lines = repro.ProgressLines(total_steps=100, start_step=0, enabled=True)
    clock[0] += 59.9
    assert not lines.due()
    clock[0] += 0.1
    assert lines.due()
    lines.write(10, 1, None, 1e-5)
    assert not lines.due()
    assert not repro.ProgressLines(total_steps=100, start_step=0, enabled=False).due()  # a terminal: the bar


@pytest.mark.parametrize("value", ["soon", "-1", "inf"])
def test_a_bad_progress_interval_is_one_line_before_any_training(value, tiny_model_dir, keyword_glue, tmp_path):
    code, lines = run_with_log(tiny_model_dir, keyword_glue, tmp_path / "run", log_every=5,
                               ATTENTION_LAB_PROGRESS_SECONDS=value)
    assert code == 2 and lines == [f"error: $ATTENTION_LAB_PROGRESS_SECONDS={value!r} is not a number of seconds "
                                   f"(valid: a number >= 0; default 60)"], lines
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_status_shows_a_running_runs_last_progress_line(tmp_path):
    folder = tmp_path / "seed=0"
    folder.mkdir()
    (folder / RUN).write_text(json.dumps({"status": "running", "job_id": "7_0"}))
    (folder / LOG).write_text("=== attempt 1\ndata ready: read 1.0 s, encoded 2.0 s (9 training and 3 dev examples)"
                              "\nstep 5/36 epoch 1 loss 0.693 lr 1.0e-04 2.5 steps/s ETA 12s\nsome warning\n")
    run = GridRun("seed=0", FinetuneConfig(output_dir=str(folder)))
    state = sweep_slurm.run_state(run, {"7_0": "RUNNING"})
    assert state == ("running", "7_0", "running; step 5/36 epoch 1 loss 0.693 lr 1.0e-04 2.5 steps/s ETA 12s")
    (folder / LOG).write_text("=== attempt 1\ndata ready: read 1.0 s, encoded 2.0 s (9 training and 3 dev examples)\n")
    assert sweep_slurm.run_state(run, {"7_0": "RUNNING"})[2].startswith("running; data ready: read 1.0 s")


def test_progress_seconds_reads_the_variable(monkeypatch):
    monkeypatch.setenv(repro.PROGRESS_SECONDS_ENV, "2.5")
    assert repro.progress_seconds() == 2.5
    monkeypatch.setenv(repro.PROGRESS_SECONDS_ENV, "nan")
    with pytest.raises(UsageError):
        repro.progress_seconds()
