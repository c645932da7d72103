"""The multiple-choice family: a context, a question and C candidate answers, one of them right. DREAM (Sun et al.
2019, dialogues), HellaSWAG (Zellers et al. 2019) and SWAG (Zellers et al. 2018, sentence endings) are its presets.

As BERT did for SWAG (Devlin et al. 2019, Sec. 4.4), each question becomes C sequence pairs
`[CLS] context [SEP] question choice [SEP]`, encoded on their own; a linear layer scores each pair's pooled [CLS]
and a softmax over the C scores picks the answer (`heads.MultipleChoiceHead`). A long context is cut from its end
so that every choice is kept whole: the choices are what the model compares.

Three file layouts, each read strictly (a bad entry is one line naming the file, the line or entry, and what is
valid), and each also read from its `datasets` hub copy when no file is given:

    dream      .json    a JSON list of [turns, questions, dialogue_id]; a question is
                        {"question", "choice": [3 texts], "answer": the right choice's text}
    hellaswag  .jsonl   one object per line: ctx, endings (4 texts), label (an index, maybe as a string)
    swag       .csv     a header with sent1, sent2, ending0..ending3, label; the choices are sent2 + ending_i

`--task custom --task-type multiple-choice` reads the run's own files in the layout their suffix names.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from course_lib.runtime.errors import UsageError
from course_lib.model.heads import MultipleChoiceHead
from course_lib.runtime.repro import atomic_write
from course_lib.readers import sources
from course_lib.tasks.batching import pad_tokens
from course_lib.tasks.metrics import compute_metrics

MULTIPLE_CHOICE = "multiple_choice"


@dataclass(frozen=True)
class ChoiceQuestion:
    """One question: the context (a dialogue, the start of a story), the question (empty for HellaSWAG; SWAG's
    second sentence, which every ending continues), the candidate answers and the right one's index."""

    id: str
    context: str
    question: str
    choices: tuple[str, ...]
    label: int


Located = list[tuple[str, ChoiceQuestion]]  # each question with where it was read ("file:line"), for errors


# ----------------------------------------------------------------------------------------------
# Checking one record's fields


def _field(record, key: str, expected: tuple[str, ...], where: str):
    """record[key], or one line naming the missing key and the ones a record of this layout has."""
    if not isinstance(record, dict):
        raise UsageError(f"{where}: expected an object with {', '.join(expected)}, got {type(record).__name__}")
    if record.get(key) is None:
        raise UsageError(f"{where}: missing {key!r} (expected {', '.join(expected)})")
    return record[key]


def _text(value, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{where}: {what} must be text, got {json.dumps(value)[:60]}")
    return value


def _texts(value, what: str, where: str) -> tuple[str, ...]:
    """A list of at least two texts (the choices), or one line saying what it is instead."""
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: {what} must be a list of at least 2 texts, got {json.dumps(value)[:60]}")
    return tuple(value)


def _label(value, n_choices: int, where: str, labelled: bool = True) -> int:
    """The right choice's index from an int or a digit string, within 0..n_choices-1; 0 for a question to
    predict that has none (labelled False)."""
    valid = f"valid: 0 to {n_choices - 1}"
    if not labelled and (value is None or value == ""):
        return 0
    if value is None or value == "":
        raise UsageError(f"{where}: no label ({valid}); every split a run reads is scored, so give a labelled "
                         f"file (the official HellaSWAG and SWAG test files have no labels)")
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, bool) or not (isinstance(text, int) or (isinstance(text, str) and text.lstrip("-").isdigit())):
        raise UsageError(f"{where}: label {value!r} is not a choice index ({valid})")
    label = int(text)
    if not 0 <= label < n_choices:
        raise UsageError(f"{where}: label {label} is out of range ({valid})")
    return label


# ----------------------------------------------------------------------------------------------
# DREAM: dialogues, several questions each, the answer given as the right choice's text

DREAM_KEYS = ("question", "choice", "answer")


