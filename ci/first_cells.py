"""What each notebook's first cell (its imports) loads of course_lib: modules and lines, and whether any is the lab.

    python ci/first_cells.py             one row per notebook

The lesson promises that a notebook loads only what it teaches before its first derivation (at most
LINE_BUDGET lines, no `course_lib.lab` module); tests/test_notebooks.py holds it to that with this script.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE_BUDGET = 4500
REPORT = """
import json, sys
names = sorted(m for m in sys.modules if m == "course_lib" or m.startswith("course_lib."))
files = {m: sys.modules[m].__file__ for m in names if getattr(sys.modules[m], "__file__", None)}
lines = {m: sum(1 for _ in open(f, encoding="utf-8")) for m, f in files.items()}
print(json.dumps(lines))
"""


def first_cell(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def loaded_lines(notebook: Path) -> dict[str, int]:
    """{module: its lines} of the course_lib modules that the first cell loads, in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", first_cell(notebook) + "\n" + REPORT], cwd=notebook.parent,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    print("| notebook | modules | lines | lab modules |\n|---|---|---|---|")
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        lines = loaded_lines(notebook)
        lab = [m for m in lines if m.startswith("course_lib.lab")]
        print(f"| {notebook.stem} | {len(lines)} | {sum(lines.values())} | {', '.join(lab) or 'none'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
