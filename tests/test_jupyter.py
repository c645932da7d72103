"""What a student sees in JupyterLab: the attention-lab kernel (course_lib.kernel), JupyterLab's defaults for
the course environment, progress bars whose saved form is their last state, and figures scaled to what they show."""
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course_lib.notebook import plots
from course_lib.notebook.params import NOTEBOOK_DIR, notebook_names
from course_lib import kernel
from course_lib.runtime.openmp import SPIN_COUNT, WAIT_POLICY

LAB_SCHEMAS = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"


def test_install_writes_the_kernel_spec_and_valid_lab_overrides(tmp_path):
    spec_file, overrides_file = kernel.install(prefix=str(tmp_path))
    spec = json.loads(spec_file.read_text())
    assert spec["display_name"] == "attention-lab" and spec["argv"][0] == sys.executable
    assert spec["argv"][-4:] == ["-m", "course_lib.kernel", "-f", "{connection_file}"]
    overrides = json.loads(overrides_file.read_text())
    assert overrides_file == tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    for plugin, settings in overrides.items():  # every key is a real setting of the installed JupyterLab
        package, name = plugin.split(":")
        schema = json.loads((LAB_SCHEMAS / package / f"{name}.json").read_text())["properties"]
        for key, value in settings.items():
            allowed = [option["const"] for option in schema[key].get("oneOf", [])]
            assert key in schema and (not allowed or value in allowed), (plugin, key, value)
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"  # never asks


def run_in_kernel(*cells: str) -> list:
    """Execute cells in the installed attention-lab kernel, as JupyterLab would, for a user who set nothing
    about threads and is not on CI (so bars show); return the notebook's saved outputs per cell."""
    if "attention-lab" not in __import__("jupyter_client.kernelspec").kernelspec.find_kernel_specs():
        pytest.fail("the attention-lab kernel is not installed: run `make install`")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY, SPIN_COUNT, "CI", "TQDM_DISABLE")}
    NotebookClient(nb, kernel_name="attention-lab", timeout=300).execute(env=env)
    return [cell.outputs for cell in nb.cells]


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def as_jupyterlab_shows(outputs: list) -> list:
    """A cell's outputs as JupyterLab's output area holds them, opening the file or live: consecutive stream outputs
    of one name (stdout, stderr) are one output."""
    merged = []
    for output in outputs:
        last = merged[-1] if merged else None
        if last is not None and output["output_type"] == last["output_type"] == "stream" and \
                output["name"] == last["name"]:
            merged[-1] = {**last, "text": last["text"] + output["text"]}
        else:
            merged.append(output)
    return merged


def test_a_saved_notebook_shows_each_bar_as_it_ended_and_the_kernel_waits_passively():
    """Reopened without the kernel, a widget view saved in an output shows "Error displaying widget": a finished bar
    is saved as its last line of text, a transient one as nothing, and a cell's outputs do not grow with its bars
    (JupyterLab folds past 50). Read here as JupyterLab reads the file."""
    training, spin = run_in_kernel(
        "from course_lib.runtime.repro import progress\n"
        "for epoch in range(12):\n"
        "    for _ in progress(range(64), desc=f'epoch {epoch}'):\n"
        "        pass\n"
        "    for _ in range(4):\n"
        "        for _ in progress(range(8), desc='evaluating', leave=False): pass\n"
        "    print(f'epoch {epoch}: dev accuracy 0.5')",
        "from course_lib.runtime.openmp import idle_spin_seconds\nprint(idle_spin_seconds())")
    training = as_jupyterlab_shows(training)
    assert not [o for o in training if WIDGET_VIEW in o.get("data", {})]  # no view that can dangle
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in training)
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 24 and lines[0].startswith("epoch 0: 100%") and "64/64" in lines[0]  # not "0/64"
    assert lines[1] == "epoch 0: dev accuracy 0.5" and lines[-1] == "epoch 11: dev accuracy 0.5"  # in order
    assert "evaluating" not in text  # leave=False: gone once done
    assert len(training) == 2, [o.get("output_type") for o in training]  # 12 bars, 48 transient ones, 12 prints:
    #   the bars' one (emptied) slot and the printed lines
    assert float(spin[0]["text"]) < 0.1  # the kernel spec started course_lib before the cell imported torch


def test_token_scores_are_coloured_over_their_own_range():
    """After a short run SSA's scores may all lie in 0.97-0.99: on a 0-1 scale that is one flat block."""
    scores = [0.971, 0.985, 0.990, 0.978]
    mesh = plots.token_scores(["a", "fine", "film", "."], scores).collections[0]
    assert (mesh.norm.vmin, mesh.norm.vmax) == (0.971, 0.990)
    colours = {tuple(c) for c in mesh.get_facecolors()}
    assert len(colours) == len(scores)  # every token its own shade
    assert [t.get_text() for t in mesh.axes.texts] == ["0.971", "0.985", "0.990", "0.978"]
    shared = plots.token_scores(["a"], [0.98], vrange=plots.colour_range(scores, [0.5])).collections[0]
    assert (shared.norm.vmin, shared.norm.vmax) == (0.5, 0.990)


@pytest.mark.parametrize("name", notebook_names())
def test_a_committed_notebook_reopens_without_a_dangling_widget_or_a_folded_output(name):
    """What a student sees opening the repository's notebook: no widget view the file keeps no state for (JupyterLab
    shows "Error displaying widget"), no cell past JupyterLab's 50 outputs (it folds the rest, the run's last lines)."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    saved_state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for index, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        shown = as_jupyterlab_shows(cell.outputs)
        views = [o["data"][WIDGET_VIEW]["model_id"] for o in shown if WIDGET_VIEW in o.get("data", {})]
        assert not [v for v in views if v not in saved_state], (name, index)
        assert len(shown) <= 50, (name, index, len(shown))
