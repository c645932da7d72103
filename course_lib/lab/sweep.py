"""`python -m course_lib sweep GRID.yaml`: run a grid of fine-tuning runs or notebooks, one child process each.

The grid file (YAML) names the command, the settings every run shares, and the lists to cross:

    command: finetune                                    # the course_lib command each run executes
    base: {max_train_samples: 4000, epochs: 2, lr: 5.0e-5}   # FinetuneConfig fields, the same for every run
    grid: {task: [sst2, rte], method: [vanilla], seed: [0, 1, 2]}   # lists; runs are their cartesian product

With `command: notebook` the keys are `notebook`, `preset`, `kernel` and the notebook's parameters (`grid:
{notebook: [01_kou2020_ssa, 03_cui2019_sparse_attention], preset: [cpu], seed: [0, 1, 2]}`), and each run executes
`python -m course_lib notebooks run` (papermill) into its folder; `notebook: all` is every notebook with the base's
preset, the one that tabulates the others last (`notebooks.every_notebook`). `task_overrides: {rte: {lr: 3.0e-5}}`
(finetune) and `notebook_overrides: {06_results: {runs_dir: ...}}` (notebook) set fields for one task or notebook
only. `exclude: [{task: dream, method: ssaf}]` leaves the runs matching a partial combination out of the product (a
method that does not apply to a task).

Every run is validated (`FinetuneConfig.from_dict`, `NotebookRun.from_dict`) before anything starts. A run
lives in its own folder, named by its grid values (`task=sst2,method=vanilla,seed=0`, whatever the grid's
order) under the output folder, and executes as a child process, so a crash, a NaN or a timeout in one run is
recorded in its `run.json` and the grid goes on. `log.txt` holds the child's stdout and stderr.

The same command again skips runs whose `metrics.json` says complete, resumes unfinished ones from their
checkpoint and retries failed ones (`--no-retry-failed` to leave them). Every file is written atomically
and a run folder is locked while its child lives (POSIX `flock` on its `.lock` file), so killing the
sweep at any moment, even with SIGKILL, loses at most the unfinished part of one run. On Linux a child
dies with the sweep.

`--shard I/N` (0-based, 0 <= I < N) takes every N-th run of the grid (in its order), starting at the I-th, so one
process per GPU splits the grid into disjoint parts that share one output folder; on a Slurm cluster `--launcher
slurm` submits the runs as a job array instead (docs/cluster.md). At the end `course_lib.lab.collect` tabulates
the folder.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, model_validator

from course_lib.lab.collect import write_results
from course_lib.lab.notebooks import NotebookRun, every_notebook
from course_lib.lab.slurm import ForwardedStop, task_job_id
from course_lib.model.weights import check_model
from course_lib.runtime.errors import PREEMPTED, UsageError
from course_lib.runtime.repro import (METRICS, atomic_write, check_writable_dir, lock_exclusive, progress,
                                      read_json, remove_stale_temporaries, write_json)
from course_lib.runtime.settings import Settings, first_difference
from course_lib.tasks.metrics import shown
from course_lib.tasks.registry import get_family
from course_lib.training.config import FinetuneConfig

COMMANDS = {"finetune": FinetuneConfig, "notebook": NotebookRun}  # what a grid can run, and its config
RUN, LOG, LOCK = "run.json", "log.txt", ".lock"  # the sweep's files in a run folder, beside the run's METRICS
STDERR_LINES = 20  # how much of a failed run's stderr run.json keeps as its error

@dataclasses.dataclass(frozen=True)
class GridRun:
    """One run of a grid: its folder's name and its config (a fine-tuning run's resolved names are
    `training.run.Run`)."""

    name: str  # folder name, from the grid values: 'task=sst2,seed=0'
    config: FinetuneConfig | NotebookRun  # output_dir is the run's folder

    @property
    def folder(self) -> Path:
        return Path(self.config.output_dir)

    def command_line(self, processes: int = 1) -> list[str]:
        """The child's argv; fields left at their default are not passed, so the line stays readable. With
        processes > 1 a fine-tuning run starts through accelerate's launcher, one process per GPU."""
        if isinstance(self.config, NotebookRun):
            return self.config.command_line()
        args = [sys.executable, "-m", "course_lib", "finetune"]
        if processes > 1:
            import torch  # imported here: the sweep itself never touches a device

            device = [] if torch.cuda.is_available() else ["--cpu"]  # CPU processes where there is no GPU (tests)
            args[1:2] = ["-m", "accelerate.commands.launch", "--num_processes", str(processes), "--num_machines",
                         "1", *device, "--mixed_precision", self.config.mixed_precision, "--dynamo_backend", "no", "-m"]
        nested = [v for v in vars(self.config).values() if isinstance(v, Settings)]  # method's, family's options
        defaults = {name: klass.default(name) for klass in (type(self.config), *map(type, nested))
                    for name in klass.model_fields}
        for name, value in self.config.to_dict().items():
            flag = "--" + name.replace("_", "-")
            if value == defaults[name]:
                continue
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + flag[2:])
            else:
                args.append(f"{flag}={value}")  # '=' keeps a negative number from reading as an option
        return args


