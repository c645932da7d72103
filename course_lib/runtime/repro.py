"""Seeding, atomic writes, progress bars and the plain progress lines a log shows: the one helper of each kind the
whole library reuses."""
from __future__ import annotations

import errno
import functools
import json
import os
import pickle
import random
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import torch

from course_lib.runtime.errors import RunFailed, UsageError

CHECKPOINT, METRICS, WEIGHTS = "checkpoint.pt", "metrics.json", "model.safetensors"  # every run folder's files


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch before the model is built, so CPU runs repeat exactly."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def atomic_write(path: str | os.PathLike, write) -> None:
    """Call write(file_object) on a temporary file, fsync it, then rename it over `path`.

    A kill at any moment leaves either the previous good file or the new complete one, never half of one. A
    full disk is one line (`RunFailed`) naming the file and the space, not a traceback from deep in a writer.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        written = Path(tmp).stat().st_size if Path(tmp).exists() else 0
        Path(tmp).unlink(missing_ok=True)
        if _disk_full(err):
            raise RunFailed(_disk_full_message(path, written)) from None
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _disk_full(err: BaseException) -> bool:
    """ENOSPC (or a quota) anywhere in the chain: torch's writer wraps the OSError in a RuntimeError."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(err, RuntimeError) and "No space left on device" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def _disk_full_message(path: Path, written: int) -> str:
    previous = f"the previous {path.name} ({path.stat().st_size} bytes) is kept" if path.exists() else \
        f"no earlier {path.name} was there"
    return (f"no space left on the disk of {path}: {written} bytes were written before it filled, "
            f"{shutil.disk_usage(path.parent).free} bytes are free; {previous}. Free some space and run the same "
            f"command again")


def check_writable_dir(path: str | os.PathLike) -> Path:
    """Create the output folder and write and remove a probe file in it, before any data, weights or step.

    Otherwise a folder that is a file, sits under a file or is read-only shows up only at the first
    checkpoint, an epoch into the run, as a traceback. The probe is named like an interrupted write, so
    `remove_stale_temporaries` clears it should a kill land in between.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-probe.", suffix=".tmp")
        os.close(fd)
        Path(probe).unlink(missing_ok=True)
    except OSError as err:
        blocker = next((p for p in (path, *path.parents) if p.exists()), None)
        why = f"{blocker} is a file, not a folder" if blocker is not None and not blocker.is_dir() \
            else err.strerror or type(err).__name__
        raise UsageError(f"output folder {str(path)!r} cannot be written: {why} "
                         f"(give an --output-dir you can write to)") from None
    return path


def remove_stale_temporaries(folder: str | os.PathLike) -> None:
    """Delete the temporary files of writes that a kill interrupted (the finished files are intact)."""
    for tmp in Path(folder).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def write_json(path: str | os.PathLike, obj) -> None:
    atomic_write(path, lambda f: f.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()))


def read_json(path: str | os.PathLike) -> dict:
    """The file's content, or {} when it is missing or unreadable (never half-written: writes are atomic)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def save_torch(path: str | os.PathLike, obj) -> None:
    atomic_write(path, lambda f: torch.save(obj, f))


def load_torch(path: Path, what: str, remedy: str):
    """A file `save_torch` wrote, read back without running any of it.

    Run folders are shared (a cluster's disk, a colleague's copy), and a full unpickler runs whatever a file
    names: torch's weights-only unpickler builds tensors and plain containers only, so an object planted in the
    file is refused before it is built (transformers' CVE-2026-1839 was a Trainer that unpickled its own RNG
    state). A refused or damaged file is one line naming it, what is wrong and `remedy`, not torch's traceback.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "Weights only load failed" not in str(err):
            raise UsageError(f"{what} {str(path)!r} is damaged ({_first_line(err)}): {remedy}") from None
        named = [line.strip() for line in str(err).splitlines() if "GLOBAL" in line or "Unsupported" in line]
        raise UsageError(f"{what} {str(path)!r} holds objects this library never writes "
                         f"({named[0] if named else 'not tensors or plain data'}), so it was not read and nothing "
                         f"in it ran: the file was not written by this run or was changed since; {remedy}") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as err:
        raise UsageError(f"{what} {str(path)!r} is damaged ({_first_line(err)}): {remedy}") from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def training_state(model, optimizer, scheduler) -> dict:
    """What a checkpoint needs beyond the run's own counters: weights, optimiser, schedule and RNG streams."""
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def restore_training_state(checkpoint: dict, model, optimizer, scheduler) -> None:
    """The inverse of `training_state`: the resumed run continues as if it had never stopped."""
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    torch.set_rng_state(checkpoint["rng"])
    if torch.cuda.is_available() and checkpoint.get("cuda_rng") is not None:
        torch.cuda.set_rng_state_all(checkpoint["cuda_rng"])


def progress_disabled() -> bool:
    """Bars only for a person watching: a terminal or a Jupyter kernel; off under CI or TQDM_DISABLE=1
    (the batch runner sets it for papermill, and nbval runs under CI)."""
    if os.environ.get("CI") or os.environ.get("TQDM_DISABLE"):
        return True
    return not (sys.stderr.isatty() or "ipykernel" in sys.modules)


def progress(iterable=None, **kwargs):
    """tqdm with the project's quiet rule; pass disable=False to force a bar. In a Jupyter kernel the bar is a
    widget while it runs and its last line of text once it ends (`_saved_bar_class`)."""
    from tqdm.auto import tqdm

    kwargs.setdefault("disable", progress_disabled())
    kwargs.setdefault("dynamic_ncols", True)
    if not kwargs["disable"] and any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__):  # a widget bar
        return _saved_bar_class(tqdm)(iterable, **kwargs)
    return tqdm(iterable, **kwargs)


