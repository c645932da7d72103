"""The notebooks' contract: parameters cell = smoke preset, presets share one schema, bad parameters get one
line, and the batch runner (papermill through the sweep) resumes after a kill. nbval runs the notebooks
themselves (pyproject's addopts); here a tiny fixture notebook shows what nbval catches."""
import ast
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml

from course_lib.lab import notebooks
from course_lib.lab.reuse import FINISHED_RUNS_ENV
from course_lib.notebook import params as notebook_params
from course_lib.notebook.params import Notebook, check_parameters, load_preset, notebook_names, presets_of
from course_lib.runtime.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
NAMES = notebook_names()


def _read(name: str):
    return nbformat.read(notebook_params.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)


def _parameters_cell(nb) -> dict:
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged 'parameters'"
    values = {}
    for node in ast.parse(cells[0].source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, "the parameters cell holds assignments only"
        values[node.targets[0].id] = ast.literal_eval(node.value)  # literals only
    return values


def test_every_notebook_is_found():
    assert "00_bert_from_scratch" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_parameters_cell_is_the_smoke_preset(name):
    assert _parameters_cell(_read(name)) == load_preset(name, "smoke")


@pytest.mark.parametrize("name", NAMES)
def test_presets_share_the_smoke_schema(name):
    assert presets_of(name) == ["smoke", "cpu", "paper"]
    smoke = load_preset(name, "smoke")
    for preset in ("cpu", "paper"):
        values = load_preset(name, preset)
        assert sorted(values) == sorted(smoke), preset
        assert values["preset"] == preset
        check_parameters(name, values)


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_is_read_by_the_notebook(name):
    """Each section builds its config from the parameters by name (`FinetuneConfig(lr=p.lr, ...)`): a parameter
    no cell reads would be a setting a user changes to no effect. `preset` and `output_dir` the notebook's
    `Notebook` reads itself (the results file)."""
    code = "\n".join(c.source for c in _read(name).cells if c.cell_type == "code")
    read = set(re.findall(r"\bp\.(\w+)", code)) | {"preset", "output_dir"}
    assert sorted(set(load_preset(name, "smoke")) - read) == []


@pytest.mark.parametrize("name", NAMES)
def test_notebook_reads_in_the_house_order(name):
    nb = _read(name)
    first, code = nb.cells[0].source, [c.source for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown" and "Learning goals" in first and "Runs in about" in first
    assert f'Notebook("{name}", globals())' in code[0]
    assert any("nb.parameters(globals())" in src for src in code)
    assert any("nb.save_results(" in src for src in code)
    assert any("NBVAL_CHECK_OUTPUT" in src for src in code), "at least one regression-checked cell"
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "## Summary" in prose and "## Exercises" in prose
    assert not any(line.startswith("class ") for src in code for line in src.splitlines()), \
        "classes belong in course_lib"
    assert nb.metadata["kernelspec"]["name"] == notebooks.KERNEL


def test_unknown_and_ill_typed_parameters_are_one_line_errors(tmp_path):
    name = "00_bert_from_scratch"
    namespace = {"x_before": 1}
    nb = Notebook(name, namespace)
    good = {**load_preset(name, "smoke"), "output_dir": str(tmp_path)}  # the preset's is relative to notebooks/
    with pytest.raises(UsageError, match=r"unknown 00_bert_from_scratch option 'epoch' .*valid: .*epochs"):
        nb.parameters({**namespace, **good, "epoch": 3})
    with pytest.raises(UsageError, match=r"00_bert_from_scratch.epochs must be int or None, got '3' \(str\)"):
        nb.parameters({**namespace, **good, "epochs": "3"})
    with pytest.raises(UsageError, match=r"unknown preset 'fast' \(valid: cpu, paper, smoke\)"):
        nb.parameters({**namespace, **good, "preset": "fast"})
    with pytest.raises(UsageError, match="parameter 'seed' is not set"):
        nb.parameters({**namespace, **{k: v for k, v in good.items() if k != "seed"}})
    p = nb.parameters({**namespace, **good, "lr": 1})  # an int where a float is expected is fine
    assert p.lr == 1


@pytest.mark.parametrize("argv, message", [
    (["run", "00_bert_from_scratch", "--preset", "fast"], "unknown preset for 00_bert_from_scratch 'fast' (valid: cpu, paper, smoke)"),
    (["run", "00_bert", "--preset", "smoke"], "unknown notebook '00_bert' (valid: "),
    (["run", "00_bert_from_scratch", "--set", "epochs=two"], "--set: 00_bert_from_scratch.epochs must be int or None, got 'two' (str)"),
    (["run", "00_bert_from_scratch", "--set", "epoch=2"], "--set: unknown 00_bert_from_scratch option 'epoch' (valid: "),
    (["run", "00_bert_from_scratch", "--set", "epochs"], "--set takes KEY=VALUE"),
    (["run", "00_bert_from_scratch", "--kernel", "no-such-kernel"], "no Jupyter kernel named 'no-such-kernel'"),
])
def test_runner_rejects_bad_input_before_starting_a_kernel(argv, message, capsys):
    assert notebooks.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


# ----------------------------------------------------------------------------------------------
# A fixture notebook: seconds per run, so the runner, the sweep and nbval can be exercised for real

TINY = "00_tiny"
TINY_CELLS = [
    ("markdown", "# Tiny\n\nLearning goals: none. Runs in about 1 s.\n\n## Summary\n\n## Exercises"),
    ("code", f'from course_lib.notebook.params import Notebook\nnb = Notebook("{TINY}", globals())'),
    ("parameters", 'preset = "smoke"  # which preset\nx = 2  # the input\nnap = 0.0  # seconds to sleep\n'
                   'output_dir = "out"  # results'),
    ("code", "import time\np = nb.parameters(globals())\ntime.sleep(p.nap)"),
    ("code", "# NBVAL_CHECK_OUTPUT\nassert p.x * p.x == p.x ** 2\nprint('square', p.x ** 2)"),
    ("code", 'saved = nb.save_results({"square": p.x ** 2})'),
]


@pytest.fixture()
def tiny_notebooks(tmp_path, monkeypatch):
    folder = tmp_path / "notebooks"
    (folder / "params" / TINY).mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    for kind, src in TINY_CELLS:
        cell = nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
        if kind == "parameters":
            cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    nbformat.write(nb, folder / f"{TINY}.ipynb")
    for preset in ("smoke", "cpu", "paper"):
        (folder / "params" / TINY / f"{preset}.yaml").write_text(
            yaml.safe_dump({"preset": preset, "x": 2, "nap": 0.0, "output_dir": "out"}))
    monkeypatch.setattr(notebook_params, "NOTEBOOK_DIR", folder)
    monkeypatch.setenv("ATTENTION_LAB_NOTEBOOKS", str(folder))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return folder


@pytest.mark.slow
def test_sweep_of_notebooks_resumes_after_a_kill_without_redoing_finished_runs(tiny_notebooks, tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"command": "notebook", "base": {"notebook": TINY, "kernel": "python3",
                                                                      "nap": 4.0},
                                    "grid": {"x": [1, 2, 3]}, "gpu_hours": {TINY: 0.5}}))
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "course_lib", "sweep", str(grid), "--output-dir", str(out)]
    dry = subprocess.run(cmd + ["--dry-run"], capture_output=True, text=True, cwd=ROOT)
    assert dry.returncode == 0 and "3 runs: 0 complete, 0 failed, 3 todo" in dry.stdout
    assert "estimated GPU hours (the grid file's estimate, one GPU): 1.5" in dry.stdout

    sweep = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    first = out / "x=1" / "metrics.json"
    deadline = time.monotonic() + 120
    while not first.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    assert first.exists(), "the first notebook run did not finish within 120 s"
    assert not (out / "x=3" / "metrics.json").exists()

    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 already complete" in done.stdout or "2 already complete" in done.stdout
    for x in (1, 2, 3):
        result = json.loads((out / f"x={x}" / "metrics.json").read_text())
        assert result["status"] == "complete" and result["results"] == {"square": x * x}
        assert (out / f"x={x}" / f"{TINY}.ipynb").exists()  # the executed copy, never over the source
    assert json.loads((out / "x=1" / "run.json").read_text())["attempt"] == 1  # not redone
    assert (out / "results.md").exists()


