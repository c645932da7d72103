"""GLUE's unlabelled test splits: the eleven files the leaderboard scores, and where each is read from.

The leaderboard (gluebenchmark.com) takes one prediction file per test split: the nine tasks' test sets, MNLI's
matched and mismatched halves, and the diagnostic set AX, which an MNLI model predicts. A split is read, first
found, from:

1. a GLUE folder in the download layout (`--glue-dir` or $GLUE_DIR): `<Task>/test.tsv`, MNLI's
   `test_matched.tsv` and `test_mismatched.tsv`, AX as `diagnostic/diagnostic.tsv` or `AX.tsv`;
2. the repository's `data/glue`, which ships no test file (GLUE's release is not redistributed there): for a task
   whose dev file it ships, a **stand-in** is built from that dev file with its labels dropped and its rows
   numbered from 0. A zip written from stand-ins checks the pipeline; the leaderboard would score it against
   other sentences, and `glue-submission` says so;
3. the `nyu-mll/glue` hub dataset (its test splits and its `ax` configuration), when downloads are allowed.

Every test file of the release has a header row; its rows are numbered by an index column (`index`; QQP's is
`id`), which the submission must repeat in the file's order. The row counts are those of the release, as the
`nyu-mll/glue` dataset card lists them; they are checked when a split cannot be read (a task filled without data).

A zip's manifest records which rows each file was predicted for (`made_for`: the test file's path and sha256, the
stand-in's dev file, the hub, or the release's count), and `read_made_for` reads those same rows back for
`--check`, refusing a named file that is gone or has changed since: a check against other rows would fail a
correct zip (a release's CoLA has 1063 rows, the stand-in 1043) or pass a stale one.
"""
from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

from course_lib.readers import local_data
from course_lib.runtime.errors import UsageError
from course_lib.tasks import glue
from course_lib.tasks.sentence import Example


@dataclass(frozen=True)
class GlueTestSplit:
    """One file of the leaderboard's zip: what predicts it, where GLUE's download puts it, how many rows."""

    name: str  # the zip's file stem, as the leaderboard names it: 'MNLI-m'
    task: str  # the GLUE task whose fine-tuned model predicts it: 'mnli' (also for AX)
    paths: tuple[str, ...]  # inside a GLUE folder, the first that exists wins
    hub_split: tuple[str, str]  # nyu-mll/glue configuration and split
    rows: int  # rows in GLUE's release
    text_columns: tuple[str, ...]  # in the test file's header
    index_column: str = "index"
    dev_split: str | None = "dev"  # the shipped labelled split a stand-in is built from (AX has none)

    @property
    def glue_task(self) -> glue.GlueTask:
        return glue.get_task(self.task)


_PAIR = ("sentence1", "sentence2")
TEST_SPLITS: dict[str, GlueTestSplit] = {f.name: f for f in (
    GlueTestSplit("CoLA", "cola", ("CoLA/test.tsv",), ("cola", "test"), 1063, ("sentence",)),
    GlueTestSplit("SST-2", "sst2", ("SST-2/test.tsv",), ("sst2", "test"), 1821, ("sentence",)),
    GlueTestSplit("MRPC", "mrpc", ("MRPC/test.tsv",), ("mrpc", "test"), 1725, ("#1 String", "#2 String")),
    GlueTestSplit("STS-B", "stsb", ("STS-B/test.tsv",), ("stsb", "test"), 1379, _PAIR),
    GlueTestSplit("QQP", "qqp", ("QQP/test.tsv",), ("qqp", "test"), 390965, ("question1", "question2"), "id"),
    GlueTestSplit("MNLI-m", "mnli", ("MNLI/test_matched.tsv",), ("mnli", "test_matched"), 9796, _PAIR,
                  dev_split="dev_matched"),
    GlueTestSplit("MNLI-mm", "mnli", ("MNLI/test_mismatched.tsv",), ("mnli", "test_mismatched"), 9847, _PAIR,
                  dev_split="dev_mismatched"),
    GlueTestSplit("QNLI", "qnli", ("QNLI/test.tsv",), ("qnli", "test"), 5463, ("question", "sentence")),
    GlueTestSplit("RTE", "rte", ("RTE/test.tsv",), ("rte", "test"), 3000, _PAIR),
    GlueTestSplit("WNLI", "wnli", ("WNLI/test.tsv",), ("wnli", "test"), 146, _PAIR),
    GlueTestSplit("AX", "mnli", ("diagnostic/diagnostic.tsv", "AX.tsv", "diagnostic/AX.tsv"), ("ax", "test"), 1104,
                  _PAIR, dev_split=None),
)}