def _dream_question(turns, item, dialogue_id, index: int, where: str, labelled: bool = True) -> ChoiceQuestion:
    """One DREAM question; its label is the position of the choice whose text is the answer (the first for a
    question to predict without one)."""
    question = _text(_field(item, "question", DREAM_KEYS, where), "the question", where)
    choices = _texts(_field(item, "choice", DREAM_KEYS, where), "'choice'", where)
    answer = _field(item, "answer", DREAM_KEYS, where) if labelled or item.get("answer") is not None else choices[0]
    if answer not in choices:
        raise UsageError(f"{where}: answer {answer!r} is not one of its choices")
    if not isinstance(turns, list) or not all(isinstance(turn, str) for turn in turns):
        raise UsageError(f"{where}: the dialogue must be a list of texts (its turns), got {json.dumps(turns)[:60]}")
    return ChoiceQuestion(f"{dialogue_id}-{index}", "\n".join(turns), question, choices, choices.index(answer))


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text ({err.reason})") from None


def read_dream(path: Path, labelled: bool = True) -> Located:
    """The official DREAM layout: a list of [turns, questions, dialogue_id]; ids are '<dialogue_id>-<question>'."""
    entries = _load_json(path)
    if not isinstance(entries, list):
        raise UsageError(f"{path}: expected a JSON list of [turns, questions, dialogue_id] entries, "
                         f"got {type(entries).__name__}")
    located = []
    for i, entry in enumerate(entries):
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[1], list)):
            raise UsageError(f"{path}: entry {i}: expected [turns, questions, dialogue_id], "
                             f"got {json.dumps(entry)[:60]}")
        turns, items, dialogue_id = entry
        for j, item in enumerate(items):
            where = f"{path}: entry {i} question {j}"
            located.append((where, _dream_question(turns, item, dialogue_id, j, where, labelled)))
    return located


def dream_from_hub(rows: list[dict], origin: str) -> Located:
    """`dataset-org/dream` rows, one per question (dialogue, question, choice, answer, dialogue_id); a question's
    index within its dialogue is counted in row order, so the ids are those of the files."""
    counts: dict[str, int] = {}
    located = []
    for r, row in enumerate(rows):
        where = f"{origin} row {r}"
        dialogue_id = str(_field(row, "dialogue_id", ("dialogue", *DREAM_KEYS, "dialogue_id"), where))
        index = counts[dialogue_id] = counts.get(dialogue_id, -1) + 1
        located.append((where, _dream_question(row.get("dialogue"), row, dialogue_id, index, where)))
    return located


# ----------------------------------------------------------------------------------------------
# HellaSWAG: a context and its endings

HELLASWAG_KEYS = ("ctx", "endings", "label")


def _hellaswag_question(record, fallback_id: str, where: str, labelled: bool = True) -> ChoiceQuestion:
    """One HellaSWAG line: the context is `ctx`, each ending a choice, no question; id `ind` when it has one."""
    context = _text(_field(record, "ctx", HELLASWAG_KEYS, where), "'ctx'", where)
    endings = _texts(_field(record, "endings", HELLASWAG_KEYS, where), "'endings'", where)
    qid = str(record.get("ind", fallback_id))
    return ChoiceQuestion(qid, context, "", endings, _label(record.get("label"), len(endings), where, labelled))


def read_hellaswag(path: Path, labelled: bool = True) -> Located:
    """The official JSONL layout (hellaswag_train.jsonl, hellaswag_val.jsonl); blank lines are skipped."""
    return [(where, _hellaswag_question(record, where.rsplit(":", 1)[1], where, labelled))
            for where, record in sources.jsonl_records(path)]


def hellaswag_from_hub(rows: list[dict], origin: str) -> Located:
    """`Rowan/hellaswag` rows: the same fields as the files (the label as a string)."""
    return [(f"{origin} row {r}", _hellaswag_question(row, str(r), f"{origin} row {r}")) for r, row in enumerate(rows)]


# ----------------------------------------------------------------------------------------------
# SWAG: a first sentence, the start of the second, and its candidate endings

SWAG_EXPECTED = "sent1, sent2, ending0..ending3, label"


def _ending_columns(columns) -> list[str]:
    """ending0, ending1, ... as far as they go without a gap (SWAG has 4)."""
    names = []
    while f"ending{len(names)}" in columns:
        names.append(f"ending{len(names)}")
    return names


def _swag_question(record: dict, endings: list[str], qid: str, where: str, labelled: bool = True) -> ChoiceQuestion:
    """One SWAG row: the context is sent1; every choice continues sent2, so sent2 is the question part."""
    context = _text(_field(record, "sent1", ("sent1", "sent2", *endings, "label"), where), "'sent1'", where)
    start = _text(_field(record, "sent2", ("sent1", "sent2", *endings, "label"), where), "'sent2'", where)
    choices = tuple(_text(_field(record, name, ("sent1", "sent2", *endings, "label"), where), f"{name!r}", where)
                    for name in endings)
    return ChoiceQuestion(qid, context, start, choices, _label(record.get("label"), len(choices), where, labelled))


