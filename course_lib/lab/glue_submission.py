"""`python -m course_lib glue-submission RUN_DIR ... --to FILE.zip`: the zip the GLUE leaderboard scores.

From finished fine-tuning runs, one per GLUE task, every test split is predicted (the MNLI run also predicts
MNLI-mm and the diagnostic set AX) and written as the leaderboard reads it: eleven files at the zip's top level
(`CoLA.tsv`, ..., `AX.tsv`), each a header `index<TAB>prediction` and one row per test row in the test file's
index order; `0`/`1` for CoLA, SST-2, MRPC, QQP and WNLI, `entailment`/`not_entailment` for QNLI and RTE, MNLI's
three names for MNLI and AX, STS-B's score clipped to [0, 5]. Each value is the class name as GLUE's own files
write it (`GlueTask.label_names`), so the mapping is the reader's, not a second table. (transformers' `run_glue.py
--do_predict`, the usual route, writes label names such as `acceptable` where the leaderboard wants 0/1, numbers
rows by position, and has no AX.)

The leaderboard refuses a zip with a task missing: `--fill-missing majority` writes the training set's commonest
class (STS-B: its mean score) for a task without a run, and says so on stdout and in `manifest.json` inside the
zip, with the runs, the project's commit and where each test split was read. `--check FILE.zip` checks any zip
against the same rules and the test files' rows, naming the first problem: a zip of ours against the very test
files its manifest says each file was predicted for (`made_for`: path and sha256), so a zip made with `--glue-dir`
checks without it, and a test file gone or changed since is refused, naming it; `--glue-dir` checks against that
folder's test files instead, and another tool's zip against the test files found here. Everything a user can get
wrong is found before a model loads (`plan`). Test splits: `course_lib.lab.glue_test_splits`.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import subprocess
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field

from course_lib.lab.glue_score import glue_score
from course_lib.lab.glue_test_splits import (TEST_SPLITS, GlueTestSplit, UnlabelledRows, expected_indices,
                                             is_made_for, made_for, read_made_for, read_test, splits_predicted_by)
from course_lib.runtime.command_line import add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.runtime.repro import METRICS, WEIGHTS, atomic_write
from course_lib.runtime.settings import Settings
from course_lib.tasks import glue

HEADER = "index\tprediction"
MANIFEST = "manifest.json"
FILL_RULES = ("majority",)
NOT_FOR_LEADERBOARD = ("this zip checks the pipeline, not a model: {names} were predicted on stand-ins (dev files "
                       "without their labels), which the leaderboard would score against other sentences")


@dataclass
class Plan:
    """What a submission needs, all read and checked before any model loads."""

    runs: dict[str, Path] = field(default_factory=dict)  # GLUE task -> its run's folder
    filled: list[str] = field(default_factory=list)  # GLUE tasks without a run
    tests: dict[str, UnlabelledRows | None] = field(default_factory=dict)  # file name -> rows (None: not readable)


def best_runs(folder: Path, method: str | None = None) -> list[Path]:
    """A folder of runs (a sweep's, a grid's) as its best finished run per GLUE task by the dev GLUE score (the
    best seed, in a grid over seeds); its runs must be of one method, or `method` picks them."""
    found = [(path.parent, _read_metrics(path)) for path in sorted(folder.rglob(METRICS))]
    found = [(run, saved) for run, saved in found if _not_a_glue_run(run, saved) is None]
    methods = sorted({saved.get("config", {}).get("method", "vanilla") for _, saved in found})
    if method is not None:
        found = [(p, saved) for p, saved in found if saved.get("config", {}).get("method", "vanilla") == method]
    elif len(methods) > 1:
        raise UsageError(f"{folder} holds GLUE runs of several methods ({', '.join(methods)}): pick one with "
                         f"--method")
    if not found:
        raise UsageError(f"{folder}: no finished GLUE fine-tuning run in it or below it"
                         + (f" of method {method!r} (found: {', '.join(methods) or 'none'})" if method else ""))
    best: dict[str, tuple[float, Path]] = {}
    for path, saved in found:
        score = glue_score(saved["task"], saved)
        score = -math.inf if score is None else score
        if saved["task"] not in best or score > best[saved["task"]][0]:
            best[saved["task"]] = (score, path)
    return [path for _, path in best.values()]


def _read_metrics(path: Path) -> dict:
    """A run's metrics.json; one that is cut short or not ours reads as {} (no finished run), never a traceback."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) and isinstance(saved.get("config", {}), dict) else {}


def expand(run_dirs: list, method: str | None = None) -> list[Path]:
    """Each RUN_DIR as given when it is a run; a folder holding runs becomes its best run per task."""
    out = []
    for folder in map(Path, run_dirs):
        out += [folder] if (folder / METRICS).is_file() or not folder.is_dir() else best_runs(folder, method)
    return out