def splits_predicted_by(task: str) -> list[str]:
    """The files a run of `task` predicts: its own test split; MNLI's two halves and AX."""
    return [name for name, split in TEST_SPLITS.items() if split.task == glue.get_task(task).name]


@dataclass(frozen=True)
class UnlabelledRows:
    """A test split as read: the index column's values in file order, the texts, and where they came from."""

    indices: list[int]
    examples: list[Example]  # labels are placeholders (0, or 0.0 for STS-B): the test labels are hidden
    origin: str  # 'GLUE_DIR/SST-2/test.tsv', 'stand-in: data/glue/SST-2/dev.tsv without labels', 'hub ...'
    stand_in: bool = False
    path: Path | None = None  # the file read: the test file, or the dev file a stand-in is built from (hub: None)
    sha256: str | None = None  # of that file's bytes, as read


def expected_indices(split: GlueTestSplit, rows: UnlabelledRows | None) -> list[int]:
    """The index column a submission must repeat: the split's as read, else (not readable here) the release's
    row count numbered from 0, as every GLUE test file is."""
    return rows.indices if rows is not None else list(range(split.rows))


def read_test(test: GlueTestSplit, glue_dir=None) -> UnlabelledRows:
    """The split from the user's GLUE folder, else a stand-in from the shipped dev file, else the hub; one line
    saying what to give when none of them has it."""
    where, path = local_data.locate("GLUE_DIR", glue_dir, *test.paths)
    if where != "hub":
        return _read_tsv(_find_in(path, test) if where == "chosen" else path, test)
    dev = (local_data.shipped_file("GLUE_DIR", f"{test.glue_task.folder}/{test.dev_split}.tsv")
           if test.dev_split is not None else None)
    return _stand_in(test, dev) if dev else _from_hub(test)


def _find_in(folder: Path, test: GlueTestSplit) -> Path:
    if not folder.is_dir():
        raise UsageError(f"GLUE folder {str(folder)!r} does not exist or is not a folder")
    path = next((folder / p for p in test.paths if (folder / p).is_file()), None)
    if path is None:
        raise UsageError(f"GLUE folder {str(folder)!r} has no test file for {test.name} "
                         f"(looked for {', '.join(test.paths)})")
    return path


def _placeholder(test: GlueTestSplit) -> float | int:
    return 0.0 if test.glue_task.is_regression else 0


def _read_tsv(path: Path, test: GlueTestSplit) -> UnlabelledRows:
    """A test TSV read strictly, by header names: a missing index or text column, a row of the wrong width or an
    index that is not a whole number is one line naming the file and line."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = [c.strip() for c in next(rows, [])]
            for column in (test.index_column, *test.text_columns):
                if column not in header:
                    raise UsageError(f"{path}: header lacks the column {column!r} (the test file of {test.name} "
                                     f"needs {', '.join((test.index_column, *test.text_columns))}; found "
                                     f"{', '.join(header) or 'an empty file'})")
            at, text_at = header.index(test.index_column), [header.index(c) for c in test.text_columns]
            indices, examples = [], []
            for row in rows:
                if not row:
                    continue
                where = f"{path}:{rows.line_num}"
                if len(row) != len(header):
                    raise UsageError(f"{where}: expected {len(header)} tab-separated fields, found {len(row)}")
                indices.append(_index(row[at], where))
                examples.append(Example(tuple(row[i] for i in text_at), _placeholder(test)))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    if not indices:
        raise UsageError(f"{path}: no rows")
    return UnlabelledRows(indices, examples, str(path), path=Path(path).resolve(), sha256=file_sha256(path))


def _index(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{where}: index {text!r} is not a whole number") from None


def _stand_in(test: GlueTestSplit, dev_path: Path) -> UnlabelledRows:
    """The dev split in `dev_path` (the shipped one) with its labels dropped, numbered from 0: the offline
    pipeline's test split."""
    dev = glue.load_split(test.glue_task, test.dev_split, dev_path.parents[1])  # <glue>/<Task>/<split>.tsv
    examples = [Example(ex.texts, _placeholder(test)) for ex in dev]
    return UnlabelledRows(list(range(len(dev))), examples, f"stand-in: {_repo_relative(dev_path)} without its labels",
                          stand_in=True, path=dev_path.resolve(), sha256=file_sha256(dev_path))


