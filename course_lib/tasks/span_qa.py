"""The span question-answering family: SQuAD v1.1 and v2.0 are its presets (Rajpurkar et al. 2016, 2018).

The data side (reading, windows, decoding, the official scores) is `course_lib.tasks.squad`'s; here are the
entries a run calls: read a split (the run's --train-file / --validation-file, else $SQUAD_DIR, else the hub),
encode it into windows, the plain span head, decode each question's windows into one answer, score it, write
the official predictions file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import Field

from course_lib.model.heads import SpanHead
from course_lib.readers import squad_json
from course_lib.runtime.errors import UsageError
from course_lib.runtime.settings import Settings
from course_lib.tasks import squad

SPAN_QA = "span_qa"


class SpanQAOptions(Settings):
    """How a span-QA run cuts its inputs (BERT's run_squad.py names both)."""

    doc_stride: int = Field(128, description="span QA: context tokens shared by consecutive windows over a long "
                            "paragraph", gt=0)
    max_query_length: int = Field(64, description="span QA: question tokens kept; longer questions are cut", gt=0)


@dataclass(frozen=True)
class SquadTask:
    """A SQuAD preset. Decoding follows BERT's SQuAD recipe: the best of `n_best` starts and ends, answers of
    at most `max_answer_length` tokens; windows of `max_len` tokens unless the run sets another length."""

    name: str  # squad | squad_v2 | squad_articles
    version: str  # v1.1 | v2.0
    train_articles: int | None = None  # None: the official train and dev files; N: the dev file split by
    #   article, its first N articles to train on and the rest to evaluate on (the offline protocol)
    family: str = SPAN_QA
    dev_splits: tuple[str, ...] = ("dev",)
    num_labels: int = 2  # a start and an end score per token
    is_regression: bool = False
    max_len: int = 384
    n_best: int = 20
    max_answer_length: int = 30

    @property
    def metrics(self) -> tuple[str, ...]:
        return ("exact_match", "f1")

    def bind(self, cfg) -> "SquadTask":
        """The preset for a run: its files come from --train-file / --validation-file (read by `read`)."""
        unread = ("test_file", "data_dir") + (("train_file",) if self.train_articles else ())
        for option in unread:
            if getattr(cfg, option, None):
                raise UsageError(f"--{option.replace('_', '-')} is not read for {self.name}: " + (
                    f"it trains on the first {self.train_articles} articles of the {self.version} dev file; give "
                    "that file as --validation-file, or set SQUAD_DIR" if self.train_articles else
                    "give --train-file and --validation-file, or set SQUAD_DIR"))
        return self


SQUAD_TASKS = (SquadTask("squad", "v1.1"), SquadTask("squad_v2", "v2.0"),
               SquadTask("squad_articles", "v1.1", train_articles=38))


def read(task: SquadTask, split: str, cfg) -> list[squad.QAExample]:
    """The split's questions: the run's own file for it, else $SQUAD_DIR's official file, else the hub. An
    article-split preset reads the dev file only and keeps the side of the cut the split asks for, so that a
    machine without the train file still trains and evaluates on questions of different paragraphs."""
    if task.train_articles is None:
        files = {"train": cfg.train_file, "validation": cfg.validation_file}
        return squad_json.load_squad(task.version, split, {k: v for k, v in files.items() if v} or None)
    source = {"validation": cfg.validation_file} if cfg.validation_file else None
    dev = squad_json.load_squad(task.version, "validation", source)
    first, rest = squad_json.split_by_article(dev, task.train_articles)
    return first if split == "train" else rest


def encode(examples: list[squad.QAExample], tokenizer, cfg, training: bool) -> list[dict]:
    """Windows of the contexts; evaluation windows also hold their question (for decoding and scoring)."""
    options = cfg.task_options
    features = squad.encode_squad(examples, tokenizer, cfg.max_len, options.doc_stride, options.max_query_length,
                                  training=training)
    if not training:
        by_id = {ex.id: ex for ex in examples}
        for feature in features:
            feature["example"] = by_id[feature["example_id"]]
    return features


def plain_head(cfg, encoder, task, tokenizer) -> SpanHead:
    return SpanHead(encoder, task.num_labels)


def _questions(features: list[dict]) -> list[squad.QAExample]:
    return list({f["example_id"]: f["example"] for f in features}.values())


def decode(task: SquadTask, outputs: list[torch.Tensor], features: list[dict]) -> dict[str, dict]:
    """Each question's answer over all its windows: {id: {"text", "score", "null_score_diff"}}."""
    starts, ends = [row[:, 0] for row in outputs], [row[:, 1] for row in outputs]
    return squad.decode_spans(starts, ends, features, _questions(features), task.n_best, task.max_answer_length)


def read_inputs(task: SquadTask, path) -> list[squad.QAExample]:
    """A prediction's input: a SQuAD JSON file, read and checked as training reads it; answers may be left out."""
    return squad_json.read_squad(path, answered=False)


def prediction_rows(task: SquadTask, outputs: list[torch.Tensor], features: list[dict],
                    examples: list[squad.QAExample]) -> list[dict]:
    """One row per question: its id and text, the answer and its first character in the context (SQuAD 2.0: ""
    and -1 where the no-answer score wins, `null_score_diff` > 0), and the answer's score."""
    decoded = decode(task, outputs, features)
    rows = []
    for example in examples:
        answer = decoded.get(example.id, {"text": "", "start": -1, "score": float("nan"), "null_score_diff": 0.0})
        unanswered = squad.get_version(task.version).has_impossible and answer["null_score_diff"] > 0
        rows.append({"id": example.id, "question": example.question, "answer": "" if unanswered else answer["text"],
                     "start": -1 if unanswered else answer["start"], "score": round(answer["score"], 4)})
    return rows


def score(task: SquadTask, predictions: dict[str, dict], features: list[dict]) -> tuple[dict, str | None]:
    """The official scores on a 0-100 scale (v2.0: the no-answer threshold tuned on these questions), and a
    line when every answer is the same (v2.0: after that threshold), e.g. all "no answer": a model that has
    learnt nothing, whose F1 is that of the answer-nothing baseline."""
    texts = {qid: p["text"] for qid, p in predictions.items()}
    impossible = squad.get_version(task.version).has_impossible
    diffs = {qid: p["null_score_diff"] for qid, p in predictions.items()}
    questions = _questions(features)
    scores = squad.squad_scores(texts, questions, task.version, diffs if impossible else None)
    answers = squad.apply_null_threshold(predictions, scores["best_f1_thresh"]) if impossible else texts
    return scores, None if all(q.is_impossible for q in questions) else _one_answer(answers)


def _one_answer(answers: dict[str, str]) -> str | None:
    """The problem line when every question got the same answer, or None."""
    distinct = set(answers.values())
    if len(answers) < 2 or len(distinct) != 1:
        return None
    text = next(iter(distinct))
    return (f"all {len(answers)} answers are no answer: the scores are those of answering nothing" if text == ""
            else f"all {len(answers)} answers are {text!r}")


def write_predictions(path: Path, task: SquadTask, predictions: dict[str, dict], scores: dict) -> None:
    """The official layout {id: answer}; for v2.0 the answers after the no-answer threshold the scores chose
    (`best_f1_thresh`), and the null-odds file beside it for the official script."""
    if not squad.get_version(task.version).has_impossible:
        squad.write_squad_predictions(path, {qid: p["text"] for qid, p in predictions.items()})
        return
    answers = squad.apply_null_threshold(predictions, scores["best_f1_thresh"])
    squad.write_squad_predictions(path, answers, {qid: p["null_score_diff"] for qid, p in predictions.items()})
