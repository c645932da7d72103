"""The sentence family: classification or regression of a sentence or a pair. GLUE's tasks are its presets, and
reading and tokenising them is `course_lib.tasks.glue`'s; here are the run-facing entries: the reader and encoder
the run calls, the plain head, how logits become predictions, how they are scored and written."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import torch

from course_lib.model.heads import SequenceClassifier
from course_lib.repro import atomic_write
from course_lib.tasks import glue
from course_lib.tasks.metrics import compute_metrics, degenerate_predictions


def read(task, split: str, cfg) -> list:
    """A split of the preset's examples, as the preset reads it (GLUE: its folder or the hub; a file-backed
    preset: the run's file, its folder or the hub)."""
    return task.load(split, cfg)


def encode(examples: list, tokenizer, cfg, training: bool = True) -> list[dict]:
    return glue.encode(examples, tokenizer, cfg.max_len)


def plain_head(cfg, encoder, task, tokenizer) -> SequenceClassifier:
    """Plain fine-tuning's task model: dropout and a linear layer on the pooled [CLS] (Devlin et al. 2019)."""
    return SequenceClassifier(encoder, task.num_labels, cfg.classifier_dropout)


def decode(task, outputs: list[torch.Tensor], features: list[dict]) -> torch.Tensor:
    """Each feature's logits row -> its class id, or its score for a one-output regressor (as floats)."""
    if not outputs:
        return torch.empty(0)
    logits = torch.stack(outputs)  # (N, C)
    return (logits.squeeze(-1) if logits.shape[-1] == 1 else logits.argmax(-1)).float()


def score(task, predictions: torch.Tensor, features: list[dict]) -> tuple[dict[str, float], str | None]:
    """The task's metrics (GLUE's names: accuracy, f1, matthews_correlation, pearson, spearmanr), and a line
    when the predictions are all one class or constant (a score that reads like a result but is not one)."""
    labels = [f["label"] for f in features]
    preds = predictions.numpy() if task.is_regression else predictions.long().numpy()
    return compute_metrics(task.metrics, preds, labels), degenerate_predictions(preds, labels, task.label_names)


def write_predictions(path: Path, task, predictions: torch.Tensor, scores: dict) -> None:
    """GLUE's submission layout: a header `index<TAB>prediction`, then one row per example in file order, with
    the class as the task's files name it (entailment, 1, ...) or the score."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(["index", "prediction"])
    values = predictions.tolist()
    for i, value in enumerate(values):
        writer.writerow([i, f"{value:.6g}" if task.is_regression else task.label_names[int(value)]])
    atomic_write(path, lambda f: f.write(buffer.getvalue().encode()))