def plan(run_dirs: list, fill_missing: str | None, glue_dir=None) -> Plan:
    """The runs by task and the test splits to predict; a run that is unfinished, not of a GLUE task or a second
    run of one task, a missing task without `--fill-missing`, or an unreadable test split of a run's task is one
    line."""
    if fill_missing is not None and fill_missing not in FILL_RULES:
        raise UsageError(f"unknown --fill-missing {fill_missing!r} (valid: {', '.join(FILL_RULES)})")
    result = Plan()
    for folder in map(Path, run_dirs):
        task = _finished_glue_task(folder)
        if task in result.runs:
            raise UsageError(f"two runs of {task}: {result.runs[task]} and {folder} (give one run per task, e.g. "
                             f"its best dev seed)")
        result.runs[task] = folder
    result.filled = [task for task in glue.GLUE_TASKS if task not in result.runs]
    if result.filled and fill_missing is None:
        names = ", ".join(glue.GLUE_TASKS[t].folder for t in result.filled)
        raise UsageError(f"no run for {names}: the leaderboard refuses a zip without every task (give a run of "
                         f"each, or --fill-missing majority)")
    for name, split in TEST_SPLITS.items():
        result.tests[name] = read_test(split, glue_dir) if split.task in result.runs else _if_readable(split,
                                                                                                      glue_dir)
    return result


def _not_a_glue_run(folder: Path, saved: dict) -> str | None:
    """Why the folder is no finished GLUE fine-tuning run, or None when it is one (saved: its metrics.json)."""
    if not saved or not (folder / WEIGHTS).is_file():
        return f"{folder} holds no finished fine-tuning run ({METRICS} and {WEIGHTS})"
    if saved.get("status") != "complete" or saved.get("kind", "finetune") != "finetune":
        return (f"{folder}: a {saved.get('kind', 'finetune')} run with status {saved.get('status')!r}, not a "
                f"finished fine-tuning run")
    if saved.get("task") not in glue.GLUE_TASKS:
        return f"{folder}: a run of {saved.get('task')!r}, not a GLUE task (valid: {', '.join(glue.GLUE_TASKS)})"
    return None


def _finished_glue_task(folder: Path) -> str:
    saved = _read_metrics(folder / METRICS)
    problem = _not_a_glue_run(folder, saved)
    if problem is not None:
        raise UsageError(problem)
    return saved["task"]


def _if_readable(split: GlueTestSplit, glue_dir) -> UnlabelledRows | None:
    """A filled task's test split when it can be read; None means the release's row count, numbered from 0."""
    try:
        return read_test(split, glue_dir)
    except UsageError:
        return None


def submission_value(task: glue.GlueTask, logits) -> str:
    """One prediction as the leaderboard reads it: the class as GLUE's files name it, or the score in range."""
    if task.is_regression:
        low, high = task.label_range
        return f"{min(max(float(logits[0]), low), high):.3f}"
    return task.label_names[int(logits.argmax())]


def fill_value(task: glue.GlueTask, glue_dir=None) -> tuple[str, str]:
    """(value, why) for a task without a run: the training set's commonest class (ties: the lower id) or mean
    score; where no training set can be read, the first class (STS-B: the middle of its range), said so."""
    try:
        labels = [ex.label for ex in glue.load_split(task, "train", glue_dir)]
    except UsageError as err:
        value = f"{sum(task.label_range) / 2:.3f}" if task.is_regression else task.label_names[0]
        return value, f"a placeholder, not the majority: no training set here ({str(err).split(':')[0]})"
    if task.is_regression:
        return f"{math.fsum(labels) / len(labels):.3f}", f"the training set's mean score ({len(labels)} pairs)"
    best, count = min(Counter(labels).items(), key=lambda item: (-item[1], item[0]))
    return task.label_names[best], f"the training set's majority class ({count} of {len(labels)})"


def tsv_text(indices: list[int], values: list[str]) -> str:
    return HEADER + "\n" + "".join(f"{i}\t{v}\n" for i, v in zip(indices, values))


def predict_rows(folder: Path, names: list[str], tests: dict, batch_size: int | None) -> dict[str, list[str]]:
    """One run's model on its test splits, loaded once, through `predict`'s own code (`Predictor`)."""
    from course_lib.training.predict import Predictor

    predictor = Predictor(folder, batch_size)
    return {name: [submission_value(predictor.task, row)
                   for row in predictor.outputs(tests[name].examples, desc=f"predict {name}")[0]]
            for name in names}