_SLOTS: dict = {}  # (cell execution, bar level) -> the one display output that level's bars take turns in


def _bar_slot(container, level: int):
    """The display output of a cell's bars at one nesting level: the first bar creates it, later ones replace the
    widget in it, so a cell keeps one bar output per level however many bars it runs."""
    from IPython import get_ipython
    from IPython.display import display

    key = (getattr(get_ipython(), "execution_count", None), level)
    if key in _SLOTS:
        _SLOTS[key].update(container)
    else:
        if len(_SLOTS) > 256:  # slots of cells run long ago
            _SLOTS.clear()
        _SLOTS[key] = display(container, display_id=True)
    return _SLOTS[key]


@functools.cache
def _saved_bar_class(widget_bar):
    """`widget_bar` (tqdm.auto's choice in a notebook) shown in its cell's slot, and turned into text when it ends.

    A saved notebook must not hold a widget view: reopened without the kernel's widget state, JupyterLab prefers it
    to the text beside it and shows "Error displaying widget". So a finished bar empties its slot and prints its
    last line (`epoch 1: 100%|...| 64/64 [00:12<00:00]`), which joins the cell's other printed lines in one output;
    a bar with leave=False leaves nothing. A training cell then holds a few outputs at any preset, not one per bar
    (JupyterLab folds a cell's outputs past 50 behind "Show more outputs").
    """

    class SavedBar(widget_bar):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, display=False, **kwargs)
            self.handle = _bar_slot(self.container, abs(getattr(self, "pos", 0))) if not self.disable else None

        def close(self):
            super().close()
            if self.handle is not None:
                self.handle.update({"text/plain": ""}, raw=True)
                if self.leave:
                    print(self.format_meter(**self.format_dict), flush=True)
                self.handle = None

    return SavedBar


PROGRESS_SECONDS_ENV = "ATTENTION_LAB_PROGRESS_SECONDS"  # the longest gap between two progress lines in a log


def progress_seconds() -> float:
    """The longest a log goes without a progress line ($ATTENTION_LAB_PROGRESS_SECONDS, default 60 s)."""
    text = os.environ.get(PROGRESS_SECONDS_ENV, "60")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise UsageError(f"${PROGRESS_SECONDS_ENV}={text!r} is not a number of seconds (valid: a number >= 0; "
                         f"default 60)")
    return seconds


def progress_lines_wanted() -> bool:
    """Lines instead of a bar where no bar can be seen: stderr is a file or a pipe (a Slurm task, a sweep's
    log.txt), not a terminal, and not a notebook's cell, which shows the bar as a widget."""
    return not sys.stderr.isatty() and not in_jupyter_kernel()


def in_jupyter_kernel() -> bool:
    """Whether this process is a Jupyter kernel (a notebook shows the bar as a widget there, not a log)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def log_line(text: str) -> None:
    """One line on stderr, for the run's log, unless a notebook shows this run (its cells hold no log lines)."""
    if not in_jupyter_kernel():
        print(text, file=sys.stderr, flush=True)


class ProgressLines:
    """The bar's numbers as plain lines, for a log that is not a terminal (a Slurm task's output, a sweep's
    log.txt), where a bar redrawn in place shows nothing until it ends: a line whenever the loop reads the loss
    (every `log_every` steps) and at least every `progress_seconds()` in between, the same way Hugging Face's
    Trainer logs every `logging_steps`. It reads nothing from the device: the loss is the last one read.
    """

    def __init__(self, total_steps: int, start_step: int, enabled: bool):
        self.total, self.start_step, self.enabled = total_steps, start_step, enabled
        self.every = progress_seconds()
        self.started = self.last = time.perf_counter()

    def due(self) -> bool:
        return self.enabled and time.perf_counter() - self.last >= self.every

    def write(self, step: int, epoch: int, loss: float | None, lr: float) -> None:
        """`step 500/12272 epoch 1 loss 0.693 lr 1.9e-05 12.3 steps/s ETA 16m` on stderr."""
        if not self.enabled:
            return
        now = time.perf_counter()
        rate = (step - self.start_step) / max(now - self.started, 1e-9)
        eta = _duration((self.total - step) / rate) if rate > 0 else "?"
        shown = "-" if loss is None else f"{loss:.3f}"
        print(f"step {step}/{self.total} epoch {epoch} loss {shown} lr {lr:.1e} {rate:.3g} steps/s ETA {eta}",
              file=sys.stderr, flush=True)
        self.last = now


def _duration(seconds: float) -> str:
    """45s, 16m, 2h05m: an ETA as a person reads it."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def lock_exclusive(fd: int, wait: bool = True) -> bool:
    """Lock the open file `fd` (POSIX flock, which a child given the descriptor shares); False only when `wait`
    is False and another process holds it.

    Where there is no flock the caller goes on unlocked (True): a filesystem without it (Lustre mounted without
    flock), or a platform without fcntl (Windows). What that gives up: two sweep shards may then run the same
    run folder at once, and two that finish together may each replace results.csv/.md, so the last writer's
    tables, read before the other's run completed, can lack that run until the next collect. Every file is
    still written whole (atomic_write).
    """
    try:
        import fcntl  # here, not at the top: POSIX only, and notebook 06 imports this module on any platform
    except ImportError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # a filesystem without flock
        return True
    return True
