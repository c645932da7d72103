"""pytest settings for running the notebooks under nbval (`make test`, or `pytest notebooks/NAME.ipynb`)."""
import functools
import os
from pathlib import Path

import pytest

# nbval waits this long for each output message of a cell that has already replied. Its own value, a fixed
# 5 s with no option to change it, is too short on 2 shared cores: the idle message can lag a long
# training cell's reply, and nbval then stops the kernel and fails every later cell of the notebook.
NBVAL_OUTPUT_TIMEOUT = 120.0


def glue_unavailable() -> str | None:
    """Why the GLUE data cannot be had here, or None: no GLUE_DIR folder, and downloads are switched off."""
    folder = os.environ.get("GLUE_DIR")
    if folder and Path(folder).is_dir():
        return None
    offline = any(os.environ.get(name, "0") not in ("", "0") for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    if not offline:
        return None  # the notebooks download nyu-mll/glue through `datasets`
    return ("needs GLUE data: set GLUE_DIR to a folder in the GLUE layout, or allow downloads "
            "(HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0)")


@functools.cache
def needs_glue(notebook: str) -> bool:
    """A notebook fine-tunes on GLUE when its smoke preset names a task (00-03, 05); 04 falls back to generated
    text and 06 only reads finished runs."""
    from course_lib.experiments.notebooks import load_preset

    return bool({"task", "tasks"} & set(load_preset(notebook, "smoke")))


def pytest_collection_modifyitems(config, items):
    """Give nbval's cells NBVAL_OUTPUT_TIMEOUT (failing loudly if nbval stops keeping it in `output_timeout`),
    and skip, with the reason, the notebooks that need GLUE data where there is none.

    A collection hook, not a fixture: nbval's cells are not Python test functions and take no fixtures. It sits
    beside the notebooks, so pytest loads it for `make test` and for a run given only notebook paths alike.
    """
    missing = glue_unavailable()
    for item in items:
        if not type(item).__module__.startswith("nbval"):
            continue
        assert isinstance(getattr(item, "output_timeout", None), int | float), (
            f"nbval {type(item).__name__} has no numeric output_timeout any more: "
            "find where this nbval version keeps its output wait and update notebooks/conftest.py")
        item.output_timeout = max(item.output_timeout, NBVAL_OUTPUT_TIMEOUT)
        if missing and needs_glue(Path(str(item.fspath)).stem):
            item.add_marker(pytest.mark.skip(reason=missing))
