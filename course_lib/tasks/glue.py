"""GLUE tasks: a registry and readers for the original TSV layout (GLUE's tasks are presets of the sentence
family, whose tokenisation and batches are `course_lib.tasks.sentence`'s).

This module knows nothing about the model. It turns a task name into lists of `Example`s
(from a local folder in GLUE layout, the repository's data/glue, or the `nyu-mll/glue` hub dataset).

Label ids follow `nyu-mll/glue` on the hub, so the two sources give identical class ids:
mnli entailment=0, neutral=1, contradiction=2; qnli and rte entailment=0, not_entailment=1;
the other classification tasks use the 0/1 written in the files.
"""

import csv
import math
import os
from dataclasses import dataclass, field
from pathlib import Path


from course_lib.runtime.errors import UsageError, choice_error, find_named
from course_lib.readers import local_data
from course_lib.tasks.sentence import SENTENCE, Example



@dataclass(frozen=True)
class TsvLayout:
    """Where texts and label sit in a task's GLUE TSV files, by column name.

    Columns are found by header name, so a file with extra or reordered columns still reads
    (MNLI's train and dev files differ in their number of label1..label5 columns). CoLA has no
    header row; `columns` names its fields by position instead.
    """

    text_columns: tuple[str, ...]
    label_column: str
    columns: tuple[str, ...] | None = None  # names for a headerless file; None: first row is the header


class LabelSet:
    """What a sentence-family preset's `label_names` say about its head: None is one regression score."""

    label_names: tuple[str, ...] | None

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        """Width of the classifier output: one score for regression (STS-B)."""
        return 1 if self.label_names is None else len(self.label_names)


@dataclass(frozen=True)
class GlueTask(LabelSet):
    """One GLUE task: what the model reads, what it predicts and how it is scored."""

    name: str  # 'sst2', the nyu-mll/glue config name
    folder: str  # GLUE folder: 'SST-2'
    text_columns: tuple[str, ...]  # column names in the nyu-mll/glue hub dataset
    label_names: tuple[str, ...] | None  # as written in the TSVs, index = class id; None: regression
    metrics: tuple[str, ...]  # names for metrics.compute_metrics
    dev_splits: tuple[str, ...] = ("dev",)  # mnli: ('dev_matched', 'dev_mismatched')
    tsv: TsvLayout = field(kw_only=True)  # where the same fields sit in the GLUE TSV files
    label_range: tuple[float, float] | None = field(default=None, kw_only=True)  # regression: lowest, highest score
    family: str = field(default=SENTENCE, kw_only=True)  # its task family
    max_len: int = field(default=128, kw_only=True)  # its runs' sequence length unless they set one

    @property
    def splits(self) -> tuple[str, ...]:
        """Splits with gold labels; GLUE's test labels are hidden, so 'test' is not one."""
        return ("train", *self.dev_splits)

    def bind(self, cfg) -> "GlueTask":
        """The preset for a run: GLUE's data comes from --glue-dir, $GLUE_DIR or data/glue (else the hub), never
        from files given one by one, so those options are refused rather than ignored."""
        for option in ("train_file", "validation_file", "test_file", "data_dir"):
            if getattr(cfg, option, None):
                raise UsageError(f"--{option.replace('_', '-')} is not read for GLUE task {self.name!r}: its data "
                                 f"comes from --glue-dir or GLUE_DIR (for your own files: --task custom)")
        cfg.task_options.refuse_for(self.name, (*self.tsv.text_columns, self.tsv.label_column))
        return self

    def load(self, split: str, cfg) -> list["Example"]:
        return load_split(self, split, cfg.glue_dir)


_BINARY = ("0", "1")
_PAIR = ("sentence1", "sentence2")

GLUE_TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in [
        GlueTask("cola", "CoLA", ("sentence",), _BINARY, ("matthews_correlation",),
                 tsv=TsvLayout(("sentence",), "label",
                               columns=("source", "label", "original_mark", "sentence"))),
        GlueTask("sst2", "SST-2", ("sentence",), _BINARY, ("accuracy",),
                 tsv=TsvLayout(("sentence",), "label")),
        GlueTask("mrpc", "MRPC", _PAIR, _BINARY, ("accuracy", "f1"),
                 tsv=TsvLayout(("#1 String", "#2 String"), "Quality")),
        GlueTask("qqp", "QQP", ("question1", "question2"), _BINARY, ("accuracy", "f1"),
                 tsv=TsvLayout(("question1", "question2"), "is_duplicate")),
        GlueTask("stsb", "STS-B", _PAIR, None, ("pearson", "spearmanr"),
                 tsv=TsvLayout(_PAIR, "score"), label_range=(0.0, 5.0)),
        GlueTask("mnli", "MNLI", ("premise", "hypothesis"),
                 ("entailment", "neutral", "contradiction"), ("accuracy",),
                 ("dev_matched", "dev_mismatched"), tsv=TsvLayout(_PAIR, "gold_label")),
        GlueTask("qnli", "QNLI", ("question", "sentence"), ("entailment", "not_entailment"),
                 ("accuracy",), tsv=TsvLayout(("question", "sentence"), "label")),
        GlueTask("rte", "RTE", _PAIR, ("entailment", "not_entailment"), ("accuracy",),
                 tsv=TsvLayout(_PAIR, "label")),
        GlueTask("wnli", "WNLI", _PAIR, _BINARY, ("accuracy",), tsv=TsvLayout(_PAIR, "label")),
    ]
}


def get_task(name: str) -> GlueTask:
    """A GLUE task by name, ignoring case and dashes, so 'SST-2', 'sst2' and 'STS-B' work (any task preset:
    `registry.get_task`)."""
    return find_named("GLUE task", name, GLUE_TASKS)


# ----------------------------------------------------------------------------------------------
# Reading


def load_split(
    task: GlueTask | str, split: str, glue_dir: str | os.PathLike | None = None
) -> list[Example]:
    """Read one labelled split: from `glue_dir`, else $GLUE_DIR, else the repository's data/glue, else the
    nyu-mll/glue hub dataset.

    A local folder wins so that offline machines and CI never touch the network; the error
    when nothing works says how to provide the data.
    """
    task = get_task(task) if isinstance(task, str) else task
    if split not in task.splits:
        raise choice_error(f"split for {task.name}", split, task.splits)
    chosen = local_data.env_folder("GLUE_DIR", glue_dir)
    if chosen is not None:
        return _read_tsv(_split_path(task, split, Path(chosen).expanduser()), task)
    shipped = local_data.shipped_file("GLUE_DIR", f"{task.folder}/{split}.tsv")
    return _read_tsv(shipped, task) if shipped is not None else _load_from_hub(task, split)


def _split_path(task: GlueTask, split: str, glue_dir: Path) -> Path:
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


def _read_tsv(path: Path, task: GlueTask) -> list[Example]:
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


def _read_rows(path: Path, task: GlueTask) -> list[Example]:
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


def _parse_label(task: GlueTask, text: str, where: str) -> int | float:
    if task.label_names is None:
        return _parse_score(task, text, where)
    if text not in task.label_names:
        raise UsageError(f"{where}: unknown label {text!r} (valid: {', '.join(task.label_names)})")
    return task.label_names.index(text)


def _parse_score(task: GlueTask, text: str, where: str) -> float:
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


def _load_from_hub(task: GlueTask, split: str) -> list[Example]:
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