def project_commit() -> str | None:
    """The commit of the code that writes the zip, when it runs from a git checkout."""
    done = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def run_entry(folder: Path, split: GlueTestSplit, test: UnlabelledRows) -> dict:
    """A run's line in the manifest: its folder, method, seed, model, dev score and weights' digest, and the
    test rows it predicted."""
    saved = json.loads((folder / METRICS).read_text())
    config = saved["config"]
    digest = hashlib.sha256((folder / WEIGHTS).read_bytes()).hexdigest()
    return {"from": "run", "run": str(folder), "method": config.get("method"), "seed": config.get("seed"),
            "model": config.get("model"), "dev": saved.get("dev"), "weights_sha256": digest,
            "test_rows": test.origin, "rows": len(test.indices), "made_for": made_for(split, test)}


def write_submission(run_dirs: list, to, fill_missing: str | None = None, glue_dir=None,
                     batch_size: int | None = None, method: str | None = None) -> dict:
    """Predict, fill, and write the zip atomically; return the manifest (what each file holds)."""
    to = Path(to)
    if to.suffix != ".zip":
        raise UsageError(f"--to {str(to)!r} must name a .zip file (the leaderboard takes a zip)")
    todo = plan(expand(run_dirs, method), fill_missing, glue_dir)
    files, entries = {}, {}
    for task, folder in todo.runs.items():
        for name, values in predict_rows(folder, splits_predicted_by(task), todo.tests, batch_size).items():
            files[name] = tsv_text(todo.tests[name].indices, values)
            entries[name] = run_entry(folder, TEST_SPLITS[name], todo.tests[name])
    for task in todo.filled:
        value, why = fill_value(glue.GLUE_TASKS[task], glue_dir)  # once per task: MNLI's fills its three files
        for name in splits_predicted_by(task):
            files[name], entries[name] = _filled(TEST_SPLITS[name], todo.tests[name], value, why)
    stand_ins = [name for name, rows in todo.tests.items() if rows is not None and rows.stand_in]
    manifest = {"written_by": "python -m course_lib glue-submission", "project_commit": project_commit(),
                "for_leaderboard": not stand_ins, "filled": [glue.GLUE_TASKS[t].folder for t in todo.filled],
                "stand_ins": stand_ins, "files": {name: entries[name] for name in TEST_SPLITS}}
    _write_zip(to, {f"{name}.tsv": files[name] for name in TEST_SPLITS}, manifest)
    return manifest


def _filled(split: GlueTestSplit, rows: UnlabelledRows | None, value: str, why: str) -> tuple[str, dict]:
    indices = expected_indices(split, rows)
    origin = rows.origin if rows is not None else f"GLUE's release: {split.rows} rows numbered from 0"
    return tsv_text(indices, [value] * len(indices)), {"from": "fill", "value": value, "why": why,
                                                       "test_rows": origin, "rows": len(indices),
                                                       "made_for": made_for(split, rows)}


def _write_zip(to: Path, files: dict[str, str], manifest: dict) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(MANIFEST, json.dumps(manifest, indent=1) + "\n")
    atomic_write(to, lambda f: f.write(buffer.getvalue()))


