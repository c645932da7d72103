"""Assignment mode (staff only): the student release generated from the reference code, and its autograder.

    python -m course_lib assignment build OUT_DIR                 the student copy, with assignment/manifest.json
        [--gradescope FILE.zip [--hidden-visibility after_published] [--torch-index URL]]   and Gradescope's autograder
    python -m course_lib assignment grade STUDENT_DIR --report report.json [--jobs 2] [--timeout 300]
    python -m course_lib assignment autograde ROOT                what the autograder's run_autograder runs
    python -m course_lib assignment make-references               rewrite assignment_refs/references.safetensors
    python -m course_lib assignment manifest                      print the questions, points and checks

Conventions. In the reference, each solution sits between a `### BEGIN SOLUTION` line and an
`### END SOLUTION` line (indented like the code) inside a function whose docstring starts with the question
id, e.g. `[q1a]`, followed by numbered hints and shapes. `build` copies the repository's files (git-tracked
plus untracked-but-not-ignored, so runs/, .venv and caches stay out; no git history) and replaces every region
with `raise NotImplementedError("q1a: <title>")`, keeping signature, docstring and hints. Question titles live
in `public_checks.QUESTIONS`, points in the checks (`@check(question, points)`). Hidden checks live in
tests/hidden/; they, the grading code (this file, submission.py, gradescope.py) and its tests are not copied.

`grade` grades a submission (a student copy, or only its files that hold questions: submission.py) put on the
stub copy's other files, each question in its own process, with that copy as working directory and first on
sys.path, but with the grader's own check code, reference outputs and hidden checks: a crash or an endless
loop costs that question only, and an edited checks file in the student copy changes nothing. Inside the Gradescope
autograder (gradescope.py), where this file runs from a built copy, the stub copy and the questions are the
stored ones; in the reference they are built from it. `autograde` is `grade` with Gradescope's paths and format.
"""
from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from course_lib.runtime.errors import UsageError
from course_lib.runtime.settings import Settings
from course_lib.teaching import check, submission
from course_lib.teaching.gradescope import HIDDEN_VISIBILITIES

ROOT = Path(__file__).resolve().parents[2]
GRADING_CODE = ("course_lib/teaching/assignment.py", "course_lib/teaching/gradescope.py",
                "course_lib/teaching/submission.py")
GRADER_FILES = (*GRADING_CODE, "tests/hidden/hidden_checks.py")  # what the autograder adds to the student copy
STAFF_ONLY = (*GRADER_FILES, "tests/hidden/", "tests/test_assignment.py", "tests/test_gradescope.py")
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
QUESTION_ID = re.compile(r"\[(q\d+[a-z])\]")
MANIFEST = "assignment/manifest.json"


@dataclass(frozen=True)
class Region:
    path: str  # relative to the repository root
    function: str  # qualified name, e.g. SSAClassifier.pool
    question: str
    begin: int  # 0-based line numbers of the two markers
    end: int
    indent: str


def _functions(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of every function, methods as Class.method."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not isinstance(child, ast.ClassDef):
                    found.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)
    visit(tree, "")
    return found


def find_regions(path: str, text: str) -> list[Region]:
    """The solution regions of one file, checked: paired markers, each inside a function with a `[qNx]` docstring."""
    lines = text.splitlines()
    marks = [(i, line.strip()) for i, line in enumerate(lines) if line.strip() in (BEGIN, END)]
    if not marks:
        return []
    functions = _functions(ast.parse(text, filename=path))
    regions = []
    for k in range(0, len(marks), 2):
        pair = marks[k:k + 2]
        if [m for _, m in pair] != [BEGIN, END]:
            raise UsageError(f"{path}:{pair[0][0] + 1}: {pair[0][1]!r} without its partner ({BEGIN!r} ... {END!r})")
        (begin, _), (end, _) = pair
        indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
        body = [line for line in lines[begin + 1:end] if line.strip()]
        if not lines[end].startswith(indent + END) or not all(line.startswith(indent) for line in body):
            raise UsageError(f"{path}:{begin + 1}: the region's lines must be indented at least as its markers")
        inside = [(name, node) for name, node in functions if node.body[0].end_lineno < begin + 1 < node.end_lineno]
        if not inside:
            raise UsageError(f"{path}:{begin + 1}: a solution region must sit in a function body, after its docstring")
        name, node = inside[-1]  # the innermost
        match = QUESTION_ID.match(ast.get_docstring(node) or "")
        if not match:
            raise UsageError(f"{path}:{begin + 1}: the docstring of {name} must start with a question id like [q1a]")
        regions.append(Region(path, name, match.group(1), begin, end, indent))
    return regions


