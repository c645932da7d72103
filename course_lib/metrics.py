"""GLUE metrics as the benchmark defines them, from scikit-learn and scipy only.

`datasets.load_metric` and `evaluate.load` fetch their code from a hub, so they fail offline;
these few lines compute the same numbers locally. Key names follow GLUE / Hugging Face
`evaluate` (`accuracy`, `f1`, `matthews_correlation`, `pearson`, `spearmanr`) so results can be
compared with published tables. This module knows nothing about the model or torch.

Degenerate input: a correlation is undefined when either side is constant (zero variance), e.g.
a regression head that predicts the same score for every example. We return 0.0 there, silently
(no RuntimeWarning per evaluation), because a constant predictor carries no information about
the ranking; scikit-learn's Matthews correlation makes the same choice. F1 with no predicted
positives is 0.0, also without a warning.
"""

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from course_lib.errors import choice_error

ArrayLike = Sequence[float] | np.ndarray


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
