"""Where a task preset's data comes from: the run's own files, else the preset's folder, else a hub dataset.

A file-backed preset (WNUT-17, DREAM, SST-5, ...) names its files inside a folder, the environment variable
that points at that folder (`WNUT17_DIR`), and the `datasets` hub id to use online. `split_paths` resolves the
three splits a run may read, in that order of preference:

    train  --train-file        else <folder>/<its train file>   else the hub
    dev    --validation-file   else <folder>/<its dev file>     else the hub
    test   --test-file         else <folder>/<its test file>    else the hub, when its test split is labelled
                                                                 and the run did not give its own train and
                                                                 dev files (then no test split, and a note)

where <folder> is --data-dir, else the preset's variable, else the repository's copy in `data/` when it ships one.

A local file always wins, so offline machines and CI never touch the network. The hub is imported only when
no file is given: `datasets` is slow to import.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.readers import local_data
from course_lib.runtime.errors import UsageError

SPLITS = ("train", "dev", "test")
FILE_OPTIONS = {"train": "train_file", "dev": "validation_file", "test": "test_file"}  # split -> config field


@dataclass(frozen=True)
class Source:
    """A preset's data: file names in its folder, the variable naming the folder, and the hub's copy."""

    files: dict[str, str] = field(default_factory=dict)  # split -> file name in the folder
    env: str | None = None  # e.g. "WNUT17_DIR"
    hub: str | None = None  # a `datasets` id, e.g. "leondz/wnut_17"
    hub_config: str | None = None  # its configuration name, if it has several
    hub_splits: dict[str, tuple[str, ...]] = field(default_factory=dict)  # split -> hub splits, concatenated
    #   (default: train -> train, dev -> validation, test -> test)
    labelled_test: bool = False  # the test split has gold labels (WNUT-17, DREAM): it is scored like dev

    def hub_names(self, split: str) -> tuple[str, ...]:
        return self.hub_splits.get(split, ({"dev": "validation"}.get(split, split),))


def folder(source: Source, cfg) -> Path | None:
    """The preset's folder: the run's --data-dir, else $<ENV>, else the repository's copy in data/ (WNUT-17), else
    None (no folder: files or the hub)."""
    where, path = local_data.locate(source.env, getattr(cfg, "data_dir", None))
    if where == "chosen" and not path.is_dir():
        origin = "--data-dir" if getattr(cfg, "data_dir", None) else f"${source.env}"
        raise UsageError(f"{origin} {str(path)!r} does not exist or is not a folder")
    return path


def split_paths(source: Source, cfg) -> dict[str, Path | None]:
    """{split: the local file to read, or None for the hub} for train, dev and, when there is one, test.

    A file named by an option must exist; a folder must hold the preset's file for train and dev (its test file
    is optional; a folder is never mixed with the hub). A split with neither a file nor a hub copy is left out,
    so the run reads it nowhere.
    """
    base = folder(source, cfg)
    own_files = _own_train_and_dev(cfg)
    paths: dict[str, Path | None] = {}
    for split in SPLITS:
        given = getattr(cfg, FILE_OPTIONS[split], None)
        if given:
            paths[split] = _existing(Path(given).expanduser(), f"--{FILE_OPTIONS[split].replace('_', '-')}")
        elif base is not None:  # a folder: its files only (a folder without a test file has no test split)
            if split in source.files and (split != "test" or (base / source.files[split]).is_file()):
                paths[split] = _existing(base / source.files[split], f"the {split} file of {base}")
        elif split == "test" and own_files:  # the run's own train and dev files: a test split only if given
            pass  # (`skipped_test_note` says so once the data is read)
        elif source.hub and (split != "test" or source.labelled_test):
            paths[split] = None
    for split in ("train", "dev"):
        if split not in paths:
            raise UsageError(f"no {split} data: give --{FILE_OPTIONS[split].replace('_', '-')} FILE"
                             + (f" or set {source.env} to the preset's folder" if source.env else ""))
    return paths


def skipped_test_note(task, cfg) -> str | None:
    """The line a run prints when its preset has a labelled test split that it will not score: the run gave its
    own train and dev files but no test file, so the hub's test split (another data set's) is not mixed in."""
    source, paths = getattr(task, "source", None), getattr(task, "paths", None) or {}
    if source is None or not source.labelled_test or "test" in paths or not _own_train_and_dev(cfg):
        return None
    return "note: no test split: --train-file and --validation-file were given without --test-file"


def _own_train_and_dev(cfg) -> bool:
    return all(getattr(cfg, FILE_OPTIONS[split], None) for split in ("train", "dev"))


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        found = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() else []
        raise UsageError(f"{what}: {str(path)!r} does not exist (found: {', '.join(found) or 'nothing'})")
    return path


def hub_rows(task_name: str, source: Source, split: str) -> list[dict]:
    """The split's rows from the hub (its hub splits concatenated), as dicts; one line saying what to give
    instead when the hub cannot be reached."""
    try:
        import datasets  # slow to import; only needed without local files

        rows = []
        for name in source.hub_names(split):
            rows += list(datasets.load_dataset(source.hub, source.hub_config, split=name))
        return rows
    except Exception as err:  # offline, no cache, the hub changed: all mean "give me files"
        option = f"--{FILE_OPTIONS[split].replace('_', '-')}"
        folder_hint = f", or set {source.env} to its folder" if source.env else ""
        raise UsageError(f"could not load {task_name} {split} from the hub {source.hub!r} "
                         f"({type(err).__name__}): give {option} FILE{folder_hint}, or go online") from err


def read_split(task, split: str, read_file, from_hub) -> list:
    """The split's examples: `read_file(path)` for a local file, else `from_hub(rows)` for the hub's rows."""
    path = task.paths[split]
    return read_file(path) if path is not None else from_hub(hub_rows(task.name, task.source, split))


def jsonl_records(path: Path) -> list[tuple[str, object]]:
    """A JSON-lines file's values with where each was read ("file:line"); blank lines skipped, a line that is not
    JSON or a file that is not UTF-8 is one line naming the place."""
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text ({err.reason})") from None
    records = []
    for line_no, line in enumerate(lines, start=1):
        if line.strip():
            where = f"{path}:{line_no}"
            try:
                records.append((where, json.loads(line)))
            except json.JSONDecodeError as err:
                raise UsageError(f"{where}: not a JSON line ({err.msg})") from None
    return records