def test_a_run_elsewhere_points_its_kernel_at_the_presets_own_folder_of_finished_runs(tiny_notebooks, tmp_path,
                                                                                     monkeypatch):
    """The kernel papermill starts inherits the variable (`course_lib.lab.reuse` reads it); only while the
    notebook runs, only for another folder than the preset's own, and only when that folder exists."""
    import papermill
    seen = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: seen.append(os.environ.get(FINISHED_RUNS_ENV)))
    monkeypatch.delenv(FINISHED_RUNS_ENV, raising=False)
    own = tiny_notebooks / "out"  # the tiny presets' output_dir, read from the notebooks' folder
    notebooks.run_notebook(TINY, "smoke", output_dir=tmp_path / "elsewhere", kernel="python3")
    own.mkdir()
    notebooks.run_notebook(TINY, "smoke", output_dir=tmp_path / "elsewhere", kernel="python3")
    notebooks.run_notebook(TINY, "smoke", output_dir=own, kernel="python3")
    assert seen == [None, str(own.resolve()), None] and FINISHED_RUNS_ENV not in os.environ


@pytest.mark.slow
def test_nbval_fails_when_a_checked_output_or_a_check_changes(tiny_notebooks, tmp_path):
    """What `make test` relies on: a changed checked output, or a failing assert in a check cell, fails nbval."""
    notebooks.run_notebook(TINY, "smoke", output_dir=tmp_path / "executed", kernel="python3")
    executed = tmp_path / "executed" / f"{TINY}.ipynb"

    def nbval(path: Path) -> int:
        env = {**os.environ, "CI": "true"}
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                               "--nbval-current-env", "-o", "addopts=", str(path)],
                              capture_output=True, text=True, cwd=path.parent, env=env).returncode

    nb = nbformat.read(executed, as_version=4)
    (tmp_path / "executed" / "out").mkdir(exist_ok=True)
    assert nbval(executed) == 0
    changed = nbformat.read(executed, as_version=4)
    check = next(c for c in changed.cells if "NBVAL_CHECK_OUTPUT" in c.source)
    check.outputs[0]["text"] = "square 5\n"
    nbformat.write(changed, tmp_path / "executed" / "changed.ipynb")
    assert nbval(tmp_path / "executed" / "changed.ipynb") != 0
    broken = nbformat.read(executed, as_version=4)
    check = next(c for c in broken.cells if "NBVAL_CHECK_OUTPUT" in c.source)
    check.source = check.source.replace("p.x ** 2\nprint", "p.x ** 3\nprint")
    nbformat.write(broken, tmp_path / "executed" / "broken.ipynb")
    assert nbval(tmp_path / "executed" / "broken.ipynb") != 0
    assert nb.cells  # the executed copy is a real notebook


