"""The sentence family from any CSV, TSV or JSONL file, and the papers' other sentence presets.

GLUE's tasks are presets with their own folder layout (`course_lib.tasks.glue`); everything else a sentence
classifier or regressor is tried on is a file of rows, one example per row, in one of three layouts:

    .csv     comma-separated, first row the header; a field may be quoted, a quote inside it doubled
    .tsv     tab-separated, first row the header; quoted fields as in .csv unless a preset's files are plain
             text (SciTail, PAWS-QQP, whose sentences carry stray '"' that are not quotes)
    .jsonl   one JSON object per line, keyed by column

The header (or the JSON keys) names the columns, so extra or reordered columns read fine. Reading is strict, as
GLUE's is: a missing column, a row with the wrong number of fields, an empty or unknown label, or a score that is
not a finite number stops the run before training, in one line naming the file and line. No row is dropped.

Labels. A class label is the text written in the file ("positive", "entails", "3"). When every name in the label
set is a number, labels compare as numbers, so "1.0" in a file is the class "1". The label set, whose order gives
the class ids, is the preset's, else the run's `--labels a,b,c`, else the training file's distinct labels sorted
(as numbers when they all are: 2 before 10). A regression label is any finite number, within the preset's
`label_range` when it has one.

`--task custom --task-type classification|regression` is a preset made from the run's files (`custom`); the
named presets below (`PRESETS`) are the other sentence datasets of the papers this course reproduces.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from course_lib.readers import sources
from course_lib.readers.sentence_rows import SENTENCE, Example, LabelSet
from course_lib.runtime.errors import UsageError

DELIMITERS = {".csv": ",", ".tsv": "\t", ".jsonl": None}  # suffix -> field separator (None: a JSON line)
FIELD_NAMES = {",": "comma", "\t": "tab"}
DEFAULT_TEXT_COLUMNS = ("sentence", "text")  # --task custom reads the first of these its training file has
CLASSIFICATION_METRICS = ("accuracy",)
REGRESSION_METRICS = ("pearson", "spearmanr")

Row = tuple[tuple[str, ...], str, str]  # (texts, label as written, "file:line" for messages)


def scored_splits(paths: dict) -> tuple[str, ...]:
    """The splits a run scores besides training: dev, and test where the preset has a labelled one."""
    return ("dev", "test") if "test" in paths else ("dev",)


@dataclass(frozen=True)
class FileSentenceTask(LabelSet):
    """A sentence-family preset read from files: which columns hold the text(s) and the label, the label set,
    how it is scored, and where its files are (`source`: its folder's file names, the variable naming that folder,
    the hub's copy). Duck-compatible with `glue.GlueTask` where the sentence family reads a preset."""

    name: str
    text_columns: tuple[str, ...]  # one column, or two for a pair
    label_names: tuple[str, ...] | None  # as written in the files, index = class id; None: regression
    metrics: tuple[str, ...]  # names for metrics.compute_metrics
    source: sources.Source
    label_column: str = "label"
    columns: tuple[str, ...] | None = None  # names for headerless files, by position; None: a header row
    label_range: tuple[float, float] | None = None  # regression: lowest, highest score (None: any finite)
    label_ids: bool = False  # a class may also be written as its id (0, 1, 2), as the hub's ClassLabel columns are
    quoted: bool = True  # .tsv fields may be quoted; False: '"' is plain text (files written without quoting)
    obtain: str = ""  # how to make the files when they are not on the hub, added to the missing-data error
    paths: dict[str, Path | None] = field(default_factory=dict)  # split -> file (None: the hub), once bound
    dev_splits: tuple[str, ...] = ("dev",)  # ("dev", "test") once bound to a labelled test split
    max_len: int = 128
    family: str = SENTENCE

    def bind(self, cfg) -> FileSentenceTask:
        """The preset for a run, its files resolved. A preset knows its columns and labels, so the options that
        describe a custom file are refused rather than ignored."""
        cfg.task_options.refuse_for(self.name, (*self.text_columns, self.label_column))
        return self.resolved(cfg)

    def resolved(self, cfg) -> FileSentenceTask:
        """Its files for the run (`split_paths`), each of a layout this module reads."""
        paths = self.split_paths(cfg)
        for path in paths.values():
            if path is not None:
                file_layout(path)
        return replace(self, paths=paths, dev_splits=scored_splits(paths))

    def split_paths(self, cfg) -> dict[str, Path | None]:
        """`sources.split_paths`, its error saying where to get the files."""
        try:
            return sources.split_paths(self.source, cfg)
        except UsageError as err:
            raise UsageError(f"{err}{self.where_to_get()}") from None

    def where_to_get(self) -> str:
        """'; SST5_DIR is a folder with train.jsonl, dev.jsonl (test.jsonl optional)' and how to make the files,
        or ''."""
        files, hint = self.source.files, ""
        if self.source.env:
            hint = f"; {self.source.env} is a folder with {files['train']}, {files['dev']}"
            hint += f" ({files['test']} optional)" if "test" in files else ""
        return hint + (f"; {self.obtain}" if self.obtain else "")

    def load(self, split: str, cfg) -> list[Example]:
        """The split's examples, from its file or the hub."""
        try:
            return sources.read_split(self, split, lambda path: read_file(self, path),
                                      lambda rows: hub_examples(self, split, rows))
        except UsageError as err:
            if self.paths[split] is not None:
                raise
            raise UsageError(f"{err}{self.where_to_get()}") from err


# ----------------------------------------------------------------------------------------------
# Reading rows


def file_layout(path: Path) -> str | None:
    """The field separator of a file by its suffix (None: JSON lines); other suffixes are refused."""
    suffix = Path(path).suffix.lower()
    if suffix not in DELIMITERS:
        raise UsageError(f"{path}: unknown file type {suffix or '(no suffix)'!r} (valid: {', '.join(DELIMITERS)})")
    return DELIMITERS[suffix]


def read_file(task: FileSentenceTask, path: Path) -> list[Example]:
    return [Example(texts, parse_label(task, label, where)) for texts, label, where in read_rows(task, path)]


def hub_examples(task: FileSentenceTask, split: str, rows: list[dict]) -> list[Example]:
    """The hub's rows (dicts, as `datasets` gives them) as examples, checked like a JSON line each."""
    examples = []
    for i, row in enumerate(rows, 1):
        texts, label, where = object_row(task, row, f"{task.source.hub} {split} row {i}")
        examples.append(Example(texts, parse_label(task, label, where)))
    return examples


def read_rows(task: FileSentenceTask, path: Path) -> list[Row]:
    """Every row of the file as (texts, label as written, where), labels not yet checked against a set."""
    delimiter = file_layout(path)
    try:
        rows = jsonl_rows(task, path) if delimiter is None else delimited_rows(task, path, delimiter)
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    if not rows:
        raise UsageError(f"{path}: no examples")
    return rows


def _records(reader, path: Path):
    """(first line of the record, its fields): a quoted field may span lines, and the record's first line is the
    one to point at."""
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise UsageError(f"{path}:{start}: {err}") from None
        yield start, row


def delimited_rows(task: FileSentenceTask, path: Path, delimiter: str) -> list[Row]:
    """A CSV or TSV file's rows; each must have as many fields as the header (or the preset's `columns`)."""
    quoting = csv.QUOTE_MINIMAL if task.quoted or delimiter == "," else csv.QUOTE_NONE
    with open(path, encoding="utf-8-sig", newline="") as f:
        records = _records(csv.reader(f, delimiter=delimiter, quoting=quoting), path)
        header = list(task.columns) if task.columns else [c.strip() for c in next(records, (1, []))[1]]
        wanted = wanted_columns(task)
        missing = [c for c in wanted if c not in header]
        if missing:
            raise UsageError(f"{path}: header lacks column {missing[0]!r} (expected {', '.join(wanted)}; "
                             f"found {', '.join(header) or 'an empty first line'})")
        text_at = [header.index(c) for c in task.text_columns]
        label_at = header.index(task.label_column) if task.label_column else None
        rows = []
        for line, fields in records:
            if not fields:  # a blank line, e.g. a trailing one
                continue
            where = f"{path}:{line}"
            if len(fields) != len(header):
                raise UsageError(f"{where}: expected {len(header)} {FIELD_NAMES[delimiter]}-separated fields "
                                 f"({', '.join(header)}), found {len(fields)}")
            label = label_text(fields[label_at], where) if label_at is not None else ""
            rows.append((tuple(fields[i] for i in text_at), label, where))
    return rows


def wanted_columns(task: FileSentenceTask) -> tuple[str, ...]:
    """The columns a row must have: the texts, and the label unless the rows are a prediction's input
    (`label_column` "")."""
    return (*task.text_columns, *((task.label_column,) if task.label_column else ()))


def jsonl_rows(task: FileSentenceTask, path: Path) -> list[Row]:
    """A JSON-lines file's rows: one object per non-blank line."""
    return [object_row(task, value, where) for where, value in sources.jsonl_records(path)]


def object_row(task: FileSentenceTask, value, where: str) -> Row:
    """One JSON object (or hub row): its texts must be strings, its label text or a number."""
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a JSON object, found {type(value).__name__}")
    wanted = wanted_columns(task)
    for key in wanted:
        if key not in value:
            raise UsageError(f"{where}: missing {key!r} (expected {', '.join(wanted)}; "
                             f"found {', '.join(map(str, value)) or 'an empty object'})")
    for key in task.text_columns:
        if not isinstance(value[key], str):
            raise UsageError(f"{where}: {key!r} is not text (found {type(value[key]).__name__})")
    if not task.label_column:
        return tuple(value[key] for key in task.text_columns), "", where
    label = value[task.label_column]
    if isinstance(label, (bool, list, dict)):
        raise UsageError(f"{where}: label {json.dumps(label)} is neither text nor a number")
    return tuple(value[key] for key in task.text_columns), label_text("" if label is None else str(label), where), where


def label_text(text: str, where: str) -> str:
    """A label as written, refused when empty: an unlabelled row can be neither trained on nor scored."""
    if not text.strip():
        raise UsageError(f"{where}: empty label (every row needs one)")
    return text.strip()


# ----------------------------------------------------------------------------------------------
# Labels


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_label(task: FileSentenceTask, text: str, where: str) -> int | float:
    """A class id (the label's place in the label set) or, for regression, the score."""
    if task.label_names is None:
        return parse_score(task, text, where)
    names = task.label_names
    if text in names:
        return names.index(text)
    value, numbers = _finite(text), [_finite(name) for name in names]
    if value is not None and None not in numbers and value in numbers:  # a numeric label set: 1.0 is "1"
        return numbers.index(value)
    if task.label_ids and value is not None and value.is_integer() and 0 <= value < len(names):
        return int(value)
    raise UsageError(f"{where}: unknown label {text!r} (valid: {', '.join(names)})")


def parse_score(task: FileSentenceTask, text: str, where: str) -> float:
    """A regression label: a finite number (float() alone lets 'nan' through, which ends as a NaN loss)."""
    value = _finite(text)
    low, high = task.label_range or (-math.inf, math.inf)
    if value is None or not low <= value <= high:
        valid = f"{low:g} to {high:g}" if task.label_range else "a finite number"
        raise UsageError(f"{where}: score {text!r} is not a number in range for {task.name} (valid: {valid})")
    return value


def sorted_labels(texts) -> tuple[str, ...]:
    """Distinct labels in class-id order: numerically when all are numbers (the first spelling of a value names
    it: 1 and 1.0 are one class), else as strings."""
    distinct = list(dict.fromkeys(texts))
    numbers = [_finite(text) for text in distinct]
    if None in numbers:
        return tuple(sorted(distinct))
    first: dict[float, str] = {}
    for text, value in zip(distinct, numbers):
        first.setdefault(value, text)
    return tuple(first[value] for value in sorted(first))


# ----------------------------------------------------------------------------------------------
# --task custom


def file_columns(path: Path) -> list[str]:
    """The columns a file's header (or first JSON object) names, to choose default text columns."""
    delimiter = file_layout(path)
    with open(path, encoding="utf-8-sig", newline="") as f:
        if delimiter is not None:
            return [c.strip() for c in next(csv.reader(f, delimiter=delimiter), [])]
        first = next((line for line in f if line.strip()), "{}")
    try:
        value = json.loads(first)
    except json.JSONDecodeError:
        return []
    return [str(key) for key in value] if isinstance(value, dict) else []


def _name_list(option: str, text: str, counts: tuple[int, ...]) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(","))
    if "" in names or len(set(names)) != len(names) or (counts and len(names) not in counts):
        raise UsageError(f"--{option} {text!r}: give {' or '.join(map(str, counts)) + ' ' if counts else ''}"
                         f"distinct names separated by commas")
    return names


