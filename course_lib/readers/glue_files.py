"""GLUE's files: a task's split in its folder, its TSV rows read strictly (the wrong number of fields, an unknown
label or a score out of range is one line at file:line), and the `nyu-mll/glue` hub copy. `task` is a
`tasks.glue.GlueTask`: which columns hold the texts and the label, and the labels' names or the scores' range.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from course_lib.readers import local_data
from course_lib.runtime.errors import UsageError
from course_lib.readers.sentence_rows import Example


def split_path(task, split: str, glue_dir: Path) -> Path:
    if not glue_dir.is_dir():
        raise UsageError(f"GLUE folder {str(glue_dir)!r} does not exist or is not a folder")
    folder = glue_dir / task.folder
    if not folder.is_dir():
        found = sorted(p.name for p in glue_dir.iterdir() if p.is_dir())
        raise UsageError(
            f"GLUE folder {str(glue_dir)!r} has no {task.folder}/ (found: {', '.join(found) or 'nothing'})"
        )
    path = folder / f"{split}.tsv"
    if not path.is_file():
        found = sorted(p.name for p in folder.iterdir())
        raise UsageError(
            f"missing {str(path)!r} (found in {task.folder}/: {', '.join(found) or 'nothing'})"
        )
    return path


def read_tsv(path: Path, task) -> list[Example]:
    """Read a GLUE TSV strictly: any row with the wrong number of fields is an error at file:line.

    QUOTE_NONE because sentences contain stray '"'; utf-8-sig drops the byte-order mark that
    MRPC's original files start with.
    """
    try:
        examples = _read_rows(path, task)
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    if not examples:
        raise UsageError(f"{path}: no examples")
    return examples


def _read_rows(path: Path, task) -> list[Example]:
    layout = task.tsv
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = list(layout.columns) if layout.columns else [c.strip() for c in next(rows, [])]
        wanted = (*layout.text_columns, layout.label_column)
        missing = [c for c in wanted if c not in header]
        if missing:
            raise UsageError(
                f"{path}: header lacks column {missing[0]!r} "
                f"(expected {', '.join(wanted)}; found {', '.join(header) or 'an empty file'})"
            )
        text_at = [header.index(c) for c in layout.text_columns]
        label_at = header.index(layout.label_column)
        examples = []
        for row in rows:
            if not row:  # a blank line, e.g. a trailing one
                continue
            where = f"{path}:{rows.line_num}"
            if len(row) != len(header):
                raise UsageError(
                    f"{where}: expected {len(header)} tab-separated fields, found {len(row)}"
                )
            label = _parse_label(task, row[label_at].strip(), where)
            examples.append(Example(tuple(row[i] for i in text_at), label))
    return examples


def _parse_label(task, text: str, where: str) -> int | float:
    if task.label_names is None:
        return _parse_score(task, text, where)
    if text not in task.label_names:
        raise UsageError(f"{where}: unknown label {text!r} (valid: {', '.join(task.label_names)})")
    return task.label_names.index(text)


def _parse_score(task, text: str, where: str) -> float:
    """A regression label, refused here when not finite or outside the task's range.

    float() accepts 'nan' and 'inf'. Let through, a NaN score surfaces later as a NaN loss whose message
    blames the learning rate, and an out-of-range one (17 on STS-B's 0-5 scale) trains silently.
    """
    try:
        score = float(text)
    except ValueError:
        raise UsageError(f"{where}: score {text!r} is not a number") from None
    low, high = task.label_range or (-math.inf, math.inf)
    if not math.isfinite(score) or not low <= score <= high:
        valid = f"{low:g} to {high:g}" if task.label_range else "a finite number"
        raise UsageError(f"{where}: score {text!r} is out of range for {task.name} (valid: {valid})")
    return score


def from_hub(task, split: str) -> list[Example]:
    hub_split = split.replace("dev", "validation")  # dev_matched -> validation_matched
    try:
        import datasets  # imported here: slow to import and only needed without a local folder

        table = datasets.load_dataset("nyu-mll/glue", task.name, split=hub_split)
        columns = [list(table[c]) for c in task.text_columns]
        labels = list(table["label"])
    except Exception as err:  # offline, no cache, hub changes: all mean "give me a folder"
        raise UsageError(
            f"could not load GLUE {task.name} {split} from the hub ({type(err).__name__}): "
            f"set GLUE_DIR or --glue-dir to a folder in GLUE layout (e.g. {task.folder}/{split}.tsv), "
            f"or go online{local_data.describe_shipped('GLUE_DIR')}"
        ) from err
    cast = float if task.is_regression else int
    return [Example(tuple(texts), cast(label)) for *texts, label in zip(*columns, labels)]