@pytest.mark.parametrize("grid, runs", [("notebooks_smoke", 7), ("notebooks_cpu", 7), ("notebooks_paper", 7)])
def test_notebook_grids_expand_and_dry_run(grid, runs, tmp_path, capsys):
    """The paper grid cannot run here (no GPU), but every run must validate and the dry run must add up hours."""
    from course_lib.lab import sweep

    path = ROOT / "ci" / "grids" / f"{grid}.yaml"
    expanded = sweep.load_grid(path, tmp_path)
    assert len(expanded) == runs and {r.config.notebook for r in expanded} <= set(NAMES)
    assert sweep.sweep(path, tmp_path, dry_run=True) == 0
    out = capsys.readouterr().out
    assert f"{runs} runs: 0 complete, 0 failed, {runs} todo" in out
    if grid == "notebooks_paper":
        hours = yaml.safe_load(path.read_text())["gpu_hours"]
        assert f"estimated GPU hours (the grid file's estimate, one GPU): {sum(hours.values()):.1f}" in out
        assert all(r.config.preset == "paper" for r in expanded)


@pytest.mark.parametrize("name", NAMES)
def test_a_notebooks_first_cell_loads_the_lesson_only(name):
    """The first cell holds the imports a notebook's derivations use: none of the lab (grids, the collector, the
    benchmarks), which the cell that runs the experiment imports, and no more than LINE_BUDGET lines of
    course_lib in all (every task family, the sweep and the collector were over 10,000). `ci/first_cells.py`
    prints the counts."""
    spec = importlib.util.spec_from_file_location("first_cells", ROOT / "ci" / "first_cells.py")
    first_cells = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(first_cells)
    loaded = first_cells.loaded_lines(notebook_params.NOTEBOOK_DIR / f"{name}.ipynb")
    assert "course_lib.notebook.params" in loaded  # the cell ran: it makes the notebook's `Notebook`
    assert not [m for m in loaded if m.startswith("course_lib.lab")]
    assert sum(loaded.values()) <= first_cells.LINE_BUDGET, sorted(loaded.items(), key=lambda kv: -kv[1])[:5]
