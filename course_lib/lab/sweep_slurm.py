"""A sweep on Slurm: submitting the unfinished runs (`--launcher slurm`), one run as an array task runs it
(`--run NAME`), and where every run stands (`--status`, for either launcher).

The folders are the local sweep's (`lab/sweep.py`): a run's metrics.json says whether it is complete, its run.json
what its last attempt did and under which job, its `.lock` whether a process holds it now. Slurm's queue (squeue)
says which tasks wait or run. Running the same command again skips the complete runs and the ones still in the
queue, and submits the failed and missing ones.
"""
from __future__ import annotations

import collections
import os
from pathlib import Path

from course_lib.lab import slurm
from course_lib.lab.collect import write_results
from course_lib.lab.sweep import (LOG, RUN, GridRun, dev_summary, check_before_running, check_same_config, claim,
                                  default_output_dir, execute, load_grid, one_line, run_status)
from course_lib.runtime.errors import PREEMPTED, UsageError
from course_lib.runtime.repro import read_json


def launch(grid_file: str | Path, output_dir: str | Path | None, options: slurm.SlurmOptions, wait: bool = False,
           retry_failed: bool = True, timeout: float | None = None) -> int:
    """Submit the grid's unfinished runs as one job array; with `wait`, block until it ends and print the table.
    Everything is checked (options, configs, models, folders) before a file is written or a job submitted."""
    output_dir = default_output_dir(grid_file, output_dir)
    runs = load_grid(grid_file, output_dir)
    slurm.check_options(options, runs)
    for run in runs:
        check_same_config(run)
    queue = slurm.queue_states()
    waiting = [run for run in runs if read_json(run.folder / RUN).get("job_id") in queue]
    status = {run.name: run_status(run) for run in runs}
    todo = [run for run in runs if run not in waiting
            and (status[run.name] == "todo" or (status[run.name] == "failed" and retry_failed))]
    check_before_running(output_dir, todo)
    done = sum(s == "complete" for s in status.values())
    print(f"{output_dir}: {len(runs)} runs: {len(todo)} to submit, {done} already complete, {len(waiting)} already "
          f"in Slurm's queue")
    jobs = {read_json(run.folder / RUN)["job_id"].split("_")[0] for run in waiting}
    if todo:
        job = slurm.submit(Path(grid_file), output_dir, todo, options, timeout)
        jobs.add(job)
        print(f"submitted job array {job}: {len(todo)} tasks, logs in {output_dir / slurm.SLURM_DIR}; "
              f"follow it with: python -m course_lib sweep {grid_file} --output-dir {output_dir} --status")
    if not wait:
        return 0
    for job in sorted(jobs):
        slurm.wait_for(job, len(runs), lambda: sum(run_status(run) == "complete" for run in runs))
    return report(output_dir, runs)


def report(output_dir: Path, runs: list[GridRun]) -> int:
    """After a waited-for array: the tally, each unfinished run's last line, the results table; 0 if all complete."""
    states = {run.name: run_state(run, {}) for run in runs}
    tally = collections.Counter(state for state, _, _ in states.values())
    print(", ".join(f"{count} {state}" for state, count in sorted(tally.items())))
    for run in runs:
        state, job, detail = states[run.name]
        if state != "done":
            print(f"  {state} {run.name} (job {job}): {detail}  (log: {run.folder / LOG})")
    csv_path, md_path, rows = write_results(output_dir)
    print(f"results of {len(rows)} complete runs: {md_path}, {csv_path}")
    return 0 if tally["done"] == len(runs) else 1


