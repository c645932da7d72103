"""The import contract of `course_lib`: layers import downwards only, and no modules import each other in a circle.

Each folder is one layer (STRUCTURE.md explains each), lowest first below; a module may import its own folder and
the ones below it. The modules at the package's root (the command line, the kernel, `__main__`, the package's
lazy `__init__`) are the top. Function-local imports count too: a late import hides a dependency from the reader,
it does not remove it. Nothing below `lab` imports the lab (grids, sweeps, collect, the GLUE zip).
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = (
    "runtime",  # the shared base: one-line errors, seeding, atomic writes, progress bars, OpenMP's wait policy,
    #   compile and trackers (the loop's options), the config framework, the registry type, a run folder's lock
    "model",  # plain PyTorch BERT, and the model folder it loads
    "fast",  # CPU kernels swapped into a model
    "readers",  # the files a preset reads, and what they hold
    "tasks",  # the task families and their presets
    "methods",
    "training",  # the loop, the jobs, and a finished run exported or predicting
    ("notebook", "teaching"),  # a notebook's parameter check and figures; the assignment and the CS224N project
    "lab",  # the research machinery: not the lesson
    "",  # the package's root: the command line, the kernel, __main__
)


def module_name(path: Path, package_dir: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (`from a import b`: a.b if that is a module)."""
    files = {module_name(p, package_dir): p for p in package_dir.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names}
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def layer(module: str) -> int:
    """The layer index of a module, by its folder alone (the package's root: ""); a folder in no layer is an error."""
    parts = module.split(".")
    folders = {name: index for index, names in enumerate(LAYERS)
               for name in ((names,) if isinstance(names, str) else names)}
    folder = parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in folders) else ""  # a folder's __init__
    if folder in folders:
        return folders[folder]
    raise AssertionError(f"{module} belongs to no layer: add its folder `{folder}` to LAYERS in {Path(__file__).name} "
                         f"and to STRUCTURE.md")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if layer(target) > layer(source))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative over nodes)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_layers_import_downwards_only():
    assert not upward_imports(import_graph(ROOT / "course_lib"))


def test_the_lesson_never_imports_the_lab():
    graph = import_graph(ROOT / "course_lib")
    lab = layer("course_lib.lab")
    assert not [f"{source} -> {target}" for source, targets in graph.items() for target in targets
                if layer(source) < lab <= layer(target)]
    assert any(name.startswith("course_lib.lab.") for name in graph)  # the rule has something to hold


def test_no_import_cycles():
    assert not cycles(import_graph(ROOT / "course_lib"))


def test_the_contract_catches_an_upward_import_and_a_cycle(tmp_path):
    copy = tmp_path / "course_lib"
    shutil.copytree(ROOT / "course_lib", copy, ignore=shutil.ignore_patterns("__pycache__", "assignment_refs"))
    bert = copy / "model" / "bert.py"
    bert.write_text(bert.read_text() + "\n\ndef _late():\n    from course_lib.training.loop import TrainingLoop\n")
    metrics = copy / "tasks" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\nfrom course_lib.tasks import batching\n")
    batching = copy / "tasks" / "batching.py"
    batching.write_text(batching.read_text() + "\nimport course_lib.tasks.metrics\n")
    graph = import_graph(copy)
    assert upward_imports(graph) == ["course_lib.model.bert -> course_lib.training.loop"]
    assert ["course_lib.tasks.batching", "course_lib.tasks.metrics"] in cycles(graph)


def test_a_module_outside_every_layer_is_named(tmp_path):
    copy = tmp_path / "course_lib"
    copy.mkdir()
    (copy / "__init__.py").write_text("")
    (copy / "helpers").mkdir()
    (copy / "helpers" / "tools.py").write_text("from course_lib import model\n")
    (copy / "model.py").write_text("")
    try:
        upward_imports(import_graph(copy))
    except AssertionError as err:
        assert "course_lib.helpers.tools belongs to no layer" in str(err)
    else:
        raise AssertionError("a module in no layer was accepted")
