"""GLUE metrics against cases small enough to compute by hand, and against identities."""

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from course_lib.lab.glue_score import GLUE_SCORE
from course_lib.runtime.errors import UsageError
from course_lib.tasks.metrics import METRICS, SCORES, compute_metrics, degenerate_predictions, shown

# A binary confusion matrix written out by hand: tp=3, tn=2, fp=1, fn=2.
LABELS = [1, 1, 1, 1, 1, 0, 0, 0]
PREDS = [1, 1, 1, 0, 0, 0, 0, 1]
TP, TN, FP, FN = 3, 2, 1, 2


def test_confusion_matrix_metrics_match_their_formulas():
    scores = compute_metrics(("accuracy", "f1", "matthews_correlation"), PREDS, LABELS)
    precision, recall = TP / (TP + FP), TP / (TP + FN)
    mcc = (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))
    assert scores["accuracy"] == pytest.approx((TP + TN) / 8, abs=1e-12)
    assert scores["f1"] == pytest.approx(2 * precision * recall / (precision + recall), abs=1e-12)
    assert scores["matthews_correlation"] == pytest.approx(mcc, abs=1e-12)


def test_correlations_match_their_formulas():
    x, y = [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 5.0]
    mx, my = sum(x) / 4, sum(y) / 4
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    r = cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    # Ranks of y are 1, 3, 2, 4: no ties, so rho = 1 - 6 sum d^2 / (n (n^2 - 1)) with sum d^2 = 2.
    rho = 1 - 6 * 2 / (4 * (4**2 - 1))
    scores = compute_metrics(("pearson", "spearmanr"), x, y)
    assert scores["pearson"] == pytest.approx(r, abs=1e-12)
    assert scores["spearmanr"] == pytest.approx(rho, abs=1e-12)


def test_perfect_predictions_score_one():
    for name in ("accuracy", "f1", "matthews_correlation"):
        assert compute_metrics((name,), LABELS, LABELS)[name] == 1.0
    scores = [0.0, 1.5, 2.2, 4.8, 5.0]
    assert compute_metrics(("pearson", "spearmanr"), scores, scores) == pytest.approx(
        {"pearson": 1.0, "spearmanr": 1.0, "combined_score": 1.0}, abs=1e-12
    )


def test_rank_identities():
    x = [0.5, 1.0, 2.0, 3.0, 4.5]
    cubed = [v**3 for v in x]  # monotone, not linear: ranking perfect, Pearson below 1
    assert compute_metrics(("spearmanr",), cubed, x)["spearmanr"] == pytest.approx(1.0, abs=1e-12)
    assert compute_metrics(("pearson",), cubed, x)["pearson"] < 0.99
    assert compute_metrics(("spearmanr",), x[::-1], x)["spearmanr"] == pytest.approx(-1.0, abs=1e-12)
    inverted = [1 - y for y in LABELS]
    assert compute_metrics(("matthews_correlation",), inverted, LABELS)["matthews_correlation"] == -1.0


def test_constant_predictions_give_zero_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compute_metrics(("pearson", "spearmanr"), [2.5] * 4, [0.0, 1.0, 2.0, 3.0]) == {
            "pearson": 0.0,
            "spearmanr": 0.0,
            "combined_score": 0.0,
        }
        assert compute_metrics(("matthews_correlation",), [1] * 8, LABELS)["matthews_correlation"] == 0.0
        assert compute_metrics(("f1",), [0] * 8, LABELS)["f1"] == 0.0


def test_combined_score_only_with_several_metrics_and_plain_floats():
    single = compute_metrics(("accuracy",), PREDS, LABELS)
    assert list(single) == ["accuracy"]
    both = compute_metrics(("accuracy", "f1"), PREDS, LABELS)
    assert both["combined_score"] == pytest.approx((both["accuracy"] + both["f1"]) / 2, abs=1e-12)
    assert all(type(v) is float for v in both.values())


def test_metric_names_follow_glue():
    assert set(METRICS) == {"accuracy", "f1", "matthews_correlation", "pearson", "spearmanr"}


def test_bad_input():
    with pytest.raises(UsageError, match=r"unknown metric 'f2' \(valid: accuracy, f1, "):
        compute_metrics(("f2",), PREDS, LABELS)
    with pytest.raises(ValueError, match="equally long"):
        compute_metrics(("accuracy",), PREDS[:-1], LABELS)
    with pytest.raises(ValueError, match="non-empty"):
        compute_metrics(("accuracy",), [], [])


def test_a_log_line_prints_scores_in_points_and_nothing_else_scaled():
    """The papers' scale on every line a reader sees: each score compute_metrics gives (and GLUE's score) x 100,
    SQuAD's already in points as it is, a loss with its own decimals, a count untouched."""
    assert set(METRICS) | {"combined_score", GLUE_SCORE, "exact_match", "overall"} <= set(SCORES)
    assert shown("accuracy", 0.79251) == "79.25" and shown("dev matthews_correlation", -0.0123) == "-1.23"
    assert shown("f1", 54.4321, percent_already=True) == "54.43"
    assert shown("ssa_loss", 0.08312) == "0.0831" and shown("truncated_words", 8) == "8"


def test_metrics_module_does_not_import_torch():
    """Data and metrics must not know the model: importing metrics must not pull in torch."""
    code = "import sys, course_lib.tasks.metrics; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


def test_one_class_or_constant_predictions_are_named():
    """MRPC's majority guess scores accuracy 0.665 and F1 0.799: the numbers alone do not show it learnt nothing."""
    assert degenerate_predictions([1] * 8, LABELS, ("0", "1")) == \
        "all 8 predictions are class 1: the scores are those of a constant guess"
    assert degenerate_predictions([0] * 8, LABELS, ("entailment", "not_entailment")).startswith(
        "all 8 predictions are class 0 (entailment): ")
    labels = [0.0, 1.0, 2.5, 4.0, 5.0]
    assert degenerate_predictions([2.5] * 5, labels, None).startswith("all 5 predictions are 2.5 (std 0, ")
    nearly = [2.5 + 1e-9 * i for i in range(5)]  # a spread far below a millionth of the labels'
    assert degenerate_predictions(nearly, labels, None).startswith("all 5 predictions are 2.5 (std 1.4e-09, ")


def test_predictions_that_vary_or_labels_that_do_not_are_not_flagged():
    assert degenerate_predictions(PREDS, LABELS, ("0", "1")) is None
    assert degenerate_predictions([1.0, 2.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.5, 4.0, 5.0], None) is None
    assert degenerate_predictions([1e-3 * i for i in range(5)], [0.0, 1.0, 2.5, 4.0, 5.0], None) is None
    assert degenerate_predictions([1, 1, 1], [1, 1, 1], ("0", "1")) is None  # one-class labels: no evidence
    assert degenerate_predictions([0], [1], ("0", "1")) is None  # one example: no evidence either
