"""The Stanford CS224N default project's ("minBERT") data files, as presets of the sentence family.

The course hands its data out as one folder (`data/` of its starter code), never shipped here. The folder is
`--data-dir DIR`, else `$CS224N_DATA_DIR`; it is not on the hub. Its files, per task:

    cs224n_sst      ids-sst-{train,dev,test-student}.csv      sentence, sentiment 0-4        accuracy
    cs224n_para     quora-{train,dev,test-student}.csv        sentence1, sentence2,
                                                              is_duplicate 0.0 / 1.0         accuracy
    cs224n_sts      sts-{train,dev,test-student}.csv          sentence1, sentence2,
                                                              similarity 0-5 (regression)    pearson, spearmanr
    cs224n_cfimdb   ids-cfimdb-{train,dev,test-student}.csv   sentence, sentiment 0 / 1      accuracy

Whatever the suffix says, the fields are TAB-separated: pandas wrote them, its row index as a first column with an
empty name, then `id`, then the fields. A text field may be quoted, a quote inside doubled, which is how the
course's own loader (csv.DictReader with a tab) reads them, so we read them the same way. The header names the
columns, so the unnamed index and any extra column are ignored.

The test-student files have no label column. They are for predictions only, never scored, so a preset's scored
splits are train and dev (a labelled `--test-file` still adds a scored test split, as for every preset); the
test-student file is read by `read_unlabelled`, or `task.load("test-student", cfg)` on a bound preset. Every
example keeps its row's `id`, which the course's predictions files (`<id> , <prediction>`) are keyed by.

Reading is as strict as `sentence_files`: a missing column, a wrong field count, an empty id, an unknown label
or a score out of range stops the run in one line naming the file and line. One exception, the course's own:
Quora's real files hold a few rows with an empty label, which its loader drops silently. `cs224n_para` drops
them too, with one warning line on stderr saying how many and where, so that they are not silent here.
"""
from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from course_lib.readers import sources
from course_lib.readers.sentence_files import (CLASSIFICATION_METRICS, REGRESSION_METRICS, FileSentenceTask,
                                               _records, label_text, parse_label, scored_splits)
from course_lib.readers.sentence_rows import Example
from course_lib.runtime.errors import UsageError, choice_error

ENV = "CS224N_DATA_DIR"
UNLABELLED_SPLIT = "test-student"  # the course's name for its test split, whose labels students never see
ID_COLUMN = "id"


@dataclass
class CourseExample(Example):
    """An `Example` that keeps its row's id, for the course's predictions files. A subclass rather than a new
    field of `Example`, so no other reader changes while every encoder and batcher still takes it.
    `label` is None for a test-student row: it has none, and None cannot be scored or trained on by mistake."""

    id: str = ""


@dataclass(frozen=True)
class CourseTask(FileSentenceTask):
    """A course preset. Its files are tab-separated whatever their suffix, its rows keep their ids, and it knows
    its unlabelled test-student file apart from the splits a run scores."""

    unlabelled_file: str = ""  # the test-student file's name in the folder
    unlabelled_path: Path | None = None  # that file, once bound to a folder holding it
    drop_empty_labels: bool = False  # Quora only: skip rows without a label (with a warning), as the course does

    def resolved(self, cfg) -> CourseTask:
        """Its files for the run. Not `file_layout`'s suffix rule: a course `.csv` is tab-separated."""
        if sources.folder(self.source, cfg) is None and not getattr(cfg, "train_file", None):
            raise UsageError(f"{self.name}: no data folder: give --data-dir DIR or set {ENV} (the course's data "
                             f"folder, holding {self.source.files['train']} and the other tasks' files)")
        paths = self.split_paths(cfg)
        base = sources.folder(self.source, cfg)
        unlabelled = base / self.unlabelled_file if base is not None else None
        return replace(self, paths=paths, dev_splits=scored_splits(paths),
                       unlabelled_path=unlabelled if unlabelled is not None and unlabelled.is_file() else None)

    def load(self, split: str, cfg=None) -> list[CourseExample]:
        """A scored split's examples, or with "test-student" the unlabelled ones (labels None)."""
        if split == UNLABELLED_SPLIT:
            if self.unlabelled_path is None:
                raise UsageError(f"{self.name}: no {self.unlabelled_file} to predict on (give --data-dir or "
                                 f"{ENV}, a folder holding it)")
            return read_unlabelled(self, self.unlabelled_path)
        if split not in self.paths:
            raise choice_error(f"split for {self.name}", split, (*self.paths, UNLABELLED_SPLIT))
        return read_labelled(self, self.paths[split])


# ----------------------------------------------------------------------------------------------
# Reading


