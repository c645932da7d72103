"""The assignment's Gradescope autograder (staff only): the zip that `assignment build OUT_DIR --gradescope FILE.zip`
writes beside the student copy, and the results.json it reports in.

Gradescope builds an image from the zip once, running its `setup.sh` as root, then runs `run_autograder` for each
submission, with the upload in /autograder/submission, and reads /autograder/results/results.json (the format:
https://gradescope-autograders.readthedocs.io/en/latest/specs/). The image has no copy of this repository, so the zip
carries what grading needs and no solution: the student copy's course_lib/ (stubs; without lab/, the layer above the
questions' code, which none of it may import), its assignment/manifest.json (questions, checks, points), and the
staff's grading files: assignment.py, submission.py, this file and the hidden checks. `run_autograder` runs
`assignment autograde`, which grades through `assignment.grade` as staff do locally: one code path, the same points.
"""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

from course_lib.runtime.errors import UsageError, choice_error

HIDDEN_VISIBILITIES = ("after_published", "after_due_date", "hidden")  # Gradescope's names; public checks: visible
GRADING_PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "safetensors", "accelerate", "entmax", "tqdm", "pyyaml",
                    "pydantic")
#   requirements.txt's packages that grading imports (the model, methods and checks; tests/test_gradescope.py checks
#   the list); the notebooks', the hub's and the lab's are left out, and the pretrained model is not needed
FROM_COPY, LEFT_OUT = ("course_lib/", "assignment/"), ("course_lib/lab/",)
TIMEOUT = 120.0  # seconds per question on Gradescope: the reference takes about 2

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the assignment's image: a venv at /autograder/venv holding the
# packages grading imports, pinned as the repository's requirements.txt pins them (run_autograder puts it on PATH).
set -euo pipefail
apt-get update -q
apt-get install -y -q python3 python3-venv python3-pip
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {{
    echo "setup.sh: numpy and scipy as pinned need Python 3.11 or newer: pick a base image that has it" >&2; exit 1; }}
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install -q --upgrade pip
# torch on its own line. Gradescope's pip index is PyPI, whose Linux torch wheel also pulls the CUDA libraries
# (gigabytes) that a CPU grader never uses; the CPU build comes from PyTorch's CPU wheel index, which this line
# reads when the zip was built with --torch-index (docs/gradescope.md).
/autograder/venv/bin/python -m pip install -q {torch}
/autograder/venv/bin/python -m pip install -q {others}
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission: it grades the upload in $AUTOGRADER_ROOT/submission with the grader's
# own checks, references and hidden checks, into $AUTOGRADER_ROOT/results/results.json (AUTOGRADER_ROOT: /autograder
# unless set). Elsewhere, set AUTOGRADER_ROOT to a folder laid out the same way (source/ holding this zip's files)
# and put a python3 with setup.sh's packages on PATH, or name it in AUTOGRADER_PYTHON.
set -euo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
if [ -x "$root/venv/bin/python3" ]; then PATH="$root/venv/bin:$PATH"; fi
cd "$root/source"
PYTHONPATH="$root/source" PYTHONDONTWRITEBYTECODE=1 exec "${{AUTOGRADER_PYTHON:-python3}}" \\
    -m course_lib.teaching.assignment autograde "$root" --hidden-visibility {visibility} --timeout {timeout:g}
"""


def pins(requirements: Path) -> dict[str, str]:
    """requirements.txt's `name==version` lines by lower-case name; the ones grading needs must all be there."""
    lines = [line.split("#")[0].strip() for line in requirements.read_text(encoding="utf-8").splitlines()]
    found = dict((line.split("==")[0].strip().lower(), line) for line in lines if "==" in line)
    missing = [name for name in GRADING_PACKAGES if name not in found]
    if missing:
        raise UsageError(f"{requirements} does not pin {missing[0]!r}, which grading needs "
                         f"(it pins: {', '.join(sorted(found))})")
    return {name: found[name] for name in GRADING_PACKAGES}