def student_source(text: str, regions: list[Region], titles: dict[str, str], keep=()) -> str:
    """The file as students get it: each region becomes one raise, except questions in `keep` (solution, no
    markers; the tests use it to restore a single answer)."""
    lines = text.splitlines(keepends=True)
    for r in sorted(regions, key=lambda r: r.begin, reverse=True):
        if r.question in keep:
            lines[r.begin:r.end + 1] = lines[r.begin + 1:r.end]
        else:
            lines[r.begin:r.end + 1] = [f'{r.indent}raise NotImplementedError("{r.question}: {titles[r.question]}")\n']
    return "".join(lines)


def repository_files() -> list[str]:
    """Tracked and untracked-but-not-ignored files, sorted, minus the staff-only ones."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                 cwd=ROOT, capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as err:
        raise UsageError(f"the reference {ROOT} must be a git checkout (git ls-files failed: {err})") from None
    paths = sorted({p for p in listing.split("\0") if p})
    return [p for p in paths if (ROOT / p).is_file() and not p.startswith(STAFF_ONLY)]


def all_regions() -> list[Region]:
    return [r for path in repository_files() if path.endswith(".py")
            for r in find_regions(path, (ROOT / path).read_text(encoding="utf-8"))]


def manifest() -> dict:
    """Questions in order: title, points, the functions students write and the checks that grade them."""
    titles = check.load_checks(hidden=True)
    regions = all_regions()
    unknown = sorted(({r.question for r in regions} | {c.question for c in check.CHECKS}) - set(titles))
    if unknown:
        raise UsageError(f"question {unknown[0]!r} has a region or check but no title in public_checks.QUESTIONS")
    questions = []
    for qid, title in titles.items():
        checks = [{"name": c.name, "points": c.points, "hidden": c.hidden} for c in check.CHECKS if c.question == qid]
        functions = [f"{r.path}:{r.function}" for r in regions if r.question == qid]
        if not functions or not any(not c["hidden"] for c in checks):
            raise UsageError(f"question {qid} needs at least one solution region and one public check")
        questions.append({"id": qid, "title": title, "points": sum(c["points"] for c in checks),
                          "functions": list(dict.fromkeys(functions)), "checks": checks})
    return {"assignment": "attention-lab", "total_points": sum(q["points"] for q in questions),
            "check_command": "python -m course_lib check QUESTION_ID (or all)", "questions": questions}


def write_copy(out: Path, prefix: str = "") -> dict:
    """Write the student copy's files whose paths start with `prefix` into out; return the manifest."""
    info = manifest()
    titles = {q["id"]: q["title"] for q in info["questions"]}
    by_file: dict[str, list[Region]] = {}
    for r in all_regions():
        by_file.setdefault(r.path, []).append(r)
    for path in (p for p in repository_files() if p.startswith(prefix)):
        source = ROOT / path
        data = source.read_bytes()
        if path in by_file:
            text = student_source(data.decode("utf-8"), by_file[path], titles)
            ast.parse(text, filename=path)  # the stubs must still import
            data = text.encode("utf-8")
        if path.endswith(".py") and BEGIN.encode() in data:
            raise UsageError(f"{path}: a solution marker survived the build")
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if source.stat().st_mode & stat.S_IXUSR else 0o644)
    return info


