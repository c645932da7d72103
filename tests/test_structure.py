"""The repository's maps against the files they name, so that the docs cannot drift from the code.

- STRUCTURE.md's file table: every path it lists exists, and every module of `course_lib/` is listed
  (a folder's `__init__.py` as the folder; the package's own `__init__.py` excepted). In the student copy, which
  `python -m course_lib assignment build` makes without the staff-only files, the rows marked "staff only"
  may name files that are absent.
- README.md stays a newcomer's guide (measurements live in results/): at most 160 lines.
- Every relative markdown link in README.md, STRUCTURE.md and results/*.md points at a file that exists.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDENT_COPY = not (ROOT / "course_lib" / "teaching" / "assignment.py").exists()
README_MAX_LINES = 160
NOT_LISTED = {"course_lib/"}  # the package itself (a layer's __init__.py is listed as its folder)


def file_table(text: str) -> list[tuple[list[str], str]]:
    """The rows of the table whose first header cell is `file`: (paths of the first cell, description).

    The first path of a cell is relative to the repository root. A cell may name several, e.g.
    "`course_lib/tasks/glue.py`, `metrics.py`": a later name without a slash is taken relative to the folder of the
    name before it. A folder keeps its trailing slash (`tests/hidden/`).
    """
    rows, in_table = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            in_table = False
        elif not in_table:
            in_table = cells[0] == "file"
        elif not set(cells[0]) <= set("-: "):  # skip the |---| line
            paths = []
            for name in re.findall(r"`([^`]+)`", cells[0]):
                if paths and "/" not in name.rstrip("/"):  # `metrics.py` after `course_lib/tasks/glue.py`
                    name = f"{paths[-1].rstrip('/').rpartition('/')[0]}/{name}".lstrip("/")
                paths.append(name)
            rows.append((paths, cells[1] if len(cells) > 1 else ""))
    return rows


def markdown_links(text: str) -> list[str]:
    """Relative link targets of [text](target), outside fenced code, without their #anchor."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    targets = [t.split("#", 1)[0] for t in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)]
    return [t for t in targets if t and not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


@pytest.fixture(scope="module")
def structure_rows():
    rows = file_table((ROOT / "STRUCTURE.md").read_text(encoding="utf-8"))
    assert rows, "STRUCTURE.md has no table whose first header cell is 'file'"
    return rows


def test_file_table_parser_resolves_names_relative_to_the_cell_before():
    text = "intro\n\n| file | what |\n|---|---|\n| `course_lib/tasks/glue.py`, `metrics.py` | data |\n| `tests/hidden/` | x |\n\n" \
           "| id | what |\n|---|---|\n| `q1a` | not a file |\n"
    assert file_table(text) == [(["course_lib/tasks/glue.py", "course_lib/tasks/metrics.py"], "data"), (["tests/hidden/"], "x")]
    assert file_table("| file | what |\n|---|---|\n| `Makefile`, `README.md` | top |\n") == [
        (["Makefile", "README.md"], "top")]


def test_every_path_in_structure_md_exists(structure_rows):
    missing = [path for paths, what in structure_rows for path in paths
               if not (ROOT / path).exists() and not (STUDENT_COPY and what.startswith("staff only"))]
    assert not missing, f"STRUCTURE.md lists files that do not exist: {', '.join(missing)}"


def test_every_course_lib_module_is_in_structure_md(structure_rows):
    listed = {path for paths, _ in structure_rows for path in paths}
    modules = {(p.parent.relative_to(ROOT).as_posix() + "/") if p.name == "__init__.py" else p.relative_to(ROOT).as_posix()
               for p in (ROOT / "course_lib").rglob("*.py")} - NOT_LISTED
    unlisted = sorted(modules - listed)
    assert not unlisted, f"course_lib modules missing from STRUCTURE.md's file table: {', '.join(unlisted)}"
    assert "course_lib/teaching/assignment_refs/" in listed, "STRUCTURE.md does not list course_lib/teaching/assignment_refs/"
    assert "docs/methods.md" in listed, "STRUCTURE.md does not list docs/methods.md"


def test_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move measurements to results/")


@pytest.mark.parametrize("doc", ["README.md", "STRUCTURE.md"] + sorted(
    p.relative_to(ROOT).as_posix() for p in (ROOT / "results").glob("*.md")))
def test_relative_links_point_at_files_that_exist(doc):
    path = ROOT / doc
    broken = [t for t in markdown_links(path.read_text(encoding="utf-8")) if not (path.parent / t).exists()]
    assert not broken, f"{doc} links to files that do not exist: {', '.join(broken)}"
