"""A notebook's parameters, checked: the one piece of the notebooks' plumbing a lesson needs before it teaches.

Each notebook has one `parameters` cell of literals whose defaults are the CPU smoke run. Its presets are
YAML files, `notebooks/params/<notebook>/<preset>.yaml` (`smoke`, `cpu`, `paper`), and the smoke file is
the schema: `parameters_model` makes it a settings model, one field per key of the smoke value's type, which
every preset and every override must pass. Papermill injects whatever it is given without a check, so the
notebook's config cell calls `Notebook.parameters`, which rejects an unknown or ill-typed parameter with one
line naming it and the valid ones. Running notebooks in
batch is the lab's (`course_lib.lab.notebooks`).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import create_model

from course_lib.runtime.errors import UsageError, choice_error
from course_lib.runtime.repro import METRICS, write_json
from course_lib.runtime.settings import Settings

# The repository's notebooks; tests point ATTENTION_LAB_NOTEBOOKS at a folder of their own.
NOTEBOOK_DIR = Path(os.environ.get("ATTENTION_LAB_NOTEBOOKS") or Path(__file__).resolve().parents[2] / "notebooks")
PRESETS = ("smoke", "cpu", "paper")  # CPU minutes; data/, about an hour on a laptop; GPU, the paper's setup
LITERALS = (str, int, float, bool, list, dict, tuple, type(None))  # what a parameters cell may hold


def notebook_names() -> list[str]:
    return sorted(p.stem for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def notebook_path(notebook: str) -> Path:
    """notebooks/<notebook>.ipynb; the name may be given with or without `.ipynb`."""
    name = notebook.removesuffix(".ipynb")
    if name not in notebook_names():
        raise choice_error("notebook", notebook, notebook_names())
    return NOTEBOOK_DIR / f"{name}.ipynb"


def presets_of(notebook: str) -> list[str]:
    folder = NOTEBOOK_DIR / "params" / notebook_path(notebook).stem
    return [p for p in PRESETS if (folder / f"{p}.yaml").is_file()]


def load_preset(notebook: str, preset: str) -> dict:
    """The parameter values of one preset, read from its YAML file."""
    name = notebook_path(notebook).stem
    if preset not in presets_of(name):
        raise choice_error(f"preset for {name}", preset, presets_of(name) or PRESETS)
    path = NOTEBOOK_DIR / "params" / name / f"{preset}.yaml"
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict):
        raise UsageError(f"{path} must be a mapping of parameter names to values, got {type(values).__name__}")
    return values


def _field(value):
    """A parameter's field, from its smoke value: that value's type (None too: "all" or "the default"; an int
    where the value is a float, as YAML and people write 1 for 1.0), the value its default."""
    return (Any if value is None else type(value) | None), value


def parameters_model(notebook: str) -> type[Settings]:
    """The notebook's parameters as a settings model: one field per key of its smoke preset (the schema), and the
    preset one of the notebook's own."""
    name = notebook_path(notebook).stem
    fields = {key: _field(value) for key, value in load_preset(name, "smoke").items()}
    if "preset" in fields:
        fields["preset"] = (Literal[tuple(sorted(presets_of(name)))] | None, fields["preset"][1])
    return create_model(name, __base__=Settings, **fields)


def check_parameters(notebook: str, values: dict, where: str = "") -> dict:
    """The values, checked by the notebook's parameters model (one line for an unknown key or a bad value, after
    `where`); returned as the model reads them (YAML's text `5e-5` as the number)."""
    model = parameters_model(notebook)
    try:
        checked = model(**values)
    except UsageError as err:
        raise UsageError(f"{where}: {err}" if where else str(err)) from None
    return {key: getattr(checked, key) for key in values}


class Notebook:
    """Made in a notebook's setup cell, before the parameters cell: `nb = Notebook("01_kou2020_ssa", globals())`.

    It notes which names exist before the parameters, so `nb.parameters(globals())` in the config cell sees
    exactly what the parameters cell and papermill's injected cell defined, and can check every one.
    """

    def __init__(self, name: str, namespace: dict):
        self.name = notebook_path(name).stem
        self._before = set(namespace)
        self.params: dict = {}
        self.started = time.monotonic()

    def parameters(self, namespace: dict) -> argparse.Namespace:
        """The checked parameters, as `p.epochs`; their output_dir is created."""
        new = {k: v for k, v in namespace.items() if k not in self._before and not k.startswith("_")
               and isinstance(v, LITERALS)}  # parameters are literals; modules imported since are not
        self.params = check_parameters(self.name, new)
        missing = sorted(set(load_preset(self.name, "smoke")) - set(new))
        if missing:
            raise UsageError(f"parameter {missing[0]!r} is not set: the parameters cell must define every "
                             f"parameter of notebooks/params/{self.name}/smoke.yaml")
        Path(self.params["output_dir"]).mkdir(parents=True, exist_ok=True)
        return argparse.Namespace(**self.params)

    @property
    def output_dir(self) -> Path:
        return Path(self.params["output_dir"])

    def save_results(self, results: dict) -> Path:
        """Write metrics.json (atomically) with the parameters, results and time; the run is then complete."""
        path = self.output_dir / METRICS
        write_json(path, {"kind": "notebook", "notebook": self.name, "status": "complete",
                          "parameters": self.params, "results": results,
                          "seconds": round(time.monotonic() - self.started, 1)})
        return path
