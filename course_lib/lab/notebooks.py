"""Running a notebook in batch with papermill, with a preset and checked overrides (the lab's side; the
parameters check every notebook runs itself is `course_lib.notebook.params`).

    python -m course_lib notebooks run 03_cui2019_sparse_attention --preset cpu [--set epochs=3] [--output-dir D]
    python -m course_lib notebooks list

`run` executes the notebook with papermill into `runs/notebooks/<notebook>/<preset>/` (never over the
source), with an explicit kernel and, for each cell, a timeout; the notebook writes its `metrics.json` there.
Given another output folder, the notebook's training runs read back the identical runs that an execution in the
preset's own folder (JupyterLab, nbval) finished, instead of training them again (`course_lib.lab.reuse`):
`make demo` after `make test` trains nothing twice.
The batch runner (`python -m course_lib sweep`, `command: notebook`) crosses notebooks, presets and
parameter values and runs each through this command.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, model_validator

from course_lib.lab.reuse import FINISHED_RUNS_ENV
from course_lib.notebook import params as notebook_params
from course_lib.notebook.params import PRESETS, check_parameters, load_preset, notebook_names, notebook_path, presets_of
from course_lib.runtime.command_line import add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.runtime.repro import METRICS, progress_disabled
from course_lib.runtime.settings import Settings

KERNEL = "attention-lab"  # `make` installs it into the venv: the venv's python, then INSTALL_KERNEL
INSTALL_KERNEL = f"-m ipykernel install --sys-prefix --name {KERNEL} --display-name {KERNEL}"
RUN_KEYS = ("notebook", "preset", "kernel", "output_dir")  # what a run takes besides notebook parameters


def every_notebook(preset: str) -> list[str]:
    """What `notebook: all` in a notebook grid means: every notebook with this preset, in name order, those that
    tabulate the others' runs (a `runs_dir` parameter, as 06_results has) last, so that they find them done.
    A new notebook with its `params/<notebook>/` folder joins every such grid with no grid file edited."""
    names = [n for n in notebook_names() if preset in presets_of(n)]
    return sorted(names, key=lambda n: ("runs_dir" in load_preset(n, "smoke"), n))


# ----------------------------------------------------------------------------------------------
# Running a notebook in batch


class NotebookRun(Settings):
    """One notebook run of a sweep grid (`command: notebook`): notebook, preset, and parameter overrides, checked
    by the notebook's parameters model (`params.parameters_model`)."""

    notebook: str = Field(description="e.g. 03_cui2019_sparse_attention", json_schema_extra={"positional": True})
    preset: str = Field("smoke", description=f"one of {', '.join(PRESETS)} (default smoke)")
    kernel: str = Field(KERNEL, description=f"Jupyter kernel name (default {KERNEL})")
    output_dir: str | None = Field(None, description="default runs/notebooks/<notebook>/<preset>")
    parameters: dict[str, Any] = Field({}, description="the notebook's parameters that differ from its preset")

    @model_validator(mode="before")
    @classmethod
    def _checked_parameters(cls, values):
        """The notebook, its preset and parameters checked, the parameters as the notebook reads them."""
        if isinstance(values, dict) and isinstance(values.get("notebook"), str):
            load_preset(values["notebook"], values.get("preset", "smoke"))
            values = {**values, "parameters": check_parameters(values["notebook"], values.get("parameters") or {})}
        return values

    @classmethod
    def from_dict(cls, values: dict, others: str = "refuse") -> "NotebookRun":
        """Grid keys are the run's own (notebook, preset, kernel) or the notebook's parameters (a notebook reads
        every parameter, so `others`, which a fine-tuning config's from_dict takes, changes nothing)."""
        own = {k: v for k, v in values.items() if k in RUN_KEYS}
        return cls(**own, parameters={k: v for k, v in values.items() if k not in RUN_KEYS})

    def to_dict(self) -> dict:
        return {"notebook": self.notebook, "preset": self.preset, "kernel": self.kernel,
                "output_dir": self.output_dir, **self.parameters}

    def command_line(self) -> list[str]:
        args = [sys.executable, "-m", "course_lib", "notebooks", "run", self.notebook, f"--preset={self.preset}",
                f"--kernel={self.kernel}", f"--output-dir={self.output_dir}"]
        return args + [f"--set={key}={json.dumps(value)}" for key, value in self.parameters.items()]


