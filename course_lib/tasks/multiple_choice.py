"""The multiple-choice family: a context, a question and C candidate answers, one of them right. DREAM (Sun et al.
2019, dialogues), HellaSWAG (Zellers et al. 2019) and SWAG (Zellers et al. 2018, sentence endings) are its presets.

As BERT did for SWAG (Devlin et al. 2019, Sec. 4.4), each question becomes C sequence pairs
`[CLS] context [SEP] question choice [SEP]`, encoded on their own; a linear layer scores each pair's pooled [CLS]
and a softmax over the C scores picks the answer (`heads.MultipleChoiceHead`). A long context is cut from its end
so that every choice is kept whole: the choices are what the model compares.

Its three file layouts (DREAM's JSON, HellaSWAG's JSON lines, SWAG's CSV) are read by `readers/choice_files.py`.
`--task custom --task-type multiple-choice` reads the run's own files in the layout their suffix names.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from course_lib.model.heads import MultipleChoiceHead
from course_lib.readers import sources
from course_lib.readers.choice_files import FORMATS, ChoiceQuestion, checked_split
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import atomic_write
from course_lib.tasks.batching import pad_tokens
from course_lib.tasks.metrics import compute_metrics

MULTIPLE_CHOICE = "multiple_choice"


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
    return checked_split(FORMATS[task.format].read_file(path, labelled=False), str(path))


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
    return sources.read_split(task, split, lambda path: checked_split(fmt.read_file(path), str(path)),
                              lambda rows: checked_split(fmt.from_hub(rows, origin), origin))


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
