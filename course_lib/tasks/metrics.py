"""GLUE metrics as the benchmark defines them, from scikit-learn and scipy only.

`datasets.load_metric` and `evaluate.load` fetch their code from a hub, so they fail offline;
these few lines compute the same numbers locally. Key names follow GLUE / Hugging Face
`evaluate` (`accuracy`, `f1`, `matthews_correlation`, `pearson`, `spearmanr`) so results can be
compared with published tables. This module knows nothing about the model or torch.

Degenerate input: a correlation is undefined when either side is constant (zero variance), e.g.
a regression head that predicts the same score for every example. We return 0.0 there, silently
(no RuntimeWarning per evaluation), because a constant predictor carries no information about
the ranking; scikit-learn's Matthews correlation makes the same choice. F1 with no predicted
positives is 0.0, also without a warning. Such a run is not silent, though: `degenerate_predictions`
names it, and the training loops log its answer and keep it under `warnings` in metrics.json.

`shown` prints a score in points (x 100), the papers' scale, wherever a line is meant for a reader; the files
(metrics.json) keep what these functions return.
"""

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from course_lib.runtime.errors import choice_error

ArrayLike = Sequence[float] | np.ndarray

SCORES = ("accuracy", "f1", "precision", "recall", "matthews_correlation", "pearson", "spearmanr", "combined_score",
          "overall", "exact_match", "glue_score")  # what a log line or a table shows in points (x 100)


def is_score(metric: str) -> bool:
    """Whether a metric ('accuracy', or as metrics.json keys it, 'dev accuracy') is a score the papers print in
    points; a loss, a count or a share is not."""
    return metric.split(" ")[-1] in SCORES


def shown(metric: str, value, percent_already: bool = False) -> str:
    """A metric as a log line prints it: a score in points with two decimals, the papers' scale (accuracy 0.7925
    prints 79.25; SQuAD's F1, which the official script gives in points already, as it is), another float (a
    loss) with four decimals, anything else (a count) as it is."""
    if not isinstance(value, float):
        return f"{value}"
    return f"{value * (1 if percent_already else 100):.2f}" if is_score(metric) else f"{value:.4f}"


def accuracy(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Fraction of predicted class ids equal to the gold ones."""
    return float(accuracy_score(labels, predictions))


def f1(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Binary F1 of the positive class 1 (paraphrase / duplicate), as GLUE reports for MRPC, QQP."""
    return float(f1_score(labels, predictions, pos_label=1, average="binary", zero_division=0.0))


def matthews_correlation(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Matthews correlation, CoLA's metric: unlike accuracy it is 0 for a majority-class guesser."""
    return float(matthews_corrcoef(labels, predictions))


def _is_constant(x: np.ndarray) -> bool:
    return len(x) < 2 or bool(np.all(x == x[0]))


def pearson(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Pearson r of predicted and gold scores (STS-B); 0.0 if either side is constant."""
    x, y = np.asarray(predictions, dtype=float), np.asarray(labels, dtype=float)
    if _is_constant(x) or _is_constant(y):
        return 0.0
    return float(stats.pearsonr(x, y)[0])


def spearmanr(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Spearman rank correlation (STS-B): Pearson r of the ranks; 0.0 if either side is constant."""
    x, y = np.asarray(predictions, dtype=float), np.asarray(labels, dtype=float)
    if _is_constant(x) or _is_constant(y):
        return 0.0
    return float(stats.spearmanr(x, y)[0])


CONSTANT_SPREAD = 1e-6  # a regression's predictions whose std is below this fraction of the labels' are constant


def degenerate_predictions(predictions: ArrayLike, labels: ArrayLike,
                           label_names: Sequence[str] | None) -> str | None:
    """Why these dev predictions carry no information, or None when they vary as the labels do.

    A classifier that answers one class for every example still gets the majority rate: MRPC's dev set gives
    accuracy 0.665 and F1 0.799 to a model that learnt nothing, numbers that read like a weak result. Likewise
    a regression head whose output is constant (exactly, or with a spread below CONSTANT_SPREAD of the
    labels'). `label_names` as in the task registry: class names by id, None for regression. When the labels
    themselves are all one value, one predicted value is no evidence of anything, so it is not flagged.
    """
    x, y = np.asarray(predictions, dtype=float), np.asarray(labels, dtype=float)
    if len(x) < 2 or _is_constant(y):
        return None
    if label_names is not None:
        if not _is_constant(x):
            return None
        cls = int(x[0])
        name = f" ({label_names[cls]})" if 0 <= cls < len(label_names) and label_names[cls] != str(cls) else ""
        return f"all {len(x)} predictions are class {cls}{name}: the scores are those of a constant guess"
    spread, label_spread = float(np.std(x)), float(np.std(y))
    if not (_is_constant(x) or spread < CONSTANT_SPREAD * label_spread):
        return None
    return (f"all {len(x)} predictions are {float(np.mean(x)):.4g} (std {spread:.2g}, labels' std "
            f"{label_spread:.2g}): the scores are those of a constant guess")


METRICS: dict[str, Callable[[ArrayLike, ArrayLike], float]] = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews_correlation": matthews_correlation,
    "pearson": pearson,
    "spearmanr": spearmanr,
}


def compute_metrics(
    metric_names: tuple[str, ...], predictions: ArrayLike, labels: ArrayLike
) -> dict[str, float]:
    """Score predictions (class ids, or floats for regression) with the named GLUE metrics.

    With more than one metric, `combined_score` is their mean, the single number Hugging Face
    run_glue reports for MRPC, QQP and STS-B (handy for picking a checkpoint).
    """
    for name in metric_names:
        if name not in METRICS:
            raise choice_error("metric", name, METRICS)
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape or predictions.ndim != 1 or len(labels) == 0:
        raise ValueError(
            f"need two equally long, non-empty 1-D sequences, got shapes "
            f"{predictions.shape} (predictions) and {labels.shape} (labels)"
        )
    scores = {name: METRICS[name](predictions, labels) for name in metric_names}
    if len(scores) > 1:
        scores["combined_score"] = float(np.mean(list(scores.values())))
    return scores
