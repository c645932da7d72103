"""`sweep GRID --launcher slurm`: a grid's unfinished runs as one Slurm job array, each array task one run.

The batch script is written beside the runs (`OUTPUT_DIR/.slurm/array-<time>.sh`, with the list of run names the
task index picks from) and submitted with `sbatch`; each task runs `python -m course_lib sweep GRID --run NAME`,
which is the local sweep for that one run: its folder lock, log, run.json and resume. Why `sbatch` and not
submitit, the field's usual wrapper: a run is already a command line, so nothing needs pickling, and the script is a
plain file a user can read, edit and submit again by hand. submitit would call the job's `checkpoint` from a signal
handler while the job waits on its child, and signal every process of the step, the child included.

Time limits and preemption. The script asks Slurm for SIGUSR1 a few minutes before the time limit (`--signal
B:USR1@...`, to the task's own process); the task passes it to the run, which saves a checkpoint at its next step
boundary and exits with code 75 (`errors.PREEMPTED`), and the task requeues itself (`scontrol requeue`). When Slurm
preempts or requeues a job it sends SIGTERM to its processes: the run saves and exits the same way and Slurm puts
the task back in the queue. The requeued task resumes the run from its checkpoint, bit-identically (the loop's own
guarantee). A notebook run has no step boundary: it is stopped and its notebook's finished runs are kept.
"""
from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from pydantic import ConfigDict, Field, field_validator

from course_lib.lab.notebooks import NotebookRun
from course_lib.runtime.errors import UsageError, choice_error
from course_lib.runtime.repro import atomic_write, progress, read_json, write_json
from course_lib.runtime.settings import Settings

SLURM_DIR = ".slurm"  # in the sweep's output folder: the batch scripts, run lists, submissions and task logs
SUBMISSIONS = "submissions.json"
STOP_NOTICE = 180  # seconds before the time limit at which a task is asked to save and requeue
TIME_FORMAT = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")  # Slurm's M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
SIZE_FORMAT = re.compile(r"\d+[KMGT]?", re.IGNORECASE)


class SlurmOptions(Settings):
    """What `sbatch` is asked for each run; None leaves it to the cluster's defaults. Checked when made (ranges, a
    time that parses, a size); the partition, which needs the cluster, by `check_options`."""

    model_config = ConfigDict(frozen=True)

    partition: str | None = Field(None, json_schema_extra={"metavar": "P"})
    time: str | None = Field(None, description="each task's time limit; a run near it saves and requeues",
                             json_schema_extra={"metavar": "HH:MM:SS"})
    gpus_per_run: int = Field(0, ge=0, description="GPUs per run; N > 1 starts a fine-tuning run through "
                              "accelerate, one process each", json_schema_extra={"metavar": "N"})
    cpus_per_run: int | None = Field(None, ge=1, json_schema_extra={"metavar": "N"})
    mem_per_run: str | None = Field(None, description="as sbatch's --mem: 16G, 4000M",
                                    json_schema_extra={"metavar": "SIZE"})
    array_parallelism: int | None = Field(None, ge=1, description="at most K tasks at once",
                                          json_schema_extra={"metavar": "K"})
    sbatch_arg: tuple[str, ...] = Field((), description="passed to sbatch as is (--sbatch-arg --qos=high); "
                                        "repeatable", json_schema_extra={"metavar": "ARG", "repeat": True})

    @field_validator("time")
    @classmethod
    def _time_parses(cls, text: str | None) -> str | None:
        if text is not None and time_seconds(text) <= 0:
            raise UsageError(f"--time must be longer than 0, got {text!r}")
        return text

    @field_validator("mem_per_run")
    @classmethod
    def _a_size(cls, size: str | None) -> str | None:
        if size is not None and not SIZE_FORMAT.fullmatch(size):
            raise UsageError(f"--mem-per-run {size!r} is not a size (valid: a number with K, M, G or T, as sbatch's "
                             f"--mem: 16G, 4000M)")
        return size


def time_seconds(text: str) -> int:
    """Seconds in a Slurm time limit; one line naming the forms when it does not parse."""
    match = TIME_FORMAT.fullmatch(text.strip())
    if not match:
        raise UsageError(f"--time {text!r} does not parse (valid: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)")
    days, first, second, third = (int(g) if g else None for g in match.groups())
    if days is not None:  # D-H[:M[:S]]
        return days * 86400 + first * 3600 + (second or 0) * 60 + (third or 0)
    if third is not None:
        return first * 3600 + second * 60 + third
    return first * 60 + (second or 0)


def check_options(options: SlurmOptions, runs: list) -> None:
    """Everything that can be refused before anything is written or submitted."""
    if shutil.which("sbatch") is None:
        raise UsageError("--launcher slurm needs Slurm's sbatch on the PATH and there is none here (submit from "
                         "the cluster's login node, or use --launcher local)")
    if options.gpus_per_run > 1 and any(isinstance(run.config, NotebookRun) for run in runs):
        raise UsageError(f"--gpus-per-run {options.gpus_per_run}: a notebook runs in one kernel, one process "
                         f"(valid for a notebook grid: 0 or 1)")
    if options.partition is not None:
        known = partitions()
        if options.partition not in known:
            raise choice_error("partition", options.partition, known)


def partitions() -> list[str]:
    """The cluster's partition names (sinfo), without the '*' that marks the default."""
    done = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True)
    if done.returncode != 0:
        raise UsageError(f"sinfo could not list the partitions: {done.stderr.strip() or done.returncode}")
    return sorted({line.strip().rstrip("*") for line in done.stdout.splitlines() if line.strip()})