def build(out_dir: str | os.PathLike) -> dict:
    """Write the student copy into out_dir (new or empty); the same reference always gives the same bytes."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"OUT_DIR {str(out)!r} exists and is not an empty folder: give a new or empty one")
    info = write_copy(out)
    (out / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def build_gradescope(out_dir: str | os.PathLike, zip_path: str | os.PathLike, hidden_visibility: str,
                     torch_index: str | None) -> tuple[dict, list[str]]:
    """The student copy into out_dir and, beside it, the Gradescope autograder built from it (gradescope.py)."""
    from course_lib.teaching import gradescope

    gradescope.check_options(str(zip_path), str(out_dir), hidden_visibility, torch_index)
    scripts = gradescope.scripts(ROOT / "requirements.txt", hidden_visibility, torch_index)
    info = build(out_dir)
    return info, gradescope.write_zip(zip_path, Path(out_dir), ROOT, GRADER_FILES, scripts)


def make_references(path: str | os.PathLike = check.REFERENCES) -> Path:
    """Run every public check that has inputs on the reference code and store inputs and outputs."""
    import torch
    from safetensors.torch import save

    from course_lib.runtime.repro import atomic_write

    check.load_checks()
    tensors = {}
    for c in check.CHECKS:
        if c.inputs is None or c.hidden:
            continue
        torch.manual_seed(0)
        inputs = c.inputs(torch.Generator().manual_seed(0))
        for part, values in (("in", inputs), ("out", c.fn(dict(inputs)))):
            for name, value in values.items():
                tensors[f"{c.question}/{c.name}/{part}/{name}"] = value.detach().contiguous().clone()
    atomic_write(path, lambda f: f.write(save(tensors)))
    os.chmod(path, 0o644)  # a plain committed data file (the temporary file was private)
    check.references.cache_clear()
    return Path(path)


# Runs in a fresh interpreter, cwd = the student copy: its course_lib, the grader's check code.
BOOTSTRAP = """
import importlib.util, json, pathlib, sys
grader, question, result = sys.argv[1:]
import course_lib
if pathlib.Path(course_lib.__file__).resolve().parents[1] != pathlib.Path.cwd().resolve():
    sys.exit(f"imported course_lib from {course_lib.__file__}, not from the student copy")
spec = importlib.util.spec_from_file_location("course_lib.teaching.check", grader + "/course_lib/teaching/check.py")
check = importlib.util.module_from_spec(spec)
sys.modules["course_lib.teaching.check"] = check
spec.loader.exec_module(check)
check.load_checks(hidden=True)
pathlib.Path(result).write_text(json.dumps(check.run_question(question, hidden=True)))
"""


def run_checks(student: Path, question: str, timeout: float) -> tuple[str | None, dict]:
    """One question's checks in a subprocess: (why it failed as a whole, or None; its checks' results by name)."""
    env = {**os.environ, "PYTHONPATH": str(student), "PYTHONDONTWRITEBYTECODE": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        try:
            proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, str(ROOT), question, str(result)],
                                  cwd=student, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
            tail = "".join(f": {line}" for line in proc.stderr.strip().splitlines()[-1:])
            error = None if proc.returncode == 0 and result.is_file() else \
                f"the checks crashed (exit code {proc.returncode}){tail}"
        except subprocess.TimeoutExpired:
            error = f"timed out after {timeout:g} s"
        return error, ({} if error else {r["name"]: r for r in json.loads(result.read_text())})


def grade_question(student: Path, question: dict, timeout: float, unread: str | None = None) -> dict:
    """One question's points; a crash, a timeout or an unread file (`unread`: why) fails its checks only."""
    error, ran = (unread, {}) if unread else run_checks(student, question["id"], timeout)
    checks = []
    for c in question["checks"]:  # the grader's list: a check that did not report is a failed check
        r = ran.get(c["name"], {"passed": False, "error": error or "did not run"})
        checks.append({**c, "passed": bool(r["passed"]), "error": r["error"]})
    earned = sum(c["points"] for c in checks if c["passed"])
    return {"id": question["id"], "title": question["title"], "points": earned, "max_points": question["points"],
            "checks": checks, "error": error}