class NotebookCommand(NotebookRun):
    """`notebooks run`'s options: a notebook run whose parameters come as `--set KEY=VALUE`, and a cell timeout."""

    parameters: dict[str, Any] = Field({}, description="replace one parameter of the preset (VALUE in YAML); "
                                       "repeatable", json_schema_extra={"flag": "--set", "repeat": True,
                                                                        "metavar": "KEY=VALUE"})
    cell_timeout: float | None = Field(None, gt=0, json_schema_extra={"metavar": "SECONDS"})

    @model_validator(mode="before")
    @classmethod
    def _set_words(cls, values):
        """`--set epochs=3 --set lr=5e-5`: the parameters, each value read as YAML."""
        words = values.get("parameters") if isinstance(values, dict) else None
        if isinstance(words, list):
            given = dict(parse_override(text) for text in words)
            if isinstance(values.get("notebook"), str):
                given = check_parameters(values["notebook"], given, "--set")  # the line names the option
            values = {**values, "parameters": given}
        return values


def parse_override(text: str) -> tuple[str, object]:
    """'epochs=3' or 'tasks=[sst2, rte]': the value is read as YAML, so it keeps its type."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"--set takes KEY=VALUE (VALUE in YAML, e.g. epochs=3 or tasks=[sst2, rte]), got {text!r}")
    try:
        return key.strip().replace("-", "_"), yaml.safe_load(value)
    except yaml.YAMLError:
        raise UsageError(f"--set {key}: {value!r} is not a YAML value") from None


def _default_folder(name: str, preset: str, out: Path) -> str | None:
    """Where the notebook writes this preset's runs when opened in JupyterLab or run by nbval (the preset's
    output_dir, read from notebooks/), if that is another folder and exists: its finished runs are read back
    rather than trained again where the configuration is identical (`course_lib.lab.reuse`)."""
    written = load_preset(name, preset).get("output_dir")
    folder = (notebook_params.NOTEBOOK_DIR / written).resolve() if written else None
    return str(folder) if folder is not None and folder != out and folder.is_dir() else None


@contextmanager
def _environment(name: str, value: str | None):
    """The variable set to value (unset for None) for the block, for the kernel it starts; then as it was."""
    before = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if before is not None:
            os.environ[name] = before


def run_notebook(notebook: str, preset: str = "smoke", overrides: dict | None = None,
                 output_dir: str | os.PathLike | None = None, kernel: str = KERNEL,
                 cell_timeout: float | None = None) -> Path:
    """Execute a notebook with papermill; return the folder holding the executed copy and metrics.json."""
    import papermill
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    name = notebook_path(notebook).stem
    params = {**load_preset(name, preset), **check_parameters(name, overrides or {}, "--set")}
    out = Path(output_dir or Path("runs/notebooks") / name / preset).resolve()
    params.update(preset=preset, output_dir=str(out))
    check_parameters(name, params)
    try:
        KernelSpecManager().get_kernel_spec(kernel)
    except NoSuchKernel:
        valid = sorted(KernelSpecManager().find_kernel_specs())
        raise UsageError(f"no Jupyter kernel named {kernel!r} (installed: {', '.join(valid)}); "
                         f"`{sys.executable} {INSTALL_KERNEL}` installs {KERNEL!r} into the venv "
                         f"(`make` runs it when it builds .venv), or pass --kernel python3") from None
    out.mkdir(parents=True, exist_ok=True)
    try:
        with _environment(FINISHED_RUNS_ENV, _default_folder(name, preset, out)):  # read by the kernel's runs
            papermill.execute_notebook(str(notebook_path(name)), str(out / f"{name}.ipynb"), parameters=params,
                                       kernel_name=kernel, cwd=str(notebook_params.NOTEBOOK_DIR),
                                       progress_bar=not progress_disabled(), execution_timeout=cell_timeout,
                                       log_output=False)
    except papermill.PapermillExecutionError as err:
        kind = UsageError if err.ename == "UsageError" else RuntimeError
        raise kind(f"{name} ({preset}) stopped in cell {err.exec_count}: {err.ename}: {err.evalue} "
                   f"(executed copy: {out / (name + '.ipynb')})") from None
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m course_lib notebooks", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.add_parser("list", help="the notebooks and their presets")
    run = commands.add_parser("run", help="execute one notebook with papermill")
    add_fields(run, NotebookCommand, ["notebook", "preset", "parameters", "output_dir", "kernel", "cell_timeout"],
               words=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_strict(argv)
        if args.command == "list":
            for name in notebook_names():
                print(f"{name:<40} presets: {', '.join(presets_of(name))}")
        elif args.command == "run":
            run = parsed(args, NotebookCommand)
            out = run_notebook(run.notebook, run.preset, run.parameters, run.output_dir, run.kernel, run.cell_timeout)
            print(json.dumps({"notebook": str(out / (notebook_path(args.notebook).stem + ".ipynb")),
                              "metrics": str(out / METRICS)}))
        else:
            raise UsageError("missing command (valid: list, run)")
        return 0

    def failed_run() -> int:
        try:
            return body()
        except RuntimeError as err:
            print(f"run failed: {err}", file=sys.stderr)
            return 1
    return report_errors(failed_run, "the executed copy so far is in the output folder; run it again")