# ----------------------------------------------------------------------------------------------
# The grid file


def _config(path: Path, where: str, values: dict, kind=FinetuneConfig, others: str = "drop"):
    """kind.from_dict, which checks types and ranges, with the file and the key in its errors; a fine-tuning run
    keeps only its own method's options (the others' are dropped), so its folder's config is the same whichever
    methods the grid also runs."""
    try:
        return kind.from_dict(values, others=others)
    except UsageError as err:
        raise UsageError(f"{path}: {where}: {err}") from None


def _safe(value) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", str(value))


NAMED_FIRST, NAMED_LAST = ("task", "notebook", "method"), ("seed",)


def run_name(values: dict) -> str:
    """'task=sst2,method=vanilla,seed=0': task, notebook and method first, seed last, the other keys between in
    the order given; other characters than [A-Za-z0-9._+-] become '_'. The name does not depend on the order a
    grid lists its axes in, so reordering a grid (to run its baseline first) keeps its finished runs.

    A name longer than 200 characters (a grid over long model paths) is cut and ends in a hash of the whole.
    """
    middle = [key for key in values if key not in NAMED_FIRST + NAMED_LAST]
    keys = [key for key in NAMED_FIRST if key in values] + middle + [key for key in NAMED_LAST if key in values]
    name = ",".join(f"{key}={_safe(values[key])}" for key in keys)
    if len(name) > 200:
        name = name[:180] + "~" + hashlib.sha1(name.encode()).hexdigest()[:10]
    return name