def custom_text_columns(cfg, train: Path) -> tuple[str, ...]:
    """--text-columns (one, or two for a pair), else the training file's 'sentence' or 'text' column."""
    if cfg.task_options.text_columns:
        return _name_list("text-columns", cfg.task_options.text_columns, (1, 2))
    found = file_columns(train)
    for name in DEFAULT_TEXT_COLUMNS:
        if name in found:
            return (name,)
    raise UsageError(f"{train}: no {' or '.join(map(repr, DEFAULT_TEXT_COLUMNS))} column (found: "
                     f"{', '.join(found) or 'nothing'}): name the text column with --text-columns, two for a pair "
                     f"(--text-columns first,second)")


def custom(cfg) -> FileSentenceTask:
    """`--task custom --task-type classification|regression`: a preset made from --train-file, --validation-file
    and optionally a labelled --test-file, with --text-columns, --label-column and --labels."""
    regression, options = cfg.task_type == "regression", cfg.task_options
    if getattr(cfg, "data_dir", None):
        raise UsageError("--data-dir is for presets; --task custom reads --train-file, --validation-file and "
                         "--test-file")
    if regression and options.labels:
        raise UsageError("--labels names classes; --task-type regression reads numbers (give classification)")
    task = FileSentenceTask("custom", (), None, REGRESSION_METRICS if regression else CLASSIFICATION_METRICS,
                            sources.Source(), label_column=options.label_column or "label").resolved(cfg)
    train = task.paths["train"]
    task = replace(task, text_columns=custom_text_columns(cfg, train))
    if regression:
        return task
    names = _name_list("labels", options.labels, ()) if options.labels else \
        sorted_labels(label for _, label, _ in read_rows(task, train))
    if len(names) < 2:
        raise UsageError(f"{train}: every label is {names[0]!r}: a classifier needs two classes or more "
                         f"(--labels names the full set)")
    return replace(task, label_names=names)


