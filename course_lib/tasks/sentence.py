"""The sentence family: classification or regression of a sentence or a pair. GLUE's tasks are its presets
(reading them is `course_lib.tasks.glue`'s; other files' `sentence_files`'). Here: the example, its tokenisation
and batches, and the run-facing entries: the reader and encoder the run calls, the plain head, how logits
become predictions, how they are scored and written."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from course_lib.model.heads import SequenceClassifier
from course_lib.readers.sentence_rows import SENTENCE, Example
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import atomic_write
from course_lib.runtime.settings import Settings
from course_lib.tasks.batching import pad_tokens
from course_lib.tasks.metrics import compute_metrics, degenerate_predictions

class SentenceFileOptions(Settings):
    """What a run's own sentence files hold (`--task custom`, `sentence_files.custom`): a preset knows its columns
    and labels, so it refuses these rather than ignore them (`refuse_for`)."""

    text_columns: str | None = Field(None, description=
        'sentence files: the text column, or two for a pair ("sentence1,sentence2")')
    label_column: str | None = Field(None, description='sentence files: the label column (default "label")')
    labels: str | None = Field(None, description=
        "custom files: the label set, comma list (None: the training file's; for classification sorted, numbers as "
        "numbers; for tagging O, then B-type and I-type of every type it tags)")

    def refuse_for(self, preset: str, columns: tuple[str, ...]) -> None:
        """One line naming the first option given, for a preset that reads its own `columns`."""
        given = next((name for name in type(self).model_fields if getattr(self, name)), None)
        if given:
            raise UsageError(f"--{given.replace('_', '-')} is for --task custom; {preset} reads its own columns "
                             f"({', '.join(columns)})")





def encode_examples(examples: list[Example], tokenizer, max_len: int, chunk_size: int = 4096) -> list[dict]:
    """Token ids for each example: [CLS] a [SEP] (b [SEP]), truncated to `max_len` tokens.

    Pairs are truncated longest-first (the tokenizer's default), as BERT did for GLUE. The fast
    tokenizer is called on chunks of examples because one call per example is ~20x slower.
    """
    _check_encodable(examples, max_len)
    features = []
    for start in range(0, len(examples), chunk_size):
        chunk = examples[start:start + chunk_size]
        columns = list(zip(*(ex.texts for ex in chunk)))  # one tuple of texts per text column
        ids = tokenizer(*(list(c) for c in columns), truncation=True, max_length=max_len)
        features += [
            {"input_ids": input_ids, "token_type_ids": token_type_ids, "label": ex.label}
            for input_ids, token_type_ids, ex in zip(ids["input_ids"], ids["token_type_ids"], chunk)
        ]
    return features


def _check_encodable(examples: list[Example], max_len: int) -> None:
    if max_len < 4:
        raise UsageError(f"max_len must be at least 4 (room for [CLS], [SEP] and text), got {max_len}")
    if len({len(ex.texts) for ex in examples}) > 1:
        raise ValueError("examples mix single sentences and pairs; encode one task's split at a time")


def encode_chunks(examples: list[Example], tokenizer, max_len: int, chunk_size: int = 1024):
    """`encode_examples`'s features, the same ids from the same tokenizer call, as columns of flat arrays
    (`feature_cache.EncodedSplit`), a chunk of examples at a time: the cache writes each chunk to disk as it
    comes, so on a large training set (MNLI's 393k pairs) no Python object per token is ever kept. None when the
    labels are not all class ids or all scores (an unlabelled test split): those features are not cached."""
    from course_lib.runtime import feature_cache  # here: a notebook's first cell loads the lesson, not the cache

    _check_encodable(examples, max_len)
    if feature_cache.column([ex.label for ex in examples]) is None:
        return None
    ids = np.uint16 if len(tokenizer) <= 2**16 else np.int32

    def chunks():
        for start in range(0, len(examples), chunk_size):
            chunk = examples[start:start + chunk_size]
            encoded = tokenizer(*(list(c) for c in zip(*(ex.texts for ex in chunk))), truncation=True,
                                max_length=max_len, return_attention_mask=False)
            yield feature_cache.EncodedSplit({
                "input_ids": ("ints", feature_cache.ragged(encoded["input_ids"], ids)),
                "token_type_ids": ("ints", feature_cache.ragged(encoded["token_type_ids"], np.int8)),
                "label": feature_cache.column([ex.label for ex in chunk])}, len(chunk))
    return chunks()


def collate(features: list[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Pad a batch to its own longest sequence (dynamic padding), not to max_len.

    labels are long class ids, or float scores when any label is a float (STS-B regression).
    """
    batch = pad_tokens(features, pad_token_id)  # input_ids, attention_mask, token_type_ids: (B, L)
    labels = [f["label"] for f in features]
    is_score = any(isinstance(y, float) for y in labels)
    batch["labels"] = torch.tensor(labels, dtype=torch.float if is_score else torch.long)  # (B,)
    B, L = batch["input_ids"].shape
    if "token_labels" in features[0]:  # per-token targets (SSA), padded with the ignore index -1
        batch["token_labels"] = torch.full((B, L), -1, dtype=torch.long)
        for b, f in enumerate(features):
            batch["token_labels"][b, : len(f["token_labels"])] = torch.tensor(f["token_labels"])
    return batch


def read(task, split: str, cfg) -> list:
    """A split of the preset's examples, as the preset reads it (GLUE: its folder or the hub; a file-backed
    preset: the run's file, its folder or the hub)."""
    return task.load(split, cfg)


def encode(examples: list, tokenizer, cfg, training: bool = True) -> list[dict]:
    return encode_examples(examples, tokenizer, cfg.max_len)


def encode_in_chunks(examples: list, tokenizer, cfg, training: bool = True):
    """The family's `encode_chunks` entry (`feature_cache.cached` writes the chunks as they come)."""
    return encode_chunks(examples, tokenizer, cfg.max_len)


def plain_head(cfg, encoder, task, tokenizer) -> SequenceClassifier:
    """Plain fine-tuning's task model: dropout and a linear layer on the pooled [CLS] (Devlin et al. 2019)."""
    return SequenceClassifier(encoder, task.num_labels, cfg.classifier_dropout)


def decode(task, outputs: list[torch.Tensor], features: list[dict]) -> torch.Tensor:
    """Each feature's logits row -> its class id, or its score for a one-output regressor (as floats)."""
    if not outputs:
        return torch.empty(0)
    logits = torch.stack(outputs)  # (N, C)
    return (logits.squeeze(-1) if logits.shape[-1] == 1 else logits.argmax(-1)).float()


def prediction_rows(task, outputs: list[torch.Tensor], features: list[dict], examples: list[Example]) -> list[dict]:
    """One row per example: its texts, then the class the model picks (as the task's files name it) and its
    probability, or its score."""
    rows = []
    for example, logits in zip(examples, outputs):
        row = dict(zip(task.text_columns, example.texts))
        if task.is_regression:
            row["score"] = round(float(logits[0]), 6)
        else:
            probabilities = logits.softmax(-1)
            best = int(probabilities.argmax())
            row.update(label=task.label_names[best], probability=round(float(probabilities[best]), 6))
        rows.append(row)
    return rows


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