class GridFile(Settings):
    """A grid file's keys, checked before any run (the module's docstring shows one); each run's fields are then
    checked by its config (`FinetuneConfig.from_dict`, `NotebookRun.from_dict`)."""

    command: Literal[tuple(COMMANDS)] = Field(description="the course_lib command each run executes")
    base: dict[str, Any] = Field({}, description="the fields every run shares")
    grid: dict[str, Annotated[list, Field(min_length=1)]] = Field(min_length=1, description="the lists of values "
                                                                  "to cross; runs are their product")
    exclude: list[Annotated[dict[str, Any], Field(min_length=1)]] = Field([], description="partial combinations "
                                                                          "left out of the product")
    task_overrides: dict[str, dict[str, Any]] = Field({}, description="a finetune grid: {task: {field: value}}")
    notebook_overrides: dict[str, dict[str, Any]] = Field({}, description="a notebook grid: {notebook: "
                                                          "{parameter: value}}")
    gpu_hours: float | dict[str, float] | None = Field(None, description="a dry run's estimate: hours per run, or "
                                                       "per task (notebook)")

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, values):
        """`base:` with nothing after it (YAML's None) is no base; `notebook: all` is the list `[all]`."""
        if not isinstance(values, dict):
            return values
        grid = values.get("grid")
        if isinstance(grid, dict) and grid.get("notebook") == "all":
            values = {**values, "grid": {**grid, "notebook": ["all"]}}
        return {k: v for k, v in values.items() if v is not None}

    @model_validator(mode="after")
    def _each_key_in_one_place(self):
        per_run, overrides = ("task", "task_overrides") if self.command == "finetune" else ("notebook",
                                                                                          "notebook_overrides")
        other = ({"task_overrides", "notebook_overrides"} - {overrides}).pop()
        if getattr(self, other):
            raise UsageError(f"{other} is for {'notebook' if other[0] == 'n' else 'finetune'} grids; this grid "
                             f"runs {self.command} (use {overrides})")
        for section, keys in (("base", self.base), ("grid", self.grid)):
            if "output_dir" in keys:
                raise UsageError(f"{section}.output_dir is set per run by the sweep; remove it (the sweep's "
                                 f"--output-dir sets the parent folder)")
        both = sorted(set(self.grid) & set(self.base))
        if both:
            raise UsageError(f"{both[0]!r} is in both base and grid; keep it in one")
        fixed = sorted({"output_dir", per_run, *self.grid})
        for key, values in getattr(self, overrides).items():
            if set(values) & set(fixed):
                raise UsageError(f"{overrides}.{key}.{sorted(set(values) & set(fixed))[0]} is not a field it may "
                                 f"set (the grid sets {', '.join(fixed)} per run)")
        for rule in self.exclude:
            for key, value in rule.items():
                if key not in self.grid or value not in self.grid[key]:
                    valid = ", ".join(map(str, self.grid[key])) if key in self.grid else f"grid keys: " \
                        f"{', '.join(self.grid)}"
                    raise UsageError(f"exclude {rule!r}: {key}={value!r} is not in the grid (valid: {valid})")
        return self


def read_grid_file(path: Path) -> GridFile:
    """The grid file, checked; unreadable, not YAML, an unknown key or a bad value: one line naming the file."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"cannot read grid file {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise UsageError(f"{path} is not valid YAML{line}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path} must be a mapping with keys {', '.join(GridFile.model_fields)}; "
                         f"it holds a {type(raw).__name__}")
    try:
        return GridFile(**{str(k): v for k, v in raw.items()})
    except UsageError as err:
        raise UsageError(f"{path}: {err}") from None


def load_grid(path: str | Path, output_dir: str | Path) -> list[GridRun]:
    """The grid file's runs, validated, in its order (first list outermost: a baseline listed first runs first)."""
    path = Path(path)
    spec = read_grid_file(path)
    kind, base, grid = COMMANDS[spec.command], spec.base, spec.grid
    if kind is NotebookRun and grid.get("notebook") == ["all"]:
        grid = {**grid, "notebook": every_notebook(base.get("preset", "smoke"))}
    overrides = spec.task_overrides if kind is FinetuneConfig else spec.notebook_overrides
    if kind is FinetuneConfig:
        _config(path, "base", base)  # its own fields and its method's options; the other methods' ones below
        try:
            check_method_options(kind, {k: v for k, v in base.items() if k not in kind.flat_hints(classes=[])})
        except UsageError as err:
            raise UsageError(f"{path}: base: {err}") from None
        for key, values in grid.items():
            for value in values:
                _config(path, f"grid.{key}={value!r}", {**base, key: value})
        for task, values in overrides.items():
            _config(path, f"task_overrides.{task}", {**base, **values})

    runs = {}
    for values in _combinations(grid, spec.exclude):
        name = run_name(values)
        if name in runs:
            raise UsageError(f"{path}: two runs would share the folder {name!r}; make the grid values differ")
        field = "notebook" if kind is NotebookRun else "task"
        key = values.get(field, base.get(field))
        config = {**base, **overrides.get(key, {}), **values,
                  "output_dir": str(Path(output_dir) / name)}
        runs[name] = GridRun(name, _config(path, f"run {name}", config, kind))
    return list(runs.values())