def check_options(zip_path: str, out_dir: str, hidden_visibility: str, torch_index: str | None) -> None:
    """Refuse a bad zip path, visibility or index in one line, before the student copy is written."""
    target, out = Path(zip_path).resolve(), Path(out_dir).resolve()
    if target.suffix != ".zip" or target.is_dir():
        raise UsageError(f"--gradescope {zip_path!r} must name a .zip file, e.g. runs/autograder.zip")
    if target.is_relative_to(out):
        raise UsageError(f"--gradescope {zip_path!r} is inside OUT_DIR {out_dir!r}: the zip holds the hidden checks, "
                         "so it must not go to students; write it beside the student copy")
    check_visibility(hidden_visibility)
    if torch_index is not None and not re.fullmatch(r"https?://\S+", torch_index):
        raise UsageError(f"--torch-index {torch_index!r} must be the URL of a pip index (http:// or https://)")


def check_visibility(hidden_visibility: str) -> None:
    if hidden_visibility not in HIDDEN_VISIBILITIES:
        raise choice_error("--hidden-visibility", hidden_visibility, HIDDEN_VISIBILITIES)


def scripts(requirements: Path, hidden_visibility: str, torch_index: str | None) -> dict[str, str]:
    """setup.sh and run_autograder, with the pins and the visibility of hidden checks written in."""
    pinned = pins(requirements)
    torch = pinned.pop("torch")
    if torch_index:  # the CPU index's build of the same version, and PyPI for the rest
        torch = f"--extra-index-url {torch_index} {torch}+cpu"
    setup = SETUP.format(torch=torch, others=" ".join(pinned.values()))
    return {"setup.sh": setup, "run_autograder": RUN_AUTOGRADER.format(visibility=hidden_visibility, timeout=TIMEOUT)}


def write_zip(zip_path: str | os.PathLike, student_copy: Path, root: Path, grader_files: tuple[str, ...],
              files: dict[str, str]) -> list[str]:
    """Write the autograder: `files` (setup.sh, run_autograder) at the top, the student copy's course_lib/ and
    manifest, and the grader's files from `root`. The same inputs give the same bytes. Returns the names in it."""
    from course_lib.runtime.repro import atomic_write

    entries = {name: (text.encode(), 0o755) for name, text in files.items()}
    for path in sorted(student_copy.rglob("*")):
        name = path.relative_to(student_copy).as_posix()
        if path.is_file() and name.startswith(FROM_COPY) and not name.startswith(LEFT_OUT):
            entries[name] = (path.read_bytes(), 0o644)
    entries.update({name: ((root / name).read_bytes(), 0o644) for name in grader_files})

    def write(f):
        with zipfile.ZipFile(f, "w") as archive:
            for name in sorted(entries):
                data, mode = entries[name]
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr, info.compress_type = (0o100000 | mode) << 16, zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
    atomic_write(zip_path, write)
    os.chmod(zip_path, 0o644)  # a file for staff to upload (the temporary file was private)
    return sorted(entries)


def results(report: dict, hidden_visibility: str, seconds: float) -> dict:
    """A grade report as Gradescope reads it: one test per check, named "q1a softmax_with_padding_mask", worth its
    points; public checks visible, hidden ones `hidden_visibility`; a failed one's output its one-line reason. The
    top-level output says where each question file came from, or why it was not graded."""
    tests = [{"name": f"{q['id']} {c['name']}", "score": c["points"] if c["passed"] else 0,
              "max_score": c["points"], "status": "passed" if c["passed"] else "failed",
              "visibility": hidden_visibility if c["hidden"] else "visible",
              "output": "passed" if c["passed"] else c["error"]}
             for q in report["questions"] for c in q["checks"]]
    files = [f["error"] or f"{path}: graded" + ("" if f["source"] == path else f" (your {f['source']})")
             for path, f in report["files"].items()]
    return {"score": sum(t["score"] for t in tests), "execution_time": round(seconds), "output": "\n".join(files),
            "stdout_visibility": "hidden", "tests": tests}


def cpus() -> int:
    """The cores this process may use: questions graded at once inside the autograder."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