def _swag_endings(columns, where: str, labelled: bool = True) -> list[str]:
    """The ending columns, after checking that the header has every column a SWAG row needs."""
    endings = _ending_columns(columns)
    for name in ("sent1", "sent2", "ending0", "ending1", *(("label",) if labelled else ())):
        if name not in columns:
            raise UsageError(f"{where}: missing {name!r} (expected {SWAG_EXPECTED})")
    return endings


def read_swag(path: Path, labelled: bool = True) -> Located:
    """The official CSV layout (train.csv, val.csv); ids are the rows' positions, 0 first, as on the hub."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text ({err.reason})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    endings = _swag_endings(reader.fieldnames or [], f"{path}:1", labelled)
    located = []
    for r, record in enumerate(reader):
        where = f"{path}:{reader.line_num}"
        located.append((where, _swag_question(record, endings, str(r), where, labelled)))
    return located


def swag_from_hub(rows: list[dict], origin: str) -> Located:
    """`allenai/swag` (configuration `regular`) rows: the files' columns, the label as an int."""
    endings = _swag_endings(rows[0] if rows else {}, f"{origin} row 0")
    return [(f"{origin} row {r}", _swag_question(row, endings, str(r), f"{origin} row {r}"))
            for r, row in enumerate(rows)]


# ----------------------------------------------------------------------------------------------
# The layouts by name, and a split's checks


@dataclass(frozen=True)
class ChoiceFormat:
    """A file layout of multiple-choice questions: the suffix `--task custom` knows it by, and its readers (a
    file, or the hub's rows), each giving the questions with where they were read."""

    name: str
    suffix: str
    read_file: Callable[[Path], Located]
    from_hub: Callable[[list[dict], str], Located]


FORMATS = {f.name: f for f in (ChoiceFormat("dream", ".json", read_dream, dream_from_hub),
                               ChoiceFormat("hellaswag", ".jsonl", read_hellaswag, hellaswag_from_hub),
                               ChoiceFormat("swag", ".csv", read_swag, swag_from_hub))}


def _checked(located: Located, origin: str) -> list[ChoiceQuestion]:
    """A split's questions, refused when it has none or when its questions differ in their number of choices
    (a batch is a (B, C, L) block, so C is the split's)."""
    if not located:
        raise UsageError(f"{origin}: holds no questions")
    first_where, first = located[0]
    for where, question in located:
        if len(question.choices) != len(first.choices):
            raise UsageError(f"{where}: {len(question.choices)} choices, but {first_where} has "
                             f"{len(first.choices)} (every question of a split needs the same number)")
    return [question for _, question in located]


# ----------------------------------------------------------------------------------------------
# Presets


@dataclass(frozen=True)
class ChoiceTask:
    """A multiple-choice preset: the layout of its files (`format`, a key of FORMATS), where they are found,
    one score per choice (num_labels 1), accuracy. `bind` resolves its files for a run into `paths`."""

    name: str
    format: str
    source: sources.Source
    family: str = MULTIPLE_CHOICE
    dev_splits: tuple[str, ...] = ("dev",)
    num_labels: int = 1  # one score per (context, choice) pair; the softmax runs over the choices
    is_regression: bool = False
    max_len: int = 128
    metrics: tuple[str, ...] = ("accuracy",)
    paths: dict | None = None  # split -> file (None: the hub), once bound

    def bind(self, cfg) -> ChoiceTask:
        paths = sources.split_paths(self.source, cfg)
        return replace(self, paths=paths, dev_splits=("dev", "test") if "test" in paths else ("dev",))


PRESETS = (
    ChoiceTask("dream", "dream", sources.Source(
        files={"train": "train.json", "dev": "dev.json", "test": "test.json"}, env="DREAM_DIR",
        hub="dataset-org/dream", labelled_test=True)),
    ChoiceTask("hellaswag", "hellaswag", sources.Source(
        files={"train": "hellaswag_train.jsonl", "dev": "hellaswag_val.jsonl"}, env="HELLASWAG_DIR",
        hub="Rowan/hellaswag")),  # its test split has no labels
    ChoiceTask("swag", "swag", sources.Source(
        files={"train": "train.csv", "dev": "val.csv"}, env="SWAG_DIR", hub="allenai/swag",
        hub_config="regular")),  # its test split has no labels
)