def grader_copy(out: Path) -> tuple[Path, list[dict]]:
    """The stub copy and the questions that grading starts from: this grader's own when it is a built copy (the
    autograder's source, with its manifest), else the reference's, written into out."""
    if (ROOT / MANIFEST).is_file():
        return ROOT, json.loads((ROOT / MANIFEST).read_text(encoding="utf-8"))["questions"]
    return out, write_copy(out, prefix="course_lib/")["questions"]


def grade(student_dir: str | os.PathLike, report_path: str | os.PathLike | None = None, jobs: int = 2,
          timeout: float = 300.0) -> dict:
    """Grade a submission with this grader's questions and checks; write the JSON report when given a path."""
    from course_lib.runtime.repro import write_json

    student = Path(student_dir).resolve()
    if not student.is_dir():
        raise UsageError(f"STUDENT_DIR {str(student_dir)!r} is not a folder: give a student copy, or a folder "
                         "holding its files with questions")
    if not check.HIDDEN.is_file():
        raise UsageError(f"grading needs the hidden checks {check.HIDDEN}: run it from the reference checkout")
    with tempfile.TemporaryDirectory() as tmp:
        stub, questions = grader_copy(Path(tmp) / "stub")
        graded = Path(tmp) / "graded"
        files = submission.assemble(student, stub, graded, questions, leave_out=GRADING_CODE)
        unread = submission.question_errors(files, questions)
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            results = list(pool.map(lambda q: grade_question(graded, q, timeout, unread.get(q["id"])), questions))
    report = {"student_dir": str(student), "points": sum(r["points"] for r in results),
              "max_points": sum(r["max_points"] for r in results), "files": files, "questions": results}
    if report_path is not None:
        write_json(report_path, report)
    return report


def autograde(root: str | os.PathLike, hidden_visibility: str = "after_published", timeout: float | None = None,
              jobs: int | None = None) -> dict:
    """What the autograder's run_autograder runs: `grade` on root/submission, written as Gradescope's
    root/results/results.json."""
    from course_lib.runtime.repro import write_json
    from course_lib.teaching import gradescope

    root = Path(root)
    if not (root / "submission").is_dir():
        raise UsageError(f"ROOT {str(root)!r} has no submission/ folder: give a folder laid out as Gradescope's "
                         "/autograder (source/, submission/, results/)")
    gradescope.check_visibility(hidden_visibility)
    start = time.monotonic()
    report = grade(root / "submission", None, jobs or gradescope.cpus(), timeout or gradescope.TIMEOUT)
    results = gradescope.results(report, hidden_visibility, time.monotonic() - start)
    write_json(root / "results" / "results.json", results)
    for q in report["questions"]:  # the instructors' view (stdout); students see results.json
        print(f"{q['id']}  {q['points']:>2}/{q['max_points']:<2} {q['title']}")
    print(f"total {report['points']}/{report['max_points']}")
    return results


class BuildOptions(Settings):
    """`assignment build`: the student copy, and with --gradescope the autograder."""

    out_dir: str = Field(json_schema_extra={"positional": True, "metavar": "OUT_DIR"})
    gradescope: str | None = Field(None, description="also write Gradescope's autograder zip here",
                                   json_schema_extra={"metavar": "FILE.zip"})
    hidden_visibility: Literal[HIDDEN_VISIBILITIES] | None = Field(None, description="when students see the hidden "
                                                                   "checks on Gradescope: after_published (the "
                                                                   "default), after_due_date or hidden (never)")
    torch_index: str | None = Field(None, description="the pip index setup.sh installs torch's CPU build from "
                                    "(PyTorch's CPU wheel index); without it, PyPI's torch",
                                    json_schema_extra={"metavar": "URL"})


