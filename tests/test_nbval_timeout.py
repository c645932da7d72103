"""nbval on a loaded machine: a cell whose idle message lags its reply must not fail the notebook.

On 2 shared cores `make test` failed notebook 01 with "Timeout of 5 seconds exceeded waiting for output":
nbval waits a fixed 5 s for each output message after a cell replies, then stops the kernel. The fixture
notebook below reproduces that lag on an idle machine: its first cell makes the kernel wait 7 s between
sending the reply and publishing the idle status (ipykernel's post_handler_hook runs in exactly that gap).
"""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LAG_S = 7  # more than nbval's own 5 s wait, far less than notebooks/conftest.py's NBVAL_OUTPUT_TIMEOUT

LATE_IDLE = f"""import time
kernel = get_ipython().kernel
restore = kernel.post_handler_hook
def late_idle():  # once: after this cell's reply, before its idle status
    restore()
    kernel.post_handler_hook = restore
    time.sleep({LAG_S})
kernel.post_handler_hook = late_idle
print("replied")"""


def _lagging_notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(LATE_IDLE), nbformat.v4.new_code_cell("print('next cell')")]
    path = folder / "lagging.ipynb"
    nbformat.write(nb, path)
    return path


def _nbval(path: Path, *plugins: str) -> subprocess.CompletedProcess:
    """pytest --nbval-lax on one notebook outside the repository, with the given plugins loaded, on a newcomer's
    machine: no data variable, downloads off (the repo's conftest once failed there on a notebook it did not know)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_DIR")} | {"HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(NOTEBOOKS), os.environ.get("PYTHONPATH")]))
    args = [x for plugin in plugins for x in ("-p", plugin)]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-current-env", "-o", "addopts=", *args, str(path)],
                          capture_output=True, text=True, cwd=path.parent, env=env, timeout=120)


@pytest.mark.slow  # two kernels and a 7 s lag: about 25 s on 2 idle cores
def test_repo_conftest_lets_nbval_wait_for_a_lagging_idle_message(tmp_path):
    """Without the repo's conftest nbval fails the lag (so the fixture reproduces it); with it, both cells pass."""
    notebook = _lagging_notebook(tmp_path)
    bare = _nbval(notebook)
    assert bare.returncode != 0 and "Timeout of 5 seconds exceeded waiting for output" in bare.stdout, bare.stdout
    patched = _nbval(notebook, "conftest")  # notebooks/conftest.py, found through PYTHONPATH
    assert patched.returncode == 0 and "2 passed" in patched.stdout, patched.stdout + patched.stderr
