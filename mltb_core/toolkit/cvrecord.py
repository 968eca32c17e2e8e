"""The cross-validation record a fitting tool attaches to its estimator, and the one reader of it.

The record lives on the estimator (instance attributes), so it travels with the object through the scratchpad
and ``save_model`` / ``load_model``. The reader looks only at attributes set on the instance: a DataFrame
column named ``mltb_cv_score_`` is reachable as an attribute too, a model can make one, and reading it as a
score once raised out of the stage check (a Series is no float).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["CVRecord", "attach", "read"]

_SCORE, _METRIC, _GREATER, _STD = "mltb_cv_score_", "mltb_cv_metric_", "mltb_greater_is_better_", "mltb_cv_std_"


@dataclass(frozen=True)
class CVRecord:
    score: float | None           # the mean CV score in ``metric``; None when the folds gave none (NaN)
    metric: str | None            # the metric's name (None: a record from before metrics were named)
    greater_is_better: bool
    std: float | None = None

    @property
    def oriented(self) -> float | None:
        """The score with higher always better, for ranking solutions."""
        if self.score is None:
            return None
        return self.score if self.greater_is_better else -self.score


def attach(model: Any, score: float, metric: str, greater_is_better: bool, std: float) -> None:
    setattr(model, _SCORE, float(score))
    setattr(model, _METRIC, metric)
    setattr(model, _GREATER, bool(greater_is_better))
    setattr(model, _STD, float(std))


def _real(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def read(obj: Any) -> CVRecord | None:
    """The record a fitting tool attached to ``obj``; None for anything else (data, a record of wrong types).
    A fitted model whose folds gave a NaN score (one class in a fold, for ROC AUC) has a record without one."""
    fields = getattr(obj, "__dict__", None)
    if not isinstance(fields, dict):
        return None
    raw, metric, greater = fields.get(_SCORE), fields.get(_METRIC), fields.get(_GREATER, True)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    if not (metric is None or isinstance(metric, str)) or not isinstance(greater, bool):
        return None
    return CVRecord(_real(raw), metric, greater, _real(fields.get(_STD)))
