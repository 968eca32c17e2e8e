"""Official metrics against scikit-learn and small hand-computed cases."""
import math

import numpy as np
import pytest
from sklearn import metrics as skm

from mltb_core.bench.metrics import METRICS, UnknownMetricError, get_metric

RNG = np.random.default_rng(12345)
N = 200
BINARY = RNG.integers(0, 2, N)
SCORES = np.clip(BINARY * 0.3 + RNG.random(N) * 0.7, 0, 1)
MULTI = RNG.integers(1, 8, N)
MULTI_PRED = np.where(RNG.random(N) < 0.6, MULTI, RNG.integers(1, 8, N))
REG = RNG.gamma(2.0, 3.0, N)
REG_PRED = REG + RNG.normal(0, 1.5, N)


@pytest.mark.parametrize("name, y_true, y_pred, reference", [
    ("accuracy", MULTI, MULTI_PRED, skm.accuracy_score(MULTI, MULTI_PRED)),
    ("macro_f1", MULTI, MULTI_PRED, skm.f1_score(MULTI, MULTI_PRED, average="macro")),
    ("roc_auc", BINARY, SCORES, skm.roc_auc_score(BINARY, SCORES)),
    ("gini", BINARY, SCORES, 2 * skm.roc_auc_score(BINARY, SCORES) - 1),
    ("mcc", BINARY, (SCORES > 0.5).astype(int), skm.matthews_corrcoef(BINARY, SCORES > 0.5)),
    ("rmse", REG, REG_PRED, math.sqrt(skm.mean_squared_error(REG, REG_PRED))),
    ("rmsle", REG, np.abs(REG_PRED), math.sqrt(skm.mean_squared_log_error(REG, np.abs(REG_PRED)))),
    ("mae", REG, REG_PRED, skm.mean_absolute_error(REG, REG_PRED)),
    ("r2", REG, REG_PRED, skm.r2_score(REG, REG_PRED)),
])
def test_metric_matches_sklearn_on_random_data(name, y_true, y_pred, reference):
    assert get_metric(name)(y_true, y_pred) == pytest.approx(reference, rel=1e-12)


def test_multiclass_log_loss_matches_sklearn_and_normalizes_rows():
    codes = RNG.integers(0, 4, N)
    probs = RNG.random((N, 4))
    probs /= probs.sum(axis=1, keepdims=True)
    assert get_metric("log_loss")(codes, probs) == pytest.approx(skm.log_loss(codes, probs))
    # Kaggle rescales rows that do not sum to 1.
    assert get_metric("log_loss")(codes, probs * 3) == pytest.approx(skm.log_loss(codes, probs))


def test_log_loss_keeps_columns_of_classes_absent_from_truth():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
    expected = -(math.log(0.7) + math.log(0.8)) / 2
    assert get_metric("log_loss")(np.array([0, 1]), probs) == pytest.approx(expected)


def test_rmsle_hand_computed():
    y_true, y_pred = [0.0, math.e - 1], [math.e - 1, math.e - 1]
    # log1p errors: 1 and 0 -> sqrt(1/2)
    assert get_metric("rmsle")(y_true, y_pred) == pytest.approx(math.sqrt(0.5))


def test_rmsle_clips_negative_predictions_to_zero():
    assert get_metric("rmsle")([3.0, 0.0], [-5.0, -1.0]) == pytest.approx(
        get_metric("rmsle")([3.0, 0.0], [0.0, 0.0]))
    with pytest.raises(ValueError, match="true values"):
        get_metric("rmsle")([-1.0], [1.0])


def test_gini_breaks_ties_by_row_order_as_the_competitions_reference_kernel():
    # all four scores tied: the kernel keeps the rows' order (1, 0, 1, 0): cumulative positives 1, 1, 2, 2 give
    # (6/2 - 5/2)/4 = 1/8 against the perfect order's 1/4, so 0.5; ROC AUC would call it 0
    assert get_metric("gini")([1, 0, 1, 0], [0.5] * 4) == pytest.approx(0.5)
    assert get_metric("gini")([0, 1, 0, 1], [0.5] * 4) == pytest.approx(-0.5)
    rng = np.random.default_rng(0)
    truth = (rng.random(500) < 0.2).astype(float)
    scores = np.round(rng.random(500), 1)                      # heavy ties
    order = np.lexsort((np.arange(500), -scores))              # score descending, then row order (the kernel's)

    def raw(ordered):
        return (np.cumsum(ordered).sum() / ordered.sum() - (ordered.size + 1) / 2) / ordered.size

    assert get_metric("gini")(truth, scores) == pytest.approx(raw(truth[order]) / raw(np.sort(truth)[::-1]))
    assert get_metric("gini")(truth, scores) != pytest.approx(2 * skm.roc_auc_score(truth, scores) - 1)
    with pytest.raises(ValueError, match="one class"):
        get_metric("gini")([1, 1], [0.2, 0.3])


def test_gini_hand_computed():
    # Pairs (pos, neg): scores 0.8>0.1, 0.8>0.4, 0.3>0.1, 0.3<0.4 -> AUC 3/4, Gini 1/2.
    assert get_metric("gini")([1, 0, 1, 0], [0.8, 0.1, 0.3, 0.4]) == pytest.approx(0.5)
    assert get_metric("gini")([1, 0], [0.2, 0.9]) == pytest.approx(-1.0)


def test_metric_facts():
    for name, metric in METRICS.items():
        assert metric.name == name
        assert metric.needs in ("label", "probability")
        # Perfect predictions score metric.perfect.
    assert METRICS["rmse"].perfect == 0 and not METRICS["rmse"].greater_is_better
    assert METRICS["accuracy"].perfect == 1 and METRICS["accuracy"].greater_is_better
    assert METRICS["roc_auc"].needs == "probability"
    assert get_metric("accuracy")(MULTI, MULTI) == METRICS["accuracy"].perfect
    assert get_metric("rmsle")(REG, REG) == METRICS["rmsle"].perfect
    assert get_metric("gini")(BINARY, BINARY) == METRICS["gini"].perfect


def test_unknown_metric_lists_valid_names():
    with pytest.raises(UnknownMetricError) as info:
        get_metric("f2")
    message = str(info.value)
    assert "'f2'" in message and "rmsle" in message and "accuracy" in message


def test_prior_weighted_accuracy_hand_computed():
    # Class 1 is 3/4 of the target distribution, class 2 a quarter; recalls 1/2 and 1.
    metric = get_metric("prior_weighted_accuracy").configure({"class_weights": {"1": 300, "2": 100}})
    y_true = np.array([1, 1, 2, 2, 2, 2])
    y_pred = np.array([1, 2, 2, 2, 2, 2])
    assert metric(y_true, y_pred) == pytest.approx(0.75 * 0.5 + 0.25 * 1.0)
    assert skm.accuracy_score(y_true, y_pred) == pytest.approx(5 / 6)  # the unweighted figure differs


def test_prior_weighted_accuracy_needs_its_weights():
    with pytest.raises(ValueError, match="not configured"):
        get_metric("prior_weighted_accuracy")(np.array([1]), np.array([1]))
    with pytest.raises(ValueError, match="needs \\[scoring\\] class_weights"):
        get_metric("prior_weighted_accuracy").configure({})
    metric = get_metric("prior_weighted_accuracy").configure({"class_weights": {"1": 1}})
    with pytest.raises(ValueError, match="no weight"):
        metric(np.array([1, 3]), np.array([1, 3]))
