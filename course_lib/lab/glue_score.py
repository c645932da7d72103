"""GLUE's own summary numbers: a task's GLUE score and a model's GLUE average (Wang et al. 2019).

The benchmark ranks a model by one number, so the papers print it ("Avg" in Kou et al. 2020, Tab. 2: 78.3 for
BERT-base). A task with two official metrics counts their mean: CoLA its Matthews correlation, STS-B the mean of
Pearson and Spearman, MRPC and QQP the mean of F1 and accuracy, MNLI the mean of matched and mismatched accuracy;
SST-2, QNLI, RTE and WNLI their accuracy. The GLUE average is the unweighted mean of the nine task scores, WNLI
included; the diagnostic set AX is not scored. Scores stay fractions here, as `metrics.compute_metrics` gives them;
a results table shows them x 100, the papers' scale.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

GLUE_SCORE = "glue_score"  # the metric a GLUE fine-tuning run's table row carries
GLUE_AVERAGE = "glue_average"  # the mean of the nine task scores

# task -> the (split, metric) pairs of its metrics.json whose mean is its GLUE score, in the papers' column order
GLUE_SCORE_PARTS: dict[str, tuple[tuple[str, str], ...]] = {
    "cola": (("dev", "matthews_correlation"),),
    "sst2": (("dev", "accuracy"),),
    "mrpc": (("dev", "f1"), ("dev", "accuracy")),
    "stsb": (("dev", "pearson"), ("dev", "spearmanr")),
    "qqp": (("dev", "f1"), ("dev", "accuracy")),
    "mnli": (("dev_matched", "accuracy"), ("dev_mismatched", "accuracy")),
    "qnli": (("dev", "accuracy"),),
    "rte": (("dev", "accuracy"),),
    "wnli": (("dev", "accuracy"),),
}


def glue_score(task: str, splits: Mapping) -> float | None:
    """The task's GLUE score from a run's dev splits as metrics.json keeps them ({'dev': {'f1': 0.88, ...}}):
    the mean of its parts; None for a task outside GLUE or a run that lacks a part (a score from half the rule
    would not be GLUE's)."""
    parts = GLUE_SCORE_PARTS.get(task)
    if parts is None:
        return None
    values = [(splits.get(split) or {}).get(metric) for split, metric in parts]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return statistics.fmean(values)


def missing_glue_tasks(tasks: Iterable[str]) -> list[str]:
    """The GLUE tasks not among `tasks`, in the papers' column order."""
    have = set(tasks)
    return [task for task in GLUE_SCORE_PARTS if task not in have]


def glue_average(scores: Mapping[str, float | None]) -> float | None:
    """The unweighted mean of the nine task scores ({task: score}); None unless every GLUE task has one, since
    a mean over fewer tasks is not comparable with the papers' (other tasks in `scores` are not GLUE's: ignored)."""
    present = {task for task, score in scores.items() if score is not None}
    if missing_glue_tasks(present):
        return None
    return statistics.fmean(scores[task] for task in GLUE_SCORE_PARTS)
