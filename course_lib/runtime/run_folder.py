"""A run's folder: one live run at a time (`.run.lock`), its checkpoint read back, a finished run found, and the
saved configuration compared with this run's, so that a resumed or reused folder is the same run. The training
loop (`training/loop.py`) writes these files; this is what it checks before it starts.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import METRICS, load_torch, lock_exclusive
from course_lib.runtime.settings import first_difference


def read_checkpoint(path: Path) -> dict:
    """The checkpoint to resume from, read without running code (`repro.load_torch`); a damaged one (a copy cut
    short, a disk that filled mid-write outside this library) or one holding foreign objects is one line naming
    it and what to do, not torch's traceback."""
    return load_torch(path, "checkpoint", "delete it to start the run again from the beginning, or put back the "
                                          "copy the run wrote")


def check_same_run(saved: dict, cfg, path: Path) -> None:
    """Refuse to resume or reuse the output of a different configuration (any config dataclass).

    A field missing from an older version's file differs: that version may have done something else there.
    """
    k = first_difference(saved, cfg)
    if k is not None and k not in saved:
        raise UsageError(f"{path} holds a run saved by an older version, which did not record {k} (this run has "
                         f"{k}={cfg.to_dict()[k]!r}); delete it to run again, or use another --output-dir")
    if k is not None:
        raise UsageError(f"{path} holds a different run's checkpoint ({k}={saved[k]!r}, this run has "
                         f"{k}={cfg.to_dict()[k]!r}); use another --output-dir or delete it")


def finished_run(out: Path, cfg) -> dict | None:
    """The metrics of a run that already completed in `out` with this config, else None."""
    path = out / METRICS
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    check_same_run(result["config"], cfg, out)
    return result if result.get("status") == "complete" else None


RUN_LOCK = ".run.lock"  # held while a run trains in its folder (the sweep's own `.lock` there is its parent's)


_held_locks: dict[Path, int] = {}  # run folders this process holds: a later run of its own there may go on


def lock_run_folder(out: Path) -> None:
    """Refuse a second process in a run folder while one trains there (a double-launched job, a mis-sharded
    grid): POSIX flock on `.run.lock`, which dies with its process, so a killed run leaves no stale lock."""
    out = out.resolve()
    if out in _held_locks:
        return
    fd = os.open(out / RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    if not lock_exclusive(fd, wait=False):
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise UsageError(f"output folder {str(out)!r} is in use by {holder}: wait for that run to end, or give "
                         f"another --output-dir")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()}".encode(), 0)
    _held_locks[out] = fd


def unlock_run_folder(out: Path) -> None:
    fd = _held_locks.pop(out.resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the lock
