"""Read back a run another folder already finished with the identical configuration, instead of training it again.

`make test` executes every notebook under nbval and `make demo` executes them again through the batch runner,
with the same smoke parameters but another output folder: without this, every fine-tuning and pre-training run
of the smoke presets would be trained twice, minutes apart, to the same numbers (CPU runs are deterministic).

`python -m course_lib notebooks run` names, in FINISHED_RUNS_ENV, the folder where the same notebook and preset write by
default (where JupyterLab and nbval put their runs). Before each run of a notebook's grid (`lab.grid.run_grid`),
a run whose own folder holds no metrics.json looks there for a completed run whose saved configuration equals
its own in every field but output_dir (the test `finished_run` applies to its own folder) and copies it: the
weights as hard links where the filesystem allows, metrics.json rewritten to name its new folder. A run that
differs in any field trains as before; a data file that each execution wrote into its own folder counts as the
same where both hold the same bytes. Like every finished run, a copied one is only as current as the code that
trained it: `make clean` (or deleting runs/) starts afresh.
"""
from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

from course_lib.runtime.repro import METRICS, read_json, write_json
from course_lib.runtime.settings import first_difference

FINISHED_RUNS_ENV = "ATTENTION_LAB_FINISHED_RUNS"  # a folder of finished runs to read back from, or unset


def same_file(a, b) -> bool:
    """Two paths to files holding the same bytes."""
    if not (isinstance(a, str) and isinstance(b, str) and Path(a).is_file() and Path(b).is_file()):
        return False
    return filecmp.cmp(a, b, shallow=False)


def matching_config(saved: dict, cfg) -> dict | None:
    """The saved config as cfg names it, when nothing but output_dir differs (`first_difference`) or a data file
    each execution wrote into its own folder (notebook 03's SQuAD split, notebook 04's corpus) whose two copies
    hold the same bytes: the same data. None when anything else differs."""
    mine, key = cfg.to_dict(), first_difference(saved, cfg)
    while key is not None and same_file(saved.get(key), mine[key]):
        saved = {**saved, key: mine[key]}
        key = first_difference(saved, cfg)
    return saved if key is None else None


def identical_finished_run(cfg, folder: Path) -> tuple[Path, dict] | None:
    """A completed run under `folder` with cfg's configuration: its folder and its config as cfg names it."""
    for path in sorted(folder.rglob(METRICS)):
        saved = read_json(path)  # a notebook's own metrics.json has no config
        if saved.get("status") == "complete" and isinstance(saved.get("config"), dict):
            config = matching_config(saved["config"], cfg)
            if config is not None:
                return path.parent, config
    return None


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or one without hard links
        shutil.copy2(source, target)


def copy_finished_run(donor: Path, out: Path, config: dict) -> None:
    """Copy donor's run into out (which must be missing or empty), all or nothing: into a temporary sibling,
    then one rename. metrics.json is written anew with `config` (its data files named as the new run names them)
    and the new folder, so the donor's own file (a hard link's target) never changes."""
    temporary = out.parent / f".{out.name}.copying"
    shutil.rmtree(temporary, ignore_errors=True)  # a copy cut short earlier
    shutil.copytree(donor, temporary, copy_function=_link_or_copy,
                    ignore=lambda _, names: [n for n in names if n.startswith(".") or n == METRICS])
    saved = read_json(donor / METRICS)
    write_json(temporary / METRICS, {**saved, "config": {**config, "output_dir": str(out)}})
    if out.is_dir():
        out.rmdir()  # empty (the caller checked); a folder with files is never replaced
    os.rename(temporary, out)


def reuse_finished_run(out: Path, cfg) -> bool:
    """Copy the identical finished run from FINISHED_RUNS_ENV's folder into out, if there is one; say so."""
    folder = os.environ.get(FINISHED_RUNS_ENV)
    if not folder or not Path(folder).is_dir() or (out.is_dir() and any(out.iterdir())):
        return False
    if Path(folder).resolve() in (out.resolve(), *out.resolve().parents):
        return False  # the run's own folder, or one above it
    found = identical_finished_run(cfg, Path(folder))
    if found is None:
        return False
    donor, config = found
    out.parent.mkdir(parents=True, exist_ok=True)
    copy_finished_run(donor, out, config)
    print(f"{out}: read back the identical finished run in {donor} (delete both folders to train afresh)")
    return True
