"""Multiple-choice questions read from their files, each layout read strictly (a bad entry is one line naming the file,
the line or entry, and what is valid), and each also from its `datasets` hub copy when no file is given:

    dream      .json    a JSON list of [turns, questions, dialogue_id]; a question is
                        {"question", "choice": [3 texts], "answer": the right choice's text}
    hellaswag  .jsonl   one object per line: ctx, endings (4 texts), label (an index, maybe as a string)
    swag       .csv     a header with sent1, sent2, ending0..ending3, label; the choices are sent2 + ending_i

What is done with a question (its encoded pairs, the head, accuracy) is `tasks/multiple_choice.py`.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from course_lib.readers import sources
from course_lib.runtime.errors import UsageError


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


def checked_split(located: Located, origin: str) -> list[ChoiceQuestion]:
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