def _from_hub(test: GlueTestSplit) -> UnlabelledRows:
    config, split = test.hub_split
    columns = ("premise", "hypothesis") if config == "ax" else test.glue_task.text_columns
    try:
        import datasets  # slow to import; only needed without a local folder

        table = datasets.load_dataset("nyu-mll/glue", config, split=split)
        texts, indices = [list(table[c]) for c in columns], [int(i) for i in table["idx"]]
    except Exception as err:  # offline, no cache, the hub changed: all mean "give me a folder"
        raise UsageError(f"could not load GLUE's {test.name} test split from the hub ({type(err).__name__}): set "
                         f"GLUE_DIR or --glue-dir to GLUE's download (with {test.paths[0]}), or go online") from err
    examples = [Example(tuple(row), _placeholder(test)) for row in zip(*texts)]
    return UnlabelledRows(indices, examples, f"hub: nyu-mll/glue {config} {split}")


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _repo_relative(path: Path) -> str:
    """A shipped file as 'data/glue/CoLA/dev.tsv', so a manifest names it in any checkout of the repository."""
    try:
        return str(Path(path).resolve().relative_to(local_data.REPO_DATA.parent))
    except ValueError:
        return str(Path(path).resolve())


def made_for(test: GlueTestSplit, rows: UnlabelledRows | None) -> dict:
    """What a zip's manifest keeps of the rows a file was predicted for: the test file (path, sha256), the dev
    file a stand-in was built from, the hub's split, or (nothing readable) the release's count numbered from 0."""
    if rows is None:
        return {"kind": "release", "rows": test.rows}
    if rows.path is None:
        return {"kind": "hub", "rows": len(rows.indices)}
    if rows.stand_in:
        return {"kind": "stand-in", "path": _repo_relative(rows.path), "sha256": rows.sha256, "rows": len(rows.indices)}
    return {"kind": "file", "path": str(rows.path), "sha256": rows.sha256, "rows": len(rows.indices)}


def is_made_for(record) -> bool:
    """Whether `record` has the shape `made_for` writes (a file's record names its path and sha256)."""
    if not isinstance(record, dict) or record.get("kind") not in ("file", "stand-in", "hub", "release"):
        return False
    return record["kind"] in ("hub", "release") or (isinstance(record.get("path"), str)
                                                     and isinstance(record.get("sha256"), str))


def read_made_for(test: GlueTestSplit, record: dict) -> UnlabelledRows | None:
    """The rows a manifest's `made_for` record names, read again (None: the release's count from 0); a named file
    that is missing or whose sha256 differs from the record is one line naming it."""
    if record["kind"] == "release":
        return None
    if record["kind"] == "hub":
        try:
            return _from_hub(test)
        except UsageError:
            return None  # offline: the hub's test splits are numbered from 0, as the release's count says
    path = Path(record["path"])
    path = path if path.is_absolute() else local_data.REPO_DATA.parent / path
    what = f"{test.name}'s predictions were made for {path}"
    if not path.is_file():
        raise UsageError(f"{what}, which is missing: put it back, or give --glue-dir FOLDER to check against that "
                         f"folder's test files")
    now = file_sha256(path)
    if now != record["sha256"]:
        raise UsageError(f"{what}, which has changed since (sha256 {now[:12]}..., the manifest's "
                         f"{str(record['sha256'])[:12]}...): predict it again, or give --glue-dir FOLDER to check "
                         f"against that folder's test files")
    return _stand_in(test, path) if record["kind"] == "stand-in" else _read_tsv(path, test)
