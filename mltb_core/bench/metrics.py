"""Official competition metrics by name.

Each :class:`Metric` wraps a ``func(y_true, y_pred) -> float`` (scikit-learn where it exists),
its direction, the score of a perfect prediction (the top of the normalized scale) and what
the submission must hold (``needs``: ``"label"`` for class labels / regression values,
``"probability"`` for scores of the positive class, or a per-class matrix for ``log_loss``).

Task specs name a metric (``metric = "rmsle"``); :func:`get_metric` resolves it. A metric with
``params`` (e.g. ``prior_weighted_accuracy`` needs ``class_weights``) is configured from the spec's
``[scoring]`` table with :meth:`Metric.configure`; it stays a plain ``metric(y_true, y_pred)`` call.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from mltb_core.bench.tasks import Task

__all__ = ["Metric", "METRICS", "UnknownMetricError", "get_metric", "task_metric"]


def _sklearn_metrics() -> Any:
    """scikit-learn's metrics on first scoring: importing them takes a second or two, which listing or
    checking tasks (``mltb tasks``, a task spec's metric name) must not pay."""
    from sklearn import metrics

    return metrics


class UnknownMetricError(KeyError):
    """A metric name that is not in :data:`METRICS`."""

    def __str__(self) -> str:  # KeyError would repr() the message with quotes
        return str(self.args[0])


@dataclass(frozen=True)
class Metric:
    """An official metric: ``func(y_true, y_pred) -> float`` plus what grading needs to know."""

    name: str
    func: Callable[..., float]
    greater_is_better: bool
    perfect: float
    needs: str = "label"  # "label" | "probability"
    params: tuple[str, ...] = ()                       # settings func needs, from the spec's [scoring]
    # The task problem types it can score (a spec pairing it with another type is an error).
    problem_types: tuple[str, ...] = ("binary", "multiclass")
    settings: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def configure(self, scoring: Mapping[str, Any]) -> "Metric":
        """This metric with its ``params`` taken from a spec's ``[scoring]`` table (other keys ignored)."""
        missing = [name for name in self.params if name not in scoring]
        if missing:
            raise ValueError(f"metric {self.name!r} needs [scoring] {', '.join(missing)}")
        return replace(self, settings={name: scoring[name] for name in self.params})

    def __call__(self, y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
        if len(self.settings) != len(self.params):
            raise ValueError(f"metric {self.name!r} is not configured: it needs {', '.join(self.params)}")
        return float(self.func(y_true, y_pred, **self.settings))


def _accuracy(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    return _sklearn_metrics().accuracy_score(y_true, y_pred)


def _prior_weighted_accuracy(y_true: npt.ArrayLike, y_pred: npt.ArrayLike, class_weights: Mapping[str, float]) -> float:
    """Accuracy on a test set with other class shares: sum over classes c of w_c * recall_c.

    ``class_weights`` maps each class label (as text, e.g. "1") to its count or share in the test
    set the score should estimate; weights are normalized over the classes present in ``y_true``
    (all of them whenever every class has held-out rows). A class in ``y_true`` without a weight is an
    error: the estimate would silently leave it out.
    """
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    weights = {str(k): float(v) for k, v in class_weights.items()}
    labels = np.unique(y_true)
    unweighted = [label for label in labels if str(label) not in weights]
    if unweighted:
        raise ValueError(f"prior_weighted_accuracy: class(es) {unweighted} have no weight "
                         f"(weights given for {sorted(weights)})")
    present = np.array([weights[str(label)] for label in labels])
    recalls = np.array([np.mean(y_pred[y_true == label] == label) for label in labels])
    return float(np.dot(present / present.sum(), recalls))


def _macro_f1(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    # Macro average over the labels present in truth or prediction (Kaggle's "macro F1").
    return _sklearn_metrics().f1_score(y_true, y_pred, average="macro", zero_division=0)


def _roc_auc(y_true: npt.ArrayLike, y_score: npt.ArrayLike) -> float:
    return _sklearn_metrics().roc_auc_score(y_true, y_score)


def _gini(y_true: npt.ArrayLike, y_score: npt.ArrayLike) -> float:
    """Normalized Gini coefficient as Porto Seguro's reference kernel computes it (the Claim Prediction
    Challenge's "normalized Gini" code every public kernel of the competition used): rows ordered by score,
    highest first, **tied scores kept in the order the rows come** (a stable sort), the Gini of that order
    (mean cumulative share of positives minus (n + 1) / 2, over n) divided by the Gini of the perfect order.
    Without tied scores this is 2 * ROC AUC - 1; with ties it is not (AUC counts a tied pair half, the kernel
    by row order: 0.0570 against 0.0619 on a tied case), and the leaderboard was scored this way."""
    truth = np.asarray(y_true, dtype=float)
    score = np.asarray(y_score, dtype=float)
    if truth.shape != score.shape or truth.ndim != 1:
        raise ValueError(f"gini: {truth.shape[0] if truth.ndim else 0} labels against scores of shape {score.shape}")
    if np.unique(truth).size < 2:
        raise ValueError("gini: only one class present in y_true; the Gini coefficient is not defined")

    def gini_of(ordered: np.ndarray) -> float:
        n = ordered.size
        return float((np.cumsum(ordered).sum() / ordered.sum() - (n + 1) / 2.0) / n)

    by_score = truth[np.argsort(-score, kind="stable")]
    return gini_of(by_score) / gini_of(np.sort(truth)[::-1])


def _mcc(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    return _sklearn_metrics().matthews_corrcoef(y_true, y_pred)


def _rmse(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    return _sklearn_metrics().root_mean_squared_error(y_true, y_pred)


def _rmsle(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    """Root mean squared logarithmic error.

    A submission with a negative prediction never gets here: the grader and the stage-10 validity
    check refuse it, as Kaggle's scorer does (``grading._coerce_regression``; docs/grading.md). This
    function still clips predictions below 0 for the tools' cross-validation of a regressor during the
    search, where a fold's negative predictions should cost, not crash. Negative *true* values are a
    data error and raise ``ValueError``.
    """
    y_true = np.asarray(y_true, dtype=float)
    if (y_true < 0).any():
        raise ValueError("rmsle: true values must be >= 0")
    y_pred = np.clip(np.asarray(y_pred, dtype=float), 0.0, None)
    return _sklearn_metrics().root_mean_squared_log_error(y_true, y_pred)


def _mae(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    return _sklearn_metrics().mean_absolute_error(y_true, y_pred)


def _log_loss(y_true: npt.ArrayLike, y_prob: npt.ArrayLike) -> float:
    """Multiclass log loss.

    ``y_prob`` is an (n, k) matrix whose columns follow the sorted class labels (as
    ``np.unique(y_true)`` / LabelEncoder order), or a 1-d positive-class probability for
    binary tasks. Rows are rescaled to sum to 1, then clipped away from 0/1, as Kaggle does.
    """
    y_prob = np.asarray(y_prob, dtype=float)
    if y_prob.ndim == 2:
        eps = 1e-15
        # Kaggle's order: rescale rows to sum to 1, then clip (all-zero rows become uniform).
        totals = y_prob.sum(axis=1, keepdims=True)
        y_prob = np.where(totals > 0, y_prob / np.where(totals > 0, totals, 1), 1.0 / y_prob.shape[1])
        y_prob = np.clip(y_prob, eps, 1 - eps)
        labels = np.arange(y_prob.shape[1]) if _is_code_like(y_true, y_prob.shape[1]) else None
        return _sklearn_metrics().log_loss(y_true, y_prob, labels=labels)
    return _sklearn_metrics().log_loss(y_true, y_prob)


def _is_code_like(y_true: npt.ArrayLike, n_classes: int) -> bool:
    """True when y_true are integer codes 0..k-1 (so labels= can pin unseen classes)."""
    values = np.asarray(y_true)
    return values.dtype.kind in "iu" and values.min() >= 0 and values.max() < n_classes


def _r2(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    return _sklearn_metrics().r2_score(y_true, y_pred)


_REGRESSION, _BINARY = ("regression",), ("binary",)   # problem types (mltb_core.bench.tasks.PROBLEM_TYPES)

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("accuracy", _accuracy, greater_is_better=True, perfect=1.0),
        Metric("prior_weighted_accuracy", _prior_weighted_accuracy, greater_is_better=True, perfect=1.0,
               params=("class_weights",)),
        Metric("macro_f1", _macro_f1, greater_is_better=True, perfect=1.0),
        Metric("roc_auc", _roc_auc, greater_is_better=True, perfect=1.0, needs="probability",
               problem_types=_BINARY),
        Metric("gini", _gini, greater_is_better=True, perfect=1.0, needs="probability",
               problem_types=_BINARY),
        Metric("mcc", _mcc, greater_is_better=True, perfect=1.0),
        Metric("rmse", _rmse, greater_is_better=False, perfect=0.0, problem_types=_REGRESSION),
        Metric("rmsle", _rmsle, greater_is_better=False, perfect=0.0, problem_types=_REGRESSION),
        Metric("mae", _mae, greater_is_better=False, perfect=0.0, problem_types=_REGRESSION),
        Metric("log_loss", _log_loss, greater_is_better=False, perfect=0.0, needs="probability"),
        Metric("r2", _r2, greater_is_better=True, perfect=1.0, problem_types=_REGRESSION),
    )
}


def get_metric(name: str) -> Metric:
    """The metric called ``name``; :class:`UnknownMetricError` lists the valid names."""
    try:
        return METRICS[name]
    except (KeyError, TypeError):
        raise UnknownMetricError(
            f"unknown metric {name!r}; valid metrics: {', '.join(sorted(METRICS))}"
        ) from None


def task_metric(task: Task) -> Metric:
    """The metric of ``task``, configured from its spec's ``[scoring]`` table when it takes settings."""
    metric = get_metric(task.metric)
    return metric.configure(getattr(task, "scoring", None) or {}) if metric.params else metric