def check_method_options(config_class: type, method_options: dict) -> None:
    """Each method (or task family) option checked by the class that declares it, so a bad value fails before
    any run, though no run of the grid reads it (a notebook's parameters hold every method's options, a grid
    file's base those of the methods it crosses); a name no class declares: one line."""
    known: set[str] = set()
    for klass in config_class.option_classes():
        mine = {k: v for k, v in method_options.items() if k in klass.model_fields}
        klass.from_dict(mine)
        known |= set(klass.model_fields)
    unknown = sorted(set(method_options) - known)
    if unknown:
        raise UsageError(f"unknown method option {unknown[0]!r} (valid: {', '.join(sorted(known))})")


def _combinations(grid: dict, excluded: list[dict]):
    """The grid's product in file order (first list outermost), less the combinations an exclusion matches."""
    for combination in itertools.product(*grid.values()):
        values = dict(zip(grid, combination))
        if not any(all(values[k] == v for k, v in rule.items()) for rule in excluded):
            yield values


def _estimate_key(run: GridRun) -> str:
    """What a mapping of gpu_hours is keyed by: a notebook run's notebook, a fine-tuning run's task."""
    return run.config.notebook if isinstance(run.config, NotebookRun) else run.config.task


def gpu_hours(grid_file: str | Path, runs: list[GridRun]) -> float | None:
    """The grid file's estimate of GPU hours for these runs, or None when it gives none.

    `gpu_hours:` is either one number per run, or a mapping from notebook name (a fine-tuning grid: task name)
    to hours per run.
    """
    estimate = read_grid_file(Path(grid_file)).gpu_hours
    if estimate is None:
        return None
    if isinstance(estimate, float):
        return estimate * len(runs)
    missing = sorted({_estimate_key(r) for r in runs} - set(estimate))
    if missing:
        raise UsageError(f"{grid_file}: gpu_hours has no estimate for {missing[0]!r}")
    return sum(float(estimate[_estimate_key(r)]) for r in runs)


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N', 0-based: the I-th of N disjoint parts."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not int(match[1]) < int(match[2]):
        raise UsageError(f"--shard must be I/N with 0 <= I < N (0-based: 0/4, 1/4, 2/4, 3/4), got {text!r}")
    return int(match[1]), int(match[2])


# ----------------------------------------------------------------------------------------------
# Run folders


def run_status(run: GridRun) -> str:
    """complete (its metrics.json says so), failed (its last attempt failed) or todo (new or unfinished)."""
    if read_json(run.folder / METRICS).get("status") == "complete":
        return "complete"
    return "failed" if read_json(run.folder / RUN).get("status") == "failed" else "todo"


def _saved_setting(saved: dict, k: str) -> str:
    """How a refusal names what the saved run had for field k: its value, or that an older version saved none."""
    return f"{k}={saved[k]!r}" if k in saved else f"no {k} (saved by an older version)"


def check_same_config(run: GridRun) -> None:
    """Refuse a folder that holds another configuration's run (the grid file's base changed, say).

    The comparison is strict (`first_difference`): a field the saved config lacks differs, since every file the
    sweep and the runs write holds the whole config (and the results archive was migrated to hold it too).
    """
    for name in (METRICS, RUN):
        saved = read_json(run.folder / name).get("config")
        k = first_difference(saved, run.config) if saved else None
        if k is not None:
            raise UsageError(f"{run.folder} holds a run with {_saved_setting(saved, k)}, but the grid gives "
                             f"{k}={run.config.to_dict()[k]!r}; use another --output-dir or delete that folder")