# ----------------------------------------------------------------------------------------------
# Presets


NLI_PAIR = ("premise", "hypothesis")

sst5 = FileSentenceTask(  # SST-1: the Stanford Sentiment Treebank's five classes, 0 very negative .. 4 very positive
    "sst5", ("text",), ("0", "1", "2", "3", "4"), ("accuracy",),  # Cui et al. 2019 report test accuracy
    sources.Source(files={"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"}, env="SST5_DIR",
                   hub="SetFit/sst5", labelled_test=True))

anli = FileSentenceTask(  # Adversarial NLI (Nie et al. 2020), its three rounds concatenated per split
    "anli", NLI_PAIR, ("entailment", "neutral", "contradiction"), ("accuracy",),
    sources.Source(files={"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"}, env="ANLI_DIR",
                   hub="facebook/anli", labelled_test=True,
                   hub_splits={split: tuple(f"{split}_r{r}" for r in (1, 2, 3)) for split in sources.SPLITS}),
    label_ids=True,  # the hub (and files `datasets` writes from it) give 0, 1, 2 for the three names
    obtain="each file holds rounds 1-3 as JSON lines with premise, hypothesis, label (a name or its id 0-2)")

paws_qqp = FileSentenceTask(  # PAWS-QQP (Zhang et al. 2019): paraphrase pairs of high word overlap; 1 = paraphrase
    "paws_qqp", ("sentence1", "sentence2"), ("0", "1"), ("accuracy",),
    sources.Source(files={"train": "train.tsv", "dev": "dev_and_test.tsv"}, env="PAWS_QQP_DIR"),
    quoted=False,  # the generation script writes unquoted fields
    obtain="PAWS-QQP is not distributed: make both files (columns id, sentence1, sentence2, label) with the PAWS "
           "repository's qqp_generate_data.py from the original QQP corpus")

