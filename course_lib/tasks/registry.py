"""Task families and task presets by name: the registry the training code asks, the way methods have theirs.

A task family is a kind of problem, declared once: how a split is read, how examples become features and
padded batches, the plain task model (encoder plus head, whose forward returns the loss given labels), how the
model's outputs become predictions, how predictions are scored, and how they are written for a reader or a
leaderboard. A task is a named preset of one family (GLUE's SST-2 is one of the sentence family). The training
code has no `if task == ...`: a built-in family is its own module plus a builder below and one entry in
`FAMILIES`; a family of your own is one `register_family(TaskFamily(...))` call (docs/extending.md).

    sentence          classification or regression of a sentence or a pair     tasks/sentence.py, tasks/glue.py,
                                                                               readers/glue_files.py,
                                                                               readers/sentence_files.py,
                                                                               readers/cs224n.py
    span_qa           span question answering (SQuAD v1.1, v2.0)               tasks/span_qa.py, tasks/squad.py,
                                                                               readers/squad_json.py
    tagging           a tag per word (WNUT-17, CoNLL-2003)                     tasks/tagging.py, readers/conll.py
    multiple_choice   one of several answers (DREAM, HellaSWAG, SWAG)          tasks/multiple_choice.py,
                                                                               readers/choice_files.py

The built-in families and presets are declared below but loaded on first use: a run on SST-2, from a notebook
or the command line, imports the sentence family's modules, never SQuAD's reader. Listing them all
(`every_family`, `every_task`, and `--help`, which lists every family's options) loads them all.

A run asks for its task through `run_task(cfg)`: the preset bound to the run's files and options (`--train-file`,
`--data-dir`, ...). `--task custom --task-type T` is the run's own files, of the family that T names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from course_lib.runtime.errors import UsageError, choice_error
from course_lib.runtime.registry import Registry
from course_lib.runtime.settings import NoOptions, Settings


@dataclass(frozen=True)
class TaskFamily:
    """One kind of task. Below, `task` is one of the family's presets (e.g. a `glue.GlueTask`) and `cfg` the run's
    FinetuneConfig, whose fields say where the data is and how long a sequence may be.

    read(task, split, cfg)                         the split's examples (a local file or folder, else the hub)
    encode(examples, tokenizer, cfg, training)     features: dicts of token ids and the label, one or more
                                                   per example (evaluation ones keep what decoding needs)
    collate(features, pad_id)                      a padded batch of tensors, labels under "labels"
    build_head(cfg, encoder, task, tokenizer)      the plain task model of the (bound) task; its forward
                                                   returns the loss
    decode(task, outputs, features)                predictions from each feature's output row (its logits)
    score(task, predictions, features)             (metrics, a line saying what is degenerate about the
                                                   predictions, or None)
    write_predictions(path, task, predictions, scores)  the predictions file, in the task's own layout
    predictions_suffix                             that file's suffix: <split>_predictions.<suffix>
    length(feature)                                its token count, for batching by length
    custom(cfg)                                    `--task custom` for this family: a preset made from the
                                                   run's files and options (None: the family has no such form)
    options                                        the family's own options, a Settings model; a run of
                                                   the family holds an instance as cfg.task_options
    percent_scores                                 whether score() gives 0-100 (SQuAD's official script) rather
                                                   than fractions; results tables show both on the 0-100 scale
    hf_class                                       transformers' model class of the plain head, which `export`
                                                   writes and `AutoModelFor...` loads (None: none fits)
    read_inputs(task, path)                        a prediction's input: a file's examples, labels not read
                                                   (None: `predict` does not take this family yet)
    prediction_rows(task, outputs, features, examples)  one readable prediction per example, from the output
                                                   rows of its features
    encode_chunks(examples, tokenizer, cfg, training)  encode's features written straight into columns
                                                   (`feature_cache.EncodedSplit`), a chunk of rows at a time: faster
                                                   and smaller on a large split (None: the cache converts encode's)
    """

    name: str
    summary: str
    read: Callable
    encode: Callable
    collate: Callable
    build_head: Callable
    decode: Callable
    score: Callable
    write_predictions: Callable
    predictions_suffix: str
    length: Callable = lambda feature: len(feature["input_ids"])
    custom: Callable | None = None
    options: type[Settings] = NoOptions
    percent_scores: bool = False
    hf_class: str | None = None
    read_inputs: Callable | None = None
    prediction_rows: Callable | None = None
    encode_chunks: Callable | None = None


def register_task(task) -> None:
    """Add a preset under its name; its family must be registered (or built in). The built-in presets load
    first, so one of the same name is refused now rather than when a later lookup loads it."""
    get_family(task.family)
    TASKS.register(task)


TASK_TYPES = {"classification": "sentence", "regression": "sentence", "tagging": "tagging",
              "multiple-choice": "multiple_choice"}  # --task-type -> its family


@dataclass(frozen=True)
class CustomTask:
    """`--task custom`: the run's own files (--train-file, --validation-file, --test-file), of the kind that
    --task-type names. `bind` hands it to that family, which reads the label set and columns it needs."""

    name: str = "custom"
    max_len: int = 128
    family: str | None = None  # the family that --task-type names, known once bound

    def bind(self, cfg):
        if cfg.task_type not in TASK_TYPES:
            raise choice_error("--task-type for --task custom", cfg.task_type, TASK_TYPES)
        return get_family(TASK_TYPES[cfg.task_type]).custom(cfg)


def run_task(cfg):
    """The run's task: its preset bound to the run's files and options, ready to read (custom: made from them)."""
    preset = get_task(cfg.task)
    if cfg.task_type is not None and preset.name != CustomTask.name:
        raise UsageError(f"--task-type {cfg.task_type} is for --task custom only; {cfg.task} is a preset that knows "
                         f"its own kind")
    return preset.bind(cfg)


def family_of(task: str, task_type: str | None) -> TaskFamily:
    """A run's task family, known without reading a file: its preset's, or the one --task-type names for
    --task custom (a bad or missing --task-type: the one-line error that lists the valid ones)."""
    preset = get_task(task)
    if preset.family is not None:
        return get_family(preset.family)
    if task_type not in TASK_TYPES:
        raise choice_error("--task-type for --task custom", task_type, TASK_TYPES)
    return get_family(TASK_TYPES[task_type])


# The built-in families: each entry builds its family, importing its modules, the first time it is asked for.

def _sentence_family() -> TaskFamily:
    from course_lib.readers import sentence_files
    from course_lib.tasks import sentence
    return TaskFamily(
        sentence.SENTENCE, "classification or regression of a sentence or a pair",
        read=sentence.read, encode=sentence.encode, collate=sentence.collate, build_head=sentence.plain_head,
        decode=sentence.decode, score=sentence.score, write_predictions=sentence.write_predictions,
        predictions_suffix="tsv", custom=sentence_files.custom, options=sentence.SentenceFileOptions,
        hf_class="BertForSequenceClassification", read_inputs=sentence_files.read_inputs,
        prediction_rows=sentence.prediction_rows, encode_chunks=sentence.encode_in_chunks)


def _span_qa_family() -> TaskFamily:
    from course_lib.tasks import span_qa, squad
    return TaskFamily(
        span_qa.SPAN_QA, "span question answering: the answer is a span of the context",
        read=span_qa.read, encode=span_qa.encode, collate=squad.collate_squad, build_head=span_qa.plain_head,
        decode=span_qa.decode, score=span_qa.score, write_predictions=span_qa.write_predictions,
        predictions_suffix="json", options=span_qa.SpanQAOptions, percent_scores=True,
        hf_class="BertForQuestionAnswering", read_inputs=span_qa.read_inputs, prediction_rows=span_qa.prediction_rows)


def _tagging_family() -> TaskFamily:
    from course_lib.tasks import tagging
    return TaskFamily(
        tagging.TAGGING, "token tagging: a tag per word (named entities), scored by entity",
        read=tagging.read, encode=tagging.encode, collate=tagging.collate, build_head=tagging.plain_head,
        decode=tagging.decode, score=tagging.score, write_predictions=tagging.write_predictions,
        predictions_suffix="conll", length=tagging.length, custom=tagging.custom, options=tagging.TaggingFileOptions,
        hf_class="BertForTokenClassification", read_inputs=tagging.read_inputs, prediction_rows=tagging.prediction_rows)


def _multiple_choice_family() -> TaskFamily:
    from course_lib.tasks import multiple_choice as mc
    return TaskFamily(
        mc.MULTIPLE_CHOICE, "multiple choice: one (context, choice) pair encoded per choice",
        read=mc.read, encode=mc.encode, collate=mc.collate, build_head=mc.plain_head, decode=mc.decode,
        score=mc.score, write_predictions=mc.write_predictions, predictions_suffix="tsv", length=mc.length,
        custom=mc.custom, hf_class="BertForMultipleChoice", read_inputs=mc.read_inputs,
        prediction_rows=mc.prediction_rows)


FAMILIES: Registry[TaskFamily] = Registry("task family", {
    "sentence": _sentence_family, "span_qa": _span_qa_family, "tagging": _tagging_family,
    "multiple_choice": _multiple_choice_family})
register_family, get_family, every_family = FAMILIES.register, FAMILIES.get, FAMILIES.every
family_option_owners = FAMILIES.option_readers  # {option: the task families that read it}


def _glue_presets() -> Iterable:
    from course_lib.tasks import glue
    return glue.GLUE_TASKS.values()


def _squad_presets() -> Iterable:
    from course_lib.tasks import span_qa
    return span_qa.SQUAD_TASKS


def _file_presets() -> Iterable:
    from course_lib.readers import sentence_files
    return sentence_files.PRESETS


def _tagging_presets() -> Iterable:
    from course_lib.tasks import tagging
    return tagging.PRESETS


def _multiple_choice_presets() -> Iterable:
    from course_lib.tasks import multiple_choice
    return multiple_choice.PRESETS


def _cs224n_presets() -> Iterable:
    from course_lib.readers import cs224n
    return cs224n.PRESETS


# Each preset has .name, .family, .dev_splits, .num_labels, .is_regression, .max_len, .metrics (its main metric
# first), and .bind(cfg), the preset a run reads. Names compare ignoring case and dashes: 'SST-2' is sst2.
TASKS: Registry = Registry("task", groups=[  # the built-in presets' modules, in listing order
    _glue_presets, _squad_presets, _file_presets, _tagging_presets, _multiple_choice_presets, _cs224n_presets,
    lambda: (CustomTask(),)], loose=True)  # custom last: bound by --task-type to a family (run_task)
get_task, every_task = TASKS.get, TASKS.every
find_task = TASKS.find  # the preset of that name, or None (a results table reading a run of an unknown task)
