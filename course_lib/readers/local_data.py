"""Where a preset's local data lives when the run names none: its environment variable, else the repository's data/.

The repository ships real data in `data/` (GLUE SST-2, CoLA, RTE and STS-B; WNUT-17; the SQuAD v1.1 dev file;
sources, licences and checksums in `data/README.md`), so a fresh clone trains and tests with no variable and no
hub. The order for every reader is: the run's own file or folder option, else the variable (`GLUE_DIR`, ...),
else the shipped copy, else the `datasets` hub. The shipped copy is partial (no MRPC, no SQuAD train file), so it
is consulted file by file: what it lacks goes on to the hub. A package installed without the repository (a wheel)
has no `data/` and goes straight to the hub.
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_DATA = Path(__file__).resolve().parents[2] / "data"
SHIPPED = {"GLUE_DIR": "glue", "SQUAD_DIR": "squad", "WNUT17_DIR": "wnut17"}  # variable -> folder in data/


def shipped_folder(env: str) -> Path | None:
    """The repository's copy of the data that `env` points at, or None (not shipped, or no repository)."""
    name = SHIPPED.get(env)
    path = REPO_DATA / name if name else None
    return path if path is not None and path.is_dir() else None


def shipped_file(env: str, relative: str) -> Path | None:
    """One file of that copy (`SST-2/train.tsv`), or None when the copy lacks it."""
    folder = shipped_folder(env)
    path = folder / relative if folder is not None else None
    return path if path is not None and path.is_file() else None


def locate(env: str | None, given: str | os.PathLike | None = None, *shipped: str) -> tuple[str, Path | None]:
    """Where a preset's data is, the one answer every reader takes: ("chosen", the folder the run's option or
    $env names; an empty variable counts as unset, and a chosen folder never falls back to another), else
    ("shipped", the first of the `shipped` files the repository's data/ copy has, or that copy's folder when no
    file is named), else ("hub", None)."""
    chosen = given or (os.environ.get(env) if env else None)
    if chosen:
        return "chosen", Path(chosen).expanduser()
    found = (shipped_file(env, name) for name in shipped) if shipped else iter([shipped_folder(env)])
    hit = next(filter(None, found), None) if env else None
    return ("shipped", hit) if hit is not None else ("hub", None)


def data_folder(env: str, given: str | os.PathLike | None = None) -> Path | None:
    """The folder to read (`locate`'s, chosen or shipped), else None (the hub)."""
    return locate(env, given)[1]


def describe_shipped(env: str) -> str:
    """' (the repository's data/glue has CoLA, RTE, ...)' for an error message; '' when nothing is shipped."""
    folder = shipped_folder(env)
    if folder is None:
        return ""
    return f" (the repository's data/{folder.name} has {', '.join(sorted(p.name for p in folder.iterdir()))})"
