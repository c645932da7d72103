"""GLUE tasks: their presets and where each split is read from (GLUE's tasks are presets of the sentence family, whose
tokenisation and batches are `course_lib.tasks.sentence`'s; the TSV files are read by `readers/glue_files.py`).

This module knows nothing about the model. It turns a task name into lists of `Example`s
(from a local folder in GLUE layout, the repository's data/glue, or the `nyu-mll/glue` hub dataset).

Label ids follow `nyu-mll/glue` on the hub, so the two sources give identical class ids:
mnli entailment=0, neutral=1, contradiction=2; qnli and rte entailment=0, not_entailment=1;
the other classification tasks use the 0/1 written in the files.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.readers import glue_files, local_data
from course_lib.readers.sentence_rows import SENTENCE, Example, LabelSet
from course_lib.runtime.errors import UsageError, choice_error, find_named


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

    def split_files(self, split: str, cfg) -> list[Path] | None:
        """The file `load` reads a split from (None: the hub's copy), so the encoded-data cache can key a split on
        the file's content and a run need not read what it has encoded before."""
        path = local_split_file(self, split, cfg.glue_dir)
        return None if path is None else [path]


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
    path = local_split_file(task, split, glue_dir)
    return glue_files.read_tsv(path, task) if path is not None else glue_files.from_hub(task, split)


def local_split_file(task: GlueTask, split: str, glue_dir: str | os.PathLike | None = None) -> Path | None:
    """Where a labelled split is read from: `glue_dir`, else $GLUE_DIR, else data/glue; None: the hub (a folder
    the user named never falls back to it: a split missing there is one line)."""
    if split not in task.splits:
        raise choice_error(f"split for {task.name}", split, task.splits)
    where, path = local_data.locate("GLUE_DIR", glue_dir, f"{task.folder}/{split}.tsv")
    return glue_files.split_path(task, split, path) if where == "chosen" else path
