"""CoNLL files, read strictly: a token per line, its tag in the last column (CoNLL-2003 has part-of-speech and chunk
columns in between), whitespace-separated, a blank line between sentences, `-DOCSTART-` lines skipped. Tags come in
IOB1 (CoNLL-2003's original files: `I-x` opens an entity unless it follows one of the same type) or IOB2 (WNUT-17,
the hub's copies: every entity opens with `B-x`); the reader always converts to IOB2, which leaves IOB2 as it is.
Every problem is one line naming the file and line. What is done with a sentence (first sub-word labels, entity
scores) is `tasks/tagging.py`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from course_lib.runtime.errors import UsageError


OUTSIDE = "O"


DOCSTART = "-DOCSTART-"  # CoNLL-2003's document boundary line: not a token


TAG_FORM = re.compile(r"O|[BI]-\S+")  # O, or B-/I- and an entity type


EXPECTED_LINE = "expected 'token ... tag'"


@dataclass(frozen=True)
class TaggedSentence:
    """One sentence: its words, their IOB2 tags, and the tags' ids in the task's label set (empty when read
    without one, to find the label set of a file)."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    tag_ids: tuple[int, ...] = ()


def to_iob2(tags) -> tuple[str, ...]:
    """IOB1 -> IOB2: an I-x that opens an entity (after O, or after a tag of another type) becomes B-x. IOB2
    comes back unchanged."""
    out, previous = [], OUTSIDE
    for tag in tags:
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            tag = "B-" + tag[2:]
        out.append(tag)
        previous = tag
    return tuple(out)


def _token_lines(path: Path):
    """Each sentence's token lines as [(line number, token, tag)]: blank lines end a sentence, -DOCSTART- lines
    are skipped, and every token line must have the same number of columns (two at least)."""
    block, first = [], None
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                fields = raw.decode("utf-8").lstrip("\ufeff").split()
            except UnicodeDecodeError:
                raise UsageError(f"{path}:{line_no}: not UTF-8 text") from None
            if not fields or fields[0] == DOCSTART:
                if block:
                    yield block
                block = []
                continue
            if len(fields) < 2:
                raise UsageError(f"{path}:{line_no}: {fields[0]!r} has no tag ({EXPECTED_LINE})")
            first = first or (len(fields), line_no)
            if len(fields) != first[0]:
                raise UsageError(f"{path}:{line_no}: {len(fields)} columns, but line {first[1]} has {first[0]} "
                                 f"({EXPECTED_LINE}, the same columns on every line)")
            block.append((line_no, fields[0], fields[-1]))
    if block:
        yield block


def check_tag(where: str, tag: str, label_names: tuple[str, ...] | None) -> None:
    if not TAG_FORM.fullmatch(tag):
        raise UsageError(f"{where}: malformed tag {tag!r} (expected O, B-type or I-type)")
    if label_names is not None and tag not in label_names:
        raise UsageError(f"{where}: unknown tag {tag!r} (valid: {', '.join(label_names)})")


def read_conll(path, label_names: tuple[str, ...] | None = None) -> list[TaggedSentence]:
    """A CoNLL file's sentences, tags converted to IOB2 and, given a label set, checked against it and turned into
    ids. Every problem is one line naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file ({EXPECTED_LINE} lines, a blank line between sentences)")
    ids = {name: i for i, name in enumerate(label_names)} if label_names is not None else None
    sentences = []
    for block in _token_lines(path):
        for line_no, _, tag in block:
            check_tag(f"{path}:{line_no}", tag, label_names)
        tags = to_iob2(tag for _, _, tag in block)
        sentences.append(TaggedSentence(tuple(word for _, word, _ in block), tags,
                                        tuple(ids[t] for t in tags) if ids is not None else ()))
    if not sentences:
        raise UsageError(f"{path}: no sentences ({EXPECTED_LINE} lines, a blank line between sentences)")
    return sentences