def custom(cfg) -> ChoiceTask:
    """`--task custom --task-type multiple-choice`: the run's files, in the layout the training file's suffix
    names (.json DREAM, .jsonl HellaSWAG, .csv SWAG); the other files must have the same suffix."""
    by_suffix = {f.suffix: f.name for f in FORMATS.values()}
    valid = ", ".join(f"{f.suffix} ({f.name})" for f in FORMATS.values())
    if not cfg.train_file:
        raise UsageError(f"--task custom --task-type multiple-choice needs --train-file (a file of suffix {valid})")
    if getattr(cfg, "data_dir", None):
        raise UsageError("--data-dir is not read for --task custom: give --train-file and --validation-file")
    suffix = Path(cfg.train_file).suffix.lower()
    if suffix not in by_suffix:
        raise UsageError(f"--train-file {cfg.train_file!r}: unknown suffix {suffix or '(none)'!r} for "
                         f"multiple-choice questions (valid: {valid})")
    for option in ("validation_file", "test_file"):
        given = getattr(cfg, option, None)
        if given and Path(given).suffix.lower() != suffix:
            raise UsageError(f"--{option.replace('_', '-')} {given!r} is not a {suffix} file like --train-file "
                             f"(all of a run's files are in one layout: {by_suffix[suffix]})")
    return ChoiceTask("custom", by_suffix[suffix], sources.Source()).bind(cfg)


def read_inputs(task: ChoiceTask, path) -> list[ChoiceQuestion]:
    """A prediction's input: a file in the run's layout (DREAM JSON, HellaSWAG JSON lines, SWAG CSV), read and
    checked as training reads it; the answers may be left out."""
    path = Path(path)
    return _checked(FORMATS[task.format].read_file(path, labelled=False), str(path))


def prediction_rows(task: ChoiceTask, outputs: list[torch.Tensor], features: list[dict],
                    examples: list[ChoiceQuestion]) -> list[dict]:
    """One row per question: its id, the chosen choice's index and text, and its probability over the choices."""
    rows = []
    for question, scores in zip(examples, outputs):
        probabilities = scores.softmax(-1)
        best = int(probabilities.argmax())
        rows.append({"id": question.id, "choice": best, "answer": question.choices[best],
                     "probability": round(float(probabilities[best]), 6)})
    return rows


def read(task: ChoiceTask, split: str, cfg) -> list[ChoiceQuestion]:
    """The split's questions: the run's file, else the preset's folder, else its hub copy."""
    fmt = FORMATS[task.format]
    origin = f"{task.source.hub} {split}"
    return sources.read_split(task, split, lambda path: _checked(fmt.read_file(path), str(path)),
                              lambda rows: _checked(fmt.from_hub(rows, origin), origin))


# ----------------------------------------------------------------------------------------------
# Features and batches


def _second(question: ChoiceQuestion, choice: str) -> str:
    """The second segment of a pair: the question followed by the choice (just the choice without one)."""
    return f"{question.question} {choice}" if question.question else choice


def _encode_pairs(tokenizer, firsts: list[str], seconds: list[str], max_len: int) -> list[tuple[list, list]]:
    """(input_ids, token_type_ids) of each pair, at most max_len tokens: the context is cut and the choice kept
    ('only_first'), unless the choice alone leaves no room for a context token; then both are cut
    ('longest_first'). Two tokenizer calls, not one per pair."""
    room = max_len - tokenizer.num_special_tokens_to_add(pair=True)
    lengths = [len(ids) for ids in tokenizer(seconds, add_special_tokens=False)["input_ids"]]
    out: list = [None] * len(firsts)
    for strategy, keep in (("only_first", lambda n: n < room), ("longest_first", lambda n: n >= room)):
        rows = [i for i, n in enumerate(lengths) if keep(n)]
        if not rows:
            continue
        ids = tokenizer([firsts[i] for i in rows], [seconds[i] for i in rows], truncation=strategy,
                        max_length=max_len)
        for i, input_ids, type_ids in zip(rows, ids["input_ids"], ids["token_type_ids"]):
            out[i] = (input_ids, type_ids)
    return out