@contextmanager
def claim(folder: Path):
    """Lock the run folder (its `.lock` file); yield the lock's descriptor, or None when another process has it.

    The descriptor is handed to the child too, so the lock lasts as long as either of them lives. A lock
    file, not the folder itself, because NFS emulates flock with POSIX locks, which need a writable file;
    on a filesystem or platform without flock (Lustre mounted without it, Windows) the sweep goes on unlocked
    (`repro.lock_exclusive`).
    """
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        yield fd if lock_exclusive(fd, wait=False) else None
    finally:
        os.close(fd)


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _die_with_parent() -> None:
    """Runs in the child before exec: on Linux, ask for SIGKILL when the sweep dies (prctl PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)


try:  # resolved before any fork: the child may only call it
    import ctypes

    _PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _PRCTL = None


def execute(run: GridRun, lock_fd: int, timeout: float | None, stop: ForwardedStop | None = None,
            processes: int = 1) -> dict:
    """Run one child to its end; return the run.json record, also written to the run folder. `stop`: an array
    task's signal forwarding (`slurm.ForwardedStop`), told the child's pid."""
    previous = read_json(run.folder / RUN)
    argv = run.command_line(processes)
    record = {"name": run.name, "command": argv, "config": run.config.to_dict(), "host": socket.gethostname(),
              "attempt": previous.get("attempt", 0) + 1, "started": _now(), "job_id": task_job_id()}
    started = time.monotonic()
    with open(run.folder / LOG, "a", encoding="utf-8") as log:
        log.write(f"=== attempt {record['attempt']}, {record['started']}: {shlex.join(argv)}\n")
        log.flush()
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.PIPE, text=True, errors="replace",
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"}, pass_fds=(lock_fd,),
                                 preexec_fn=_die_with_parent)
        if stop is not None:
            stop.child = child
            if stop.received:  # a stop that came while the child was starting
                child.send_signal(getattr(signal, stop.received))
        write_json(run.folder / RUN, {**record, "status": "running", "pid": child.pid})
        tail = collections.deque(maxlen=STDERR_LINES)

        def copy_stderr():  # to the log, keeping the last lines for run.json
            for line in child.stderr:
                log.write(line)
                log.flush()
                tail.append(line.rstrip())

        reader = threading.Thread(target=copy_stderr, daemon=True)
        reader.start()
        timed_out = False
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            child.kill()
            code = child.wait()
        except BaseException:  # Ctrl-C: the child has its own SIGINT; its checkpoint is written atomically
            try:
                child.wait(10)
            finally:
                child.kill()
            raise
        reader.join(10)

    complete = code == 0 and read_json(run.folder / METRICS).get("status") == "complete"
    said = [line for line in tail if line]
    error = said + _ending(code, complete, timeout if timed_out else None, bool(said))
    record.update(status="complete" if complete else "stopped" if code == PREEMPTED else "failed", ended=_now(),
                  exit_code=code,
                  seconds=round(time.monotonic() - started, 1), error=None if complete else "\n".join(error))
    write_json(run.folder / RUN, record)
    return record


def _ending(code: int, complete: bool, timed_out_after: float | None, said_why: bool) -> list[str]:
    """The line run.json's error ends with: how the child ended, when its own stderr does not say it all."""
    if timed_out_after is not None:
        return [f"timed out after {timed_out_after:g} s and was killed; the same command resumes it"]
    if code == PREEMPTED:
        return ["stopped by a scheduler's signal with a checkpoint; the same command resumes it"]
    if code < 0:
        return [f"killed by signal {signal.Signals(-code).name}"]
    if code == 0 and not complete:
        return [f"exit code 0 but {METRICS} does not say complete"]
    return [f"exit code {code}"] if not complete and not said_why else []