def run_one(grid_file: str | Path, output_dir: str | Path | None, name: str, timeout: float | None = None,
            processes: int = 1) -> int:
    """`sweep GRID --run NAME`: one run of the grid, as an array task runs it. A complete run is left alone; a
    folder another process holds is left to it. A stop signal reaches the run (`slurm.ForwardedStop`); after
    the time-limit notice the task requeues itself. Exit 0 complete, 75 stopped (it resumes), 1 failed."""
    stop = slurm.ForwardedStop()  # first: a notice that comes while the grid loads must not kill the task
    try:
        output_dir = default_output_dir(grid_file, output_dir)
        runs = {run.name: run for run in load_grid(grid_file, output_dir)}
        if name not in runs:
            raise UsageError(f"--run {name!r} is not a run of {grid_file} (valid: {', '.join(list(runs)[:5])}"
                             f"{', ...' if len(runs) > 5 else ''})")
        run = runs[name]
        check_same_config(run)
        if run_status(run) == "complete":
            print(f"complete  {run.name}: already complete")
            return 0
        check_before_running(output_dir, [run])
        run.folder.mkdir(parents=True, exist_ok=True)
        with claim(run.folder) as lock:
            if lock is None:
                print(f"busy      {run.name}: another process holds its folder; left to it")
                return 1
            record = execute(run, lock, timeout, stop, processes)
    finally:
        stop.restore()
    detail = dev_summary(run) if record["status"] == "complete" else one_line(record["error"])
    print(f"{record['status']:<9} {run.name}  ({record['seconds']:.0f} s)  {detail}", flush=True)
    if record["status"] != "complete" and stop.received == "SIGUSR1":  # the time limit is near: back in the
        slurm.requeue_self(f"{run.name} stopped before the time limit")  # queue (on SIGTERM, Slurm decides)
        return PREEMPTED
    return {"complete": 0, "stopped": PREEMPTED}.get(record["status"], 1)


def log_lines(run: GridRun, tail: int = 1 << 16) -> list[str]:
    """The non-empty lines of the end of the run's log (a long run's log.txt is not read whole)."""
    try:
        with open(run.folder / LOG, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - tail))
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def last_log_line(run: GridRun) -> str:
    """The last non-empty line of the run's log (its child's final message), else of run.json's error."""
    lines = log_lines(run)
    return lines[-1] if lines else one_line(read_json(run.folder / RUN).get("error"))


def last_progress(run: GridRun) -> str:
    """Where a running run stands, from its log: its last `step ...` line (the training loop writes one at least
    every minute to a log), else its `data ready` line; '' before either."""
    lines = [line for line in log_lines(run) if line.startswith(("step ", "data ready"))]
    return lines[-1] if lines else ""


def running(detail: str, run: GridRun) -> str:
    """A running run's detail: where Slurm or the local sweep has it, then its last progress line."""
    return "; ".join(part for part in (detail, last_progress(run)) if part)


def run_state(run: GridRun, queue: dict[str, str]) -> tuple[str, str | None, str]:
    """(done | running | queued | stopped | failed | todo, its job id, a detail) from the folder and the queue."""
    record = read_json(run.folder / RUN)
    job = record.get("job_id")
    if run_status(run) == "complete":
        return "done", job, ""
    if job in queue:
        state = queue[job]
        if state in ("RUNNING", "COMPLETING"):
            return "running", job, running(state.lower(), run)
        return "queued", job, state.lower()
    if run.folder.is_dir() and record.get("status") == "running":
        with claim(run.folder) as lock:  # a local sweep's child holds the lock while it lives
            if lock is None:
                return "running", job, running(f"pid {record.get('pid')} on {record.get('host')}", run)
    if record.get("status") == "failed":
        return "failed", job, last_log_line(run)
    if record.get("status") == "stopped":
        return "stopped", job, "saved a checkpoint when signalled; the same command resumes it"
    if record.get("status") in ("queued", "running"):
        return "todo", job, "its job left the queue before the run finished; the same command submits it again"
    return "todo", None, ""


def show_status(grid_file: str | Path, output_dir: str | Path | None) -> int:
    """`sweep GRID --status`: one line per run (state, job id, run, detail), then the tally; nothing is written."""
    output_dir = default_output_dir(grid_file, output_dir)
    runs = load_grid(grid_file, output_dir)
    queue = slurm.queue_states()
    tally = collections.Counter()
    for run in runs:
        state, job, detail = run_state(run, queue)
        tally[state] += 1
        print(f"{state:<8} {job or '-':<12} {run.name}" + (f"  {detail}" if detail else ""))
    order = ("done", "running", "queued", "stopped", "failed", "todo")
    print(f"{output_dir}: {len(runs)} runs: " + ", ".join(f"{tally[s]} {s}" for s in order if tally[s]))
    return 0