def batch_script(grid_file: Path, output_dir: Path, run_list: Path, count: int, options: SlurmOptions,
                 timeout: float | None) -> str:
    """The job array's script: its #SBATCH settings, then the task's one run, picked by its array index."""
    limit = f"%{options.array_parallelism}" if options.array_parallelism else ""
    notice = STOP_NOTICE if options.time is None else max(30, min(STOP_NOTICE, time_seconds(options.time) // 4))
    settings = [f"--job-name=sweep-{grid_file.stem}", f"--array=0-{count - 1}{limit}",
                f"--output={output_dir / SLURM_DIR / '%A_%a.out'}", "--open-mode=append", "--requeue",
                f"--signal=B:USR1@{notice}"]
    for flag, value in (("partition", options.partition), ("time", options.time),
                        ("cpus-per-task", options.cpus_per_run), ("mem", options.mem_per_run)):
        if value is not None:
            settings.append(f"--{flag}={value}")
    if options.gpus_per_run:
        settings.append(f"--gres=gpu:{options.gpus_per_run}")
    task = [sys.executable, "-m", "course_lib", "sweep", str(grid_file), "--output-dir", str(output_dir),
            "--run", "$run", "--gpus-per-run", str(options.gpus_per_run)]
    if timeout is not None:
        task += ["--timeout", f"{timeout:g}"]
    command = " ".join('"$run"' if word == "$run" else shlex.quote(word) for word in task)
    return "\n".join(["#!/bin/bash", *(f"#SBATCH {s}" for s in settings),
                      "# One run of the grid per array task; the run's own folder holds its log and run.json.",
                      f"cd {shlex.quote(os.getcwd())}",
                      'if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK; fi',
                      f'run=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {shlex.quote(str(run_list))})',
                      f"exec {command}", ""])


def submit(grid_file: Path, output_dir: Path, runs: list, options: SlurmOptions, timeout: float | None) -> str:
    """Write the run list and script, submit them as one array, record the submission; return the array's job id.

    Each run's run.json says it is queued under its task's job id, so `sweep --status` can follow it."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    folder = (output_dir / SLURM_DIR).resolve()
    run_list, script = folder / f"array-{stamp}.runs", folder / f"array-{stamp}.sh"
    atomic_write(run_list, lambda f: f.write("".join(f"{run.name}\n" for run in runs).encode()))
    text = batch_script(Path(grid_file).resolve(), output_dir.resolve(), run_list, len(runs), options, timeout)
    atomic_write(script, lambda f: f.write(text.encode()))
    done = subprocess.run(["sbatch", "--parsable", *options.sbatch_arg, str(script)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise UsageError(f"sbatch refused the array: {done.stderr.strip() or done.stdout.strip()} (script: {script})")
    job = done.stdout.strip().split(";")[0]  # "JOBID" or "JOBID;CLUSTER"
    history = read_json(folder / SUBMISSIONS).get("submissions", [])
    write_json(folder / SUBMISSIONS, {"submissions": [*history, {
        "job_id": job, "script": str(script), "runs": [run.name for run in runs],
        "submitted": datetime.now().astimezone().isoformat(timespec="seconds")}]})
    for index, run in enumerate(runs):
        run.folder.mkdir(parents=True, exist_ok=True)
        write_json(run.folder / "run.json", {**read_json(run.folder / "run.json"), "name": run.name,
                                             "status": "queued", "job_id": f"{job}_{index}"})
    return job


def queue_states() -> dict[str, str]:
    """This user's jobs in Slurm's queue, one line per array task: {'123_4': 'RUNNING', ...}; {} without Slurm."""
    if shutil.which("squeue") is None:
        return {}
    done = subprocess.run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i %T"], capture_output=True,
                          text=True)
    return dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if len(line.split()) == 2)


def wait_for(job: str, total: int, count_complete, poll: float = 2.0) -> None:
    """Block until none of the array's tasks is queued or running (a requeued task is queued again); the bar
    shows `count_complete()` of `total` runs."""
    bar = progress(total=total, desc=f"slurm {job}", unit="run")
    while any(key.split("_")[0] == job for key in queue_states()):
        bar.n = count_complete()
        bar.refresh()
        time.sleep(poll)
    bar.n = count_complete()
    bar.close()


class ForwardedStop:
    """In an array task: SIGUSR1 (the time limit is near) and SIGTERM (preemption, scancel, requeue) reach the
    task's process; each is passed on to the run's child, which saves and exits 75. Which one came decides whether
    the task requeues itself (USR1) or leaves that to Slurm (TERM)."""

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self):
        self.received: str | None = None
        self.child = None
        self._previous = {s: signal.signal(s, self._forward) for s in self.SIGNALS}

    def _forward(self, signum, frame) -> None:
        self.received = signal.Signals(signum).name
        if self.child is not None:
            self.child.send_signal(signum)  # poll()s first, so a child already reaped is not signalled

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def requeue_self(reason: str) -> bool:
    """Put this array task back in Slurm's queue (scontrol requeue); False outside Slurm or when refused."""
    job = os.environ.get("SLURM_JOB_ID")
    if job is None or shutil.which("scontrol") is None:
        return False
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    print(f"{reason}: requeue of job {job} " + ("asked" if done.returncode == 0 else f"refused: {done.stderr.strip()}"),
          flush=True)
    return done.returncode == 0


def task_job_id() -> str | None:
    """'123_4' in an array task (the array's id and the task's index), the plain job id in a job, else None."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{index}" if array and index else os.environ.get("SLURM_JOB_ID")