def _mark_complete(run: GridRun) -> None:
    """A run that finished while its sweep was being killed: tidy its folder and record it as complete."""
    remove_stale_temporaries(run.folder)
    record = read_json(run.folder / RUN)
    if record and record.get("status") != "complete":
        ended = datetime.fromtimestamp((run.folder / METRICS).stat().st_mtime).astimezone()
        write_json(run.folder / RUN, {**record, "status": "complete", "exit_code": 0, "error": None,
                                      "ended": ended.isoformat(timespec="seconds")})


def one_line(error: str | None) -> str:
    """The last line of a run's error: the child's final message (`run failed: loss is nan ...`)."""
    lines = [line for line in (error or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no error message"


def dev_summary(run: GridRun) -> str:
    """The run's dev metrics in one line (scores in points), with its warnings (all predictions one class, say)
    after them."""
    metrics = read_json(run.folder / METRICS)
    in_points = metrics.get("family") is not None and get_family(metrics["family"]).percent_scores
    scores = ", ".join(f"{split} {name} {shown(name, value, in_points)}" for split, values in sorted(metrics.items())
                       if split.startswith(("dev", "test")) and isinstance(values, dict)
                       for name, value in values.items())
    return scores + "".join(f"  (warning: {line})" for line in metrics.get("warnings") or [])


def check_before_running(output_dir: Path, todo: list[GridRun]) -> None:
    """Find, before the first child starts, what would otherwise fail every child after its data and model
    are loaded: an output folder that cannot be written, a model whose checkpoint, config or tokenizer is
    damaged (each model of the grid read once)."""
    check_writable_dir(output_dir)
    for model in sorted({run.config.model for run in todo if isinstance(run.config, FinetuneConfig)}, key=str):
        check_model(model)


# ----------------------------------------------------------------------------------------------
# The sweep


def _list_runs(grid_file: str | Path, output_dir: Path, mine: list[GridRun], status: dict[str, str], part: str) -> int:
    """The dry run: each run's status, the tally and the grid file's GPU-hour estimate; nothing is written."""
    for run in mine:
        print(f"{status[run.name]:<8}  {run.name}")
    tally = collections.Counter(status.values())
    print(f"{output_dir}: {len(mine)} runs{part}: "
          + ", ".join(f"{tally[s]} {s}" for s in ("complete", "failed", "todo")))
    hours = gpu_hours(grid_file, mine)
    if hours is not None:
        print(f"estimated GPU hours (the grid file's estimate, one GPU): {hours:.1f}")
    return 0


def archive_run(run: GridRun, archive: str | Path | None) -> None:
    """Copy a complete run's metrics.json, only that file, to archive/<run folder name>/metrics.json (atomically;
    a copy already equal to it is left alone). Nothing without an archive. `sweep(..., archive=DIR)` calls it as
    each run completes (`python -m benchmarks reproduce --archive DIR`), so an archive that is kept (committed) outlives the run
    folders and a killed sweep's archive holds every run that finished."""
    if archive is None:
        return
    data = (run.folder / METRICS).read_bytes()
    target = Path(archive) / run.folder.name / METRICS
    if not target.is_file() or target.read_bytes() != data:
        atomic_write(target, lambda f: f.write(data))


def restore_from_archive(run: GridRun, archive: str | Path | None) -> bool:
    """Copy the archive's metrics.json of a run back into its folder when the folder lacks a complete one, so
    a grid run in pieces goes on in a fresh clone (whose run folders are gone) without training again what the
    committed archive already holds. An archived copy of another configuration is refused, as a folder's is
    (`check_same_config`); a file that holds no config (a notebook's names its parameters) is not compared.
    Return whether the run was restored."""
    if archive is None or run_status(run) == "complete":
        return False
    source = Path(archive) / run.folder.name / METRICS
    saved = read_json(source)  # {} when the archive lacks the run
    k = first_difference(saved["config"], run.config) if saved.get("config") else None
    if k is not None:
        raise UsageError(f"{source} holds a run with {_saved_setting(saved['config'], k)}, but the grid gives "
                         f"{k}={run.config.to_dict()[k]!r}; move that archive aside or use another --archive")
    if saved.get("status") != "complete":
        return False
    data = source.read_bytes()
    run.folder.mkdir(parents=True, exist_ok=True)
    atomic_write(run.folder / METRICS, lambda f: f.write(data))
    return True


def default_output_dir(grid_file: str | Path, output_dir: str | Path | None) -> Path:
    return Path(output_dir) if output_dir is not None else Path("runs/sweep") / Path(grid_file).stem


def sweep(grid_file: str | Path, output_dir: str | Path | None = None, shard: tuple[int, int] = (0, 1),
          dry_run: bool = False, retry_failed: bool = True, timeout: float | None = None,
          archive: str | Path | None = None, processes: int = 1) -> int:
    """Run (or, with dry_run, list) this shard's runs; return the exit code: 0 when all are complete. With an
    archive folder, each complete run of the shard (finished now or before) is copied there (`archive_run`), and
    a run the archive holds but its folder does not is restored from it, not run again (`restore_from_archive`)."""
    output_dir = default_output_dir(grid_file, output_dir)
    runs = load_grid(grid_file, output_dir)
    (index, count), mine = shard, runs[shard[0]::shard[1]]
    for run in mine:
        check_same_config(run)
    restored = 0 if dry_run else sum(restore_from_archive(run, archive) for run in mine)
    status = {run.name: run_status(run) for run in mine}
    part = f" (shard {index}/{count} of {len(runs)})" if count > 1 else ""
    if dry_run:
        return _list_runs(grid_file, output_dir, mine, status, part)

    skipped = [r for r in mine if status[r.name] == "complete"]
    left = [r for r in mine if status[r.name] == "failed" and not retry_failed]
    todo = [r for r in mine if status[r.name] == "todo" or (status[r.name] == "failed" and retry_failed)]
    check_before_running(output_dir, todo)
    if archive is not None:
        check_writable_dir(archive)
    print(f"{output_dir}: {len(mine)} runs{part}: {len(todo)} to run, {len(skipped)} already complete"
          + (f" ({restored} of them restored from the archive {archive})" if restored else "")
          + (f", {len(left)} failed and not retried" if left else ""))
    complete, failed, busy = [], [(r, read_json(r.folder / RUN).get("error")) for r in left], []
    bar = progress(total=len(mine), initial=len(mine) - len(todo), desc="sweep", unit="run")
    for run in skipped:
        with claim(run.folder) as lock:
            if lock is not None:
                _mark_complete(run)
                archive_run(run, archive)
    for run in todo:
        run.folder.mkdir(parents=True, exist_ok=True)
        with claim(run.folder) as lock:
            if lock is None:
                busy.append(run)
                bar.write(f"busy      {run.name}: another process holds its folder; left to it")
            elif run_status(run) == "complete":  # finished by another process since we looked
                skipped.append(run)
            else:
                record = execute(run, lock, timeout, processes=processes)
                if record["status"] == "complete":
                    complete.append(run)
                    archive_run(run, archive)
                    bar.write(f"complete  {run.name}  ({record['seconds']:.0f} s)  {dev_summary(run)}")
                else:
                    failed.append((run, record["error"]))
                    bar.write(f"failed    {run.name}  ({record['seconds']:.0f} s)  {one_line(record['error'])}")
        bar.update()
    bar.close()

    print(f"{len(complete)} complete, {len(failed)} failed, {len(skipped)} skipped (already complete)"
          + (f", {len(busy)} busy (running in another process)" if busy else ""))
    for run, error in failed:
        print(f"  failed {run.name}: {one_line(error)}  (log: {run.folder / LOG})")
    csv_path, md_path, rows = write_results(output_dir)
    print(f"results of {len(rows)} complete runs: {md_path}, {csv_path}")
    return 1 if failed or busy else 0