def encode(examples: list[ChoiceQuestion], tokenizer, cfg, training: bool, chunk_size: int = 1024) -> list[dict]:
    """A feature per question: {"input_ids": C lists, "token_type_ids": C lists, "label"}; evaluation features
    also keep the question (its id and choice texts go into the predictions file). Chunks of questions go to the
    fast tokenizer at once, far faster than a call per pair."""
    if cfg.max_len < 5:
        raise UsageError(f"max_len must be at least 5 for multiple choice ([CLS], two [SEP] and a token of the "
                         f"context and of the choice), got {cfg.max_len}")
    features = []
    for start in range(0, len(examples), chunk_size):
        chunk = examples[start:start + chunk_size]
        firsts = [ex.context for ex in chunk for _ in ex.choices]
        seconds = [_second(ex, choice) for ex in chunk for choice in ex.choices]
        pairs = iter(_encode_pairs(tokenizer, firsts, seconds, cfg.max_len))
        for ex in chunk:
            encoded = [next(pairs) for _ in ex.choices]
            feature = {"input_ids": [ids for ids, _ in encoded], "token_type_ids": [types for _, types in encoded],
                       "label": ex.label}
            if not training:
                feature["question"] = ex
            features.append(feature)
    return features


def length(feature: dict) -> int:
    """The longest of its pairs: what the batch pads every pair to."""
    return max(len(ids) for ids in feature["input_ids"])


def collate(features: list[dict], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask, token_type_ids (B, C, L), padded to the batch's longest pair; labels (B,)."""
    B, C = len(features), len(features[0]["input_ids"])
    if any(len(f["input_ids"]) != C for f in features):
        raise ValueError(f"a batch mixes questions with different numbers of choices (the first has {C})")
    pairs = [{"input_ids": ids, "token_type_ids": types}
             for f in features for ids, types in zip(f["input_ids"], f["token_type_ids"])]
    batch = {k: v.view(B, C, -1) for k, v in pad_tokens(pairs, pad_id).items()}  # (B * C, L) -> (B, C, L)
    batch["labels"] = torch.tensor([f["label"] for f in features], dtype=torch.long)  # (B,)
    return batch


def plain_head(cfg, encoder, task, tokenizer) -> MultipleChoiceHead:
    """Plain fine-tuning's task model: a score per (context, choice) pair, a softmax over the choices."""
    return MultipleChoiceHead(encoder, task.num_labels, cfg.classifier_dropout)


# ----------------------------------------------------------------------------------------------
# Predictions, scores and the predictions file


@dataclass(frozen=True)
class ChoicePredictions:
    """The chosen index of each question (N,), with the questions, so the predictions file can name them."""

    indices: torch.Tensor
    questions: tuple[ChoiceQuestion, ...]


def decode(task: ChoiceTask, outputs: list[torch.Tensor], features: list[dict]) -> ChoicePredictions:
    """Each question's highest-scoring choice; outputs[i] is question i's C scores."""
    indices = torch.stack(outputs).argmax(-1) if outputs else torch.empty(0, dtype=torch.long)  # (N,)
    return ChoicePredictions(indices, tuple(f["question"] for f in features))


def score(task: ChoiceTask, predictions: ChoicePredictions, features: list[dict]) -> tuple[dict, str | None]:
    """Accuracy, and a line when every question got the same choice index while the answers vary: the score of
    always answering that index, not of reading the questions."""
    chosen, labels = predictions.indices.tolist(), [f["label"] for f in features]
    problem = None
    if len(chosen) > 1 and len(set(chosen)) == 1 and len(set(labels)) > 1:
        problem = (f"all {len(chosen)} predictions are choice {chosen[0]}: the accuracy is that of always "
                   f"answering choice {chosen[0]}")
    return compute_metrics(task.metrics, chosen, labels), problem


def write_predictions(path: Path, task: ChoiceTask, predictions: ChoicePredictions, scores: dict) -> None:
    """A TSV with a header, one row per question in file order: id, the predicted and the right choice's index,
    then both choices' texts."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(["id", "prediction", "answer", "prediction_text", "answer_text"])
    for chosen, question in zip(predictions.indices.tolist(), predictions.questions):
        writer.writerow([question.id, chosen, question.label, question.choices[chosen],
                         question.choices[question.label]])
    atomic_write(path, lambda f: f.write(buffer.getvalue().encode()))