scitail = FileSentenceTask(  # SciTail (Khot et al. 2018): science-exam entailment, entails or neutral
    "scitail", NLI_PAIR, ("entails", "neutral"), ("accuracy",),
    sources.Source(files={"train": "scitail_1.0_train.tsv", "dev": "scitail_1.0_dev.tsv",
                          "test": "scitail_1.0_test.tsv"}, env="SCITAIL_DIR", hub="allenai/scitail",
                   hub_config="tsv_format", labelled_test=True),
    columns=("premise", "hypothesis", "label"), quoted=False,  # the release's tsv_format: no header, no quoting
    obtain="the files are the SciTailV1.1 release's tsv_format folder")

semeval2013 = FileSentenceTask(  # SemEval-2013 Task 2 subtask B (Nakov et al. 2013): a tweet's polarity
    "semeval2013", ("text",), ("negative", "neutral", "positive"), ("accuracy",),
    sources.Source(files={"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}, env="SEMEVAL2013_DIR",
                   labelled_test=True),
    obtain="the tweets are not on the hub: write each split as a header 'text<TAB>label' then one tweet per row, "
           "label negative, neutral or positive (the task's objective labels counted as neutral)")

PRESETS = (sst5, anli, paws_qqp, scitail, semeval2013)


def read_inputs(task, path: Path) -> list[Example]:
    """A prediction's input: the rows of a CSV, TSV or JSON-lines file with the run's text columns, as training
    reads them (a label column may be there; it is not read). A .tsv is read as its preset reads its own files
    (GLUE's: '"' is plain text)."""
    reader = FileSentenceTask(task.name, tuple(task.text_columns), task.label_names, (), None, label_column="",
                              quoted=getattr(task, "quoted", False))
    return [Example(texts, 0) for texts, _, _ in read_rows(reader, Path(path))]