def course_rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """(line, {column: field}) per row of a course file: tab-separated, a header naming the columns, every row
    as many fields as the header. Blank lines are skipped; a quoted field may span lines (its first counts)."""
    rows = []
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            records = _records(csv.reader(f, delimiter="\t"), path)
            header = [name.strip() for name in next(records, (1, []))[1]]
            missing = [name for name in columns if name not in header]
            if missing:
                found = ", ".join(name or "(unnamed)" for name in header) or "an empty first line"
                raise UsageError(f"{path}: header lacks column {missing[0]!r} (expected {', '.join(columns)}; "
                                 f"found {found}; the course's files are tab-separated)")
            at = {name: header.index(name) for name in columns}
            for line, fields in records:
                if not fields:
                    continue
                if len(fields) != len(header):
                    raise UsageError(f"{path}:{line}: expected {len(header)} tab-separated fields "
                                     f"({', '.join(name or '(unnamed)' for name in header)}), found {len(fields)}")
                rows.append((line, {name: fields[i] for name, i in at.items()}))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    return rows


def _row_id(row: dict[str, str], where: str) -> str:
    """The row's id, refused when empty: a prediction without one cannot be matched to its row."""
    if not row[ID_COLUMN].strip():
        raise UsageError(f"{where}: empty id (every row needs one)")
    return row[ID_COLUMN].strip()


def read_labelled(task: CourseTask, path: Path) -> list[CourseExample]:
    """A train or dev file's examples with their ids; Quora's unlabelled rows dropped, with one warning line."""
    examples, dropped = [], []
    for line, row in course_rows(path, (ID_COLUMN, *task.text_columns, task.label_column)):
        where = f"{path}:{line}"
        if task.drop_empty_labels and not row[task.label_column].strip():
            dropped.append(line)
            continue
        label = parse_label(task, label_text(row[task.label_column], where), where)
        examples.append(CourseExample(tuple(row[c] for c in task.text_columns), label, id=_row_id(row, where)))
    if dropped:
        print(f"warning: {path}: dropped {len(dropped)} row{'s' if len(dropped) > 1 else ''} with an empty "
              f"{task.label_column!r} (first at line {dropped[0]}), as the course's loader does",
              file=sys.stderr, flush=True)
    if not examples:
        raise UsageError(f"{path}: no examples" + (" with a label" if dropped else ""))
    return examples


def read_unlabelled(task: CourseTask, path: str | Path) -> list[CourseExample]:
    """A test-student file's examples: texts and ids, label None. For predicting, never for scoring; a label
    column, if the file has one, is not read."""
    path = Path(path)
    examples = [CourseExample(tuple(row[c] for c in task.text_columns), None, id=_row_id(row, f"{path}:{line}"))
                for line, row in course_rows(path, (ID_COLUMN, *task.text_columns))]
    if not examples:
        raise UsageError(f"{path}: no examples")
    return examples


# ----------------------------------------------------------------------------------------------
# Presets


def _preset(name: str, stem: str, text_columns: tuple[str, ...], label_column: str,
            label_names: tuple[str, ...] | None, **options) -> CourseTask:
    """A course task whose files are <stem>-train.csv, <stem>-dev.csv and <stem>-test-student.csv."""
    test = f"{stem}-{UNLABELLED_SPLIT}.csv"
    return CourseTask(
        name, text_columns, label_names, REGRESSION_METRICS if label_names is None else CLASSIFICATION_METRICS,
        sources.Source(files={split: f"{stem}-{split}.csv" for split in ("train", "dev")}, env=ENV),
        label_column=label_column, unlabelled_file=test,
        obtain=f"{test} (optional) is read for predictions only; the files are the course's data folder "
               f"(ids-sst-train.csv ... sts-test-student.csv), data/ in the CS224N default project's starter code",
        **options)


PAIR = ("sentence1", "sentence2")

cs224n_sst = _preset("cs224n_sst", "ids-sst", ("sentence",), "sentiment", ("0", "1", "2", "3", "4"))
cs224n_para = _preset("cs224n_para", "quora", PAIR, "is_duplicate", ("0", "1"),  # "0.0" / "1.0" read as 0 / 1
                      drop_empty_labels=True)
cs224n_sts = _preset("cs224n_sts", "sts", PAIR, "similarity", None, label_range=(0.0, 5.0))
cs224n_cfimdb = _preset("cs224n_cfimdb", "ids-cfimdb", ("sentence",), "sentiment", ("0", "1"),
                        max_len=512)  # whole movie reviews: BERT's longest input, the course's truncation

PRESETS = (cs224n_sst, cs224n_para, cs224n_sts, cs224n_cfimdb)