class GradeOptions(Settings):
    """`assignment grade`: a student copy, one process per question."""

    student_dir: str = Field(json_schema_extra={"positional": True, "metavar": "STUDENT_DIR"})
    report: str = Field(description="where to write the JSON report")
    jobs: int = Field(2, ge=1, description="questions graded at the same time")
    timeout: float = Field(300.0, gt=0, description="seconds per question")


class AutogradeOptions(Settings):
    """`assignment autograde`: the autograder's run, ROOT/submission into ROOT/results."""

    root: str = Field(os.environ.get("AUTOGRADER_ROOT", "/autograder"),
                      json_schema_extra={"positional": True, "metavar": "ROOT"})
    hidden_visibility: Literal[HIDDEN_VISIBILITIES] = Field("after_published",
                                                            description="the hidden checks' visibility")
    timeout: float | None = Field(None, gt=0, description="seconds per question (default 120)")
    jobs: int | None = Field(None, ge=1, description="questions graded at once (default: the cores)")


COMMANDS = {"build": BuildOptions, "grade": GradeOptions, "autograde": AutogradeOptions}  # those with options


def _parser():
    from course_lib.runtime.command_line import add_fields
    from course_lib.runtime.errors import Parser

    parser = Parser(prog="python -m course_lib assignment", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser, required=True)
    for name, what in (("build", "write the student copy (and Gradescope's autograder)"),
                       ("make-references", "regenerate the public checks' reference outputs"),
                       ("manifest", "print the questions, points and checks as JSON"),
                       ("grade", "grade a student copy, one process per question"),
                       ("autograde", "the autograder's run: ROOT/submission into ROOT/results")):
        command = commands.add_parser(name, help=what)
        if name in COMMANDS:
            add_fields(command, COMMANDS[name], words=True)
    return parser


def _build(args) -> None:
    if args.gradescope is None:
        if args.torch_index is not None or args.hidden_visibility is not None:
            raise UsageError("--hidden-visibility and --torch-index shape the autograder: give --gradescope FILE.zip")
        info = build(args.out_dir)
    else:
        info, names = build_gradescope(args.out_dir, args.gradescope, args.hidden_visibility or "after_published",
                                       args.torch_index)
        print(f"wrote Gradescope's autograder to {args.gradescope}: {len(names)} files, "
              f"{Path(args.gradescope).stat().st_size // 1024} KiB (docs/gradescope.md)")
    print(f"wrote the student copy to {args.out_dir}: {len(info['questions'])} questions, "
          f"{info['total_points']} points ({MANIFEST})")


def _grade(args) -> None:
    report = grade(args.student_dir, args.report, args.jobs, args.timeout)
    for q in report["questions"]:
        failed = [c for c in q["checks"] if not c["passed"]]
        note = f"  first failure: {failed[0]['name']}: {failed[0]['error']}" if failed else ""
        print(f"{q['id']}  {q['points']:>2}/{q['max_points']:<2} {q['title']}{note}")
    print(f"total {report['points']}/{report['max_points']} (report: {args.report})")


def main(argv: list[str] | None = None) -> int:
    from course_lib.runtime.errors import report_errors

    parser = _parser()

    def body() -> int:
        from course_lib.runtime.command_line import parsed

        args = parser.parse_strict(argv)
        command, args = args.command, parsed(args, COMMANDS[args.command]) if args.command in COMMANDS else args
        if command == "build":
            _build(args)
        elif command == "make-references":
            print(f"wrote {make_references()}")
        elif command == "manifest":
            print(json.dumps(manifest(), indent=2))
        elif command == "grade":
            _grade(args)
        else:
            autograde(args.root, args.hidden_visibility, args.timeout, args.jobs)
        return 0

    return report_errors(body, "nothing was graded or written completely")


if __name__ == "__main__":
    sys.exit(main())
