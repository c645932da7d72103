"""pytest settings for running the notebooks under nbval (`make test`, or `pytest notebooks/NAME.ipynb`)."""
# nbval waits this long for each output message of a cell that has already replied. Its own value, a fixed
# 5 s with no option to change it, is too short on 2 shared cores: the idle message can lag a long
# training cell's reply, and nbval then stops the kernel and fails every later cell of the notebook.
NBVAL_OUTPUT_TIMEOUT = 120.0


def pytest_collection_modifyitems(config, items):
    """Give nbval's cells NBVAL_OUTPUT_TIMEOUT (failing loudly if nbval stops keeping it in `output_timeout`).

    Nothing is skipped: every notebook's data is in the repository's data/ (or its variable), and the hook
    looks at no notebook's name, so a notebook it does not know (a test's own) runs like the others.

    A collection hook, not a fixture: nbval's cells are not Python test functions and take no fixtures. It sits
    beside the notebooks, so pytest loads it for `make test` and for a run given only notebook paths alike.
    """
    for item in items:
        if not type(item).__module__.startswith("nbval"):
            continue
        assert isinstance(getattr(item, "output_timeout", None), int | float), (
            f"nbval {type(item).__name__} has no numeric output_timeout any more: "
            "find where this nbval version keeps its output wait and update notebooks/conftest.py")
        item.output_timeout = max(item.output_timeout, NBVAL_OUTPUT_TIMEOUT)