def report(to, manifest: dict) -> str:
    """What the zip holds, a line per file, then the warnings a user must not miss."""
    lines = []
    for name, entry in manifest["files"].items():
        source = (f"run {entry['run']} ({entry['method']}, seed {entry['seed']})" if entry["from"] == "run"
                  else f"filled with {entry['value']!r}: {entry['why']}")
        lines.append(f"{name + '.tsv':<12} {entry['rows']:>7} rows  {source}")
    lines.append(f"wrote {to}")
    if manifest["filled"]:
        lines.append(f"note: filled without a run: {', '.join(manifest['filled'])}")
    if manifest["stand_ins"]:
        lines.append("note: " + NOT_FOR_LEADERBOARD.format(names=", ".join(manifest["stand_ins"])))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Checking a zip (ours or another tool's)


def check_zip(path, glue_dir=None) -> list[str]:
    """Every problem the leaderboard would refuse or misread, in the order met: not a zip, a file missing, in a
    folder or unknown, a wrong header, row count or index order, a value outside the task's labels or range.
    The expected rows are, with `glue_dir`, that folder's test splits; else those the zip's manifest says each
    file was predicted for (a named file missing or changed is a UsageError); else the test splits as
    `read_test` finds them here (the release's count, numbered from 0, where none can be read)."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise UsageError(f"--check {str(path)!r} is not a zip file")
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        problems = _name_problems(names)
        records = {} if glue_dir else _made_for_records(archive, names)
        for name, split in TEST_SPLITS.items():
            if f"{name}.tsv" in names:
                rows = read_made_for(split, records[name]) if name in records else _if_readable(split, glue_dir)
                problems += _file_problems(f"{name}.tsv", archive.read(f"{name}.tsv"), split,
                                           expected_indices(split, rows))
    return problems


def _made_for_records(archive: zipfile.ZipFile, names: list[str]) -> dict[str, dict]:
    """Each file's `made_for` record in the zip's manifest, where it has a well-formed one (another tool's zip,
    or a manifest from before the records, has none: its files are checked against the test files found here)."""
    try:
        files = json.loads(archive.read(MANIFEST)).get("files", {}) if MANIFEST in names else {}
    except (ValueError, AttributeError):  # not JSON, or not an object: not our manifest
        return {}
    entries = files.items() if isinstance(files, dict) else ()
    return {name: entry["made_for"] for name, entry in entries
            if name in TEST_SPLITS and isinstance(entry, dict) and is_made_for(entry.get("made_for"))}


def _name_problems(names: list[str]) -> list[str]:
    expected = [f"{name}.tsv" for name in TEST_SPLITS]
    problems = [f"{n}: files must sit at the zip's top level" for n in names if "/" in n]
    problems += [f"{n}: missing (the leaderboard needs all of {', '.join(expected)})" for n in expected
                 if n not in names]
    return problems + [f"{n}: not a GLUE submission file (expected: {', '.join(expected)})" for n in names
                       if "/" not in n and n not in expected and n != MANIFEST]


def _file_problems(name: str, data: bytes, split: GlueTestSplit, expected: list[int]) -> list[str]:
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return [f"{name}: not UTF-8 text"]
    if not lines or lines[0] != HEADER:
        return [f"{name}: header {lines[0] if lines else ''!r}, expected {HEADER!r}"]
    if len(lines) - 1 != len(expected):
        return [f"{name}: {len(lines) - 1} rows, expected {len(expected)} (the test split's rows)"]
    for line_no, (line, index) in enumerate(zip(lines[1:], expected), start=2):
        problem = _row_problem(line, index, split.glue_task)
        if problem:
            return [f"{name}:{line_no}: {problem}"]
    return []


def _row_problem(line: str, index: int, task: glue.GlueTask) -> str | None:
    fields = line.split("\t")
    if len(fields) != 2:
        return f"{len(fields)} tab-separated fields, expected 2 (index, prediction)"
    if fields[0] != str(index):
        return f"index {fields[0]!r}, expected {index} (the test file's order)"
    if not task.is_regression:
        return None if fields[1] in task.label_names else \
            f"prediction {fields[1]!r} (valid for {task.folder}: {', '.join(task.label_names)})"
    try:
        score = float(fields[1])
    except ValueError:
        return f"prediction {fields[1]!r} is not a number"
    low, high = task.label_range
    return None if math.isfinite(score) and low <= score <= high else \
        f"prediction {fields[1]!r} is outside {low:g} to {high:g}"


class SubmissionOptions(Settings):
    """`python -m course_lib glue-submission`'s options."""

    runs: list[str] = Field([], description="finished fine-tuning runs, one per GLUE task; a folder of runs (a "
                            "sweep's) gives its best dev run per task",
                            json_schema_extra={"positional": True, "metavar": "RUN_DIR"})
    method: str | None = Field(None, description="in a folder of runs, take this method's")
    to: str | None = Field(None, description="the zip to write", json_schema_extra={"metavar": "FILE.zip"})
    fill_missing: Literal[FILL_RULES] | None = Field(None, description="write the training set's majority class "
                                                     "for a task without a run, and say so")
    check: str | None = Field(None, description="check a zip against the leaderboard's rules and the rows of the "
                              "test files its manifest says it was predicted for (--glue-dir: that folder's); write "
                              "nothing", json_schema_extra={"metavar": "FILE.zip"})
    glue_dir: str | None = Field(None, description="GLUE's download, with its test files (default: $GLUE_DIR, "
                                 "else data/glue's stand-ins, else the hub)")
    batch_size: int | None = Field(None, gt=0, description="rows per forward pass (default: each run's "
                                   "eval_batch_size)")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course_lib glue-submission",
                    description="the zip the GLUE leaderboard takes, from one finished run per GLUE task; or "
                                "--check a zip")
    add_fields(parser, SubmissionOptions, words=True)

    def body() -> int:
        args = parsed(parser.parse_strict(argv), SubmissionOptions)
        if args.check:
            if args.runs or args.to:
                raise UsageError("--check reads a zip; give it without RUN_DIR and --to")
            problems = check_zip(args.check, args.glue_dir)
            print(f"{args.check}: {problems[0]}" if problems else f"{args.check}: passes (11 files, each split's "
                  f"rows in order, every value valid)")
            return 1 if problems else 0
        if not args.to:
            raise UsageError("give --to FILE.zip (the zip to write) or --check FILE.zip")
        manifest = write_submission(args.runs, args.to, args.fill_missing, args.glue_dir, args.batch_size,
                                    args.method)
        print(report(args.to, manifest))
        return 0
    return report_errors(body, "nothing was written; run the same command again")
