"""Official grading of a submission on a held-out split.

``grade_submission(task, submission, split, board)`` validates the submission against the split's
``test_labels.csv``, computes the task's official metric over the *scored rows* (every held-out row,
or those the spec's ``[scoring] rows`` filter keeps, as Kaggle scores them), places the score on the
real Kaggle leaderboard (``board``: public, as in the paper, or private) when the task's rows are
comparable to the board's (:func:`tasks.percentile_note`; otherwise ``percentile_note`` says why
not) and normalizes it between a trivial baseline (0) and a perfect prediction (1).

Scoring is one call ``metric(y_true, y_pred)`` over the scored rows' arrays: task-specific
behaviour lives in how the metric is configured (:func:`metrics.task_metric`) and which rows are
scored, so resampling those rows and calling ``metric`` again gives the same quantity.

A bad submission never raises: it yields ``Grade(valid=False, reason=...)`` with a reason the
agent can act on. Problems outside the submission (missing split files, a malformed
leaderboard fixture) do raise, so they surface as infrastructure errors.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Sequence
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from mltb_core.bench.fixtures import FIXTURES
from mltb_core.bench.leaderboards import Leaderboard
from mltb_core.bench.metrics import Metric, task_metric
from mltb_core.bench.tasks import (DEFAULT_BOARD, SUBMISSION_FILE, Task, board_file, check_board, graded_per_class,
                                   percentile_note)

if TYPE_CHECKING:
    from mltb_core.bench.splits import Split

__all__ = ["Grade", "grade_submission", "check_submission", "validate_submission", "submission_columns", "safe_text", "MAX_REASON_CHARS", "baseline_prediction",
           "baseline_description", "metric_inputs",
           "normalized_score", "task_leaderboard", "LEADERBOARDS_DIR"]

LEADERBOARDS_DIR = FIXTURES / "leaderboards"
_SHOWN = 5  # how many offending ids / values a reason names
_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False}


@dataclass
class Grade:
    """The outcome of grading one submission (fields beyond the interface are optional extras)."""

    valid: bool
    reason: str
    score: float | None = None
    percentile: float | None = None
    medal: str | None = None
    above_median: bool | None = None
    normalized: float | None = None
    metric: str | None = None
    baseline: float | None = None
    percentile_note: str | None = None   # why there is no percentile although the submission is valid
    board: str | None = None             # the leaderboard the score was placed on (public | private)
    scored_rows: int | None = None       # held-out rows the metric was computed over
    # held-out-row bootstrap (row_bootstrap below): score and percentile per row resample
    score_samples: list[float | None] | None = None
    percentile_samples: list[float | None] | None = None
    normalized_samples: list[float | None] | None = None   # score and baseline on the same row resample
    row_seed: int | None = None

    def to_dict(self) -> dict:
        """Plain JSON-ready dict."""
        return asdict(self)

    def percentile_interval(self, level: float = 0.95) -> tuple[float, float] | None:
        """The percentile's interval over the held-out-row resamples (the split's own noise), or None."""
        samples = [v for v in (self.percentile_samples or []) if v is not None]
        if self.percentile is None or len(samples) < 20:
            return None
        tail = (1 - level) / 2 * 100
        low, high = np.percentile(samples, [tail, 100 - tail])
        return float(low), float(high)

    def percentile_text(self, digits: int = 1) -> str:
        """'88.5 [57.3, 98.9]' (95 % over held-out rows), or 'none: <why>'."""
        if self.percentile is None:
            return f"none: {self.percentile_note or 'no leaderboard'}"
        interval = self.percentile_interval()
        bounds = f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]" if interval else ""
        return f"{self.percentile:.{digits}f}{bounds}"

    def row_bootstrap_fields(self) -> dict:
        """The row-bootstrap fields a TrialRecord carries (same names there)."""
        return {"score_samples": self.score_samples, "percentile_samples": self.percentile_samples,
                "normalized_samples": self.normalized_samples, "row_seed": self.row_seed}

    @classmethod
    def invalid(cls, reason: str, metric: str | None = None) -> "Grade":
        return cls(valid=False, reason=safe_text(reason), metric=metric)


# -- validation ----------------------------------------------------------------------------
MAX_REASON_CHARS = 2000     # a reason quotes submission text: capped so it cannot flood a prompt or a record


def safe_text(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Text that encodes as UTF-8 (lone surrogates escaped) and is at most ``limit`` characters."""
    text = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    marker = " ... (truncated)"
    return text if len(text) <= limit else text[:limit - len(marker)] + marker


class _Invalid(Exception):
    """Internal: the submission is invalid for the reason in args[0]."""


def validate_submission(task: Task, submission_df: pd.DataFrame, labels_df: pd.DataFrame,
                        classes: Sequence[Any] | None = None) -> tuple[bool, str, pd.Series | pd.DataFrame | None]:
    """Check a submission against the held-out labels.

    Returns ``(ok, reason, aligned_predictions)``: predictions coerced to the label's form and
    aligned row by row with ``labels_df`` (a Series; a DataFrame of per-class probabilities for
    multiclass probability tasks). ``classes``: every class label of the task (train and test);
    defaults to the labels' own classes. Integer codes for string labels map onto the sorted
    ``classes``, as LabelEncoder does.
    """
    for needed in (task.id_column, task.target):    # the labels are ours: a problem there is not the submission's
        if needed not in labels_df.columns:
            raise ValueError(f"labels have no column {needed!r} (columns: {list(labels_df.columns)})")
    try:
        aligned = _validate(task, submission_df, labels_df, classes)
    except _Invalid as exc:
        return False, safe_text(str(exc)), None
    except Exception as exc:  # noqa: BLE001 - whatever a hostile submission makes pandas/numpy raise is its failure
        return False, safe_text(f"the submission could not be checked: {type(exc).__name__}: "
                                f"{str(exc).strip()[:300]}"), None
    return True, "ok", aligned


def _validate(task: Task, submission_df: pd.DataFrame, labels_df: pd.DataFrame,
              classes: Sequence[Any] | None) -> pd.Series | pd.DataFrame:
    id_col, target = task.id_column, task.target
    truth = labels_df[target]
    if classes is None and task.problem_type != "regression":
        classes = _sorted_classes(truth)
    per_class = graded_per_class(task)
    expected_cols = submission_columns(task, classes)

    submission = _with_ids(_drop_index_columns(submission_df), labels_df, id_col, expected_cols[1:])
    _check_columns(submission, expected_cols)
    if submission.empty:
        raise _Invalid(f"submission has no rows; expected {len(labels_df)}")

    # ids written as floats (a frame built with NaN, or through numpy) lost their digits past 2**53: when
    # either side holds floats, both compare through float, and the duplicate check catches what merges
    exact = not any(pd.api.types.is_float_dtype(ids) for ids in (submission[id_col], labels_df[id_col]))
    sub_ids = _id_keys(submission[id_col], exact)
    label_ids = _id_keys(labels_df[id_col], exact)
    _check_ids(submission[id_col], sub_ids, labels_df[id_col], label_ids, id_col)
    # Reorder the submission to the labels' row order.
    position = pd.Series(np.arange(len(submission)), index=pd.Index(sub_ids.to_numpy()))
    order = position.loc[label_ids.to_numpy()].to_numpy()
    aligned_rows = submission.iloc[order].reset_index(drop=True)
    aligned_ids = labels_df[id_col].reset_index(drop=True)

    if per_class:
        assert classes is not None   # filled in above: a per-class task is a classification task
        columns = {str(c): _coerce_probability(aligned_rows[str(c)], aligned_ids, id_col, str(c))
                   for c in classes}
        frame = pd.DataFrame(columns).set_axis(labels_df.index)
        return frame
    values = aligned_rows[target]
    _check_no_missing(values, aligned_ids, id_col, target)
    if task.prediction == "probability":
        coerced = _coerce_probability(values, aligned_ids, id_col, target)
    elif task.problem_type == "regression":
        coerced = _coerce_regression(values, aligned_ids, id_col, target, getattr(task, "metric", None))
    else:
        assert classes is not None   # filled in above for a classification task
        coerced = _coerce_labels(values, truth, classes, aligned_ids, id_col, target)
    return pd.Series(np.asarray(coerced), index=labels_df.index, name=target)


def submission_columns(task: Task, classes: Sequence[Any] | None) -> list[str]:
    """The columns of a Kaggle-form submission: the id, then the target, or one column per class of
    ``classes`` where the task is graded on per-class probabilities."""
    if graded_per_class(task):
        assert classes is not None   # a per-class task is a classification task: it has classes
        return [task.id_column] + [str(c) for c in classes]
    return [task.id_column, task.target]


def _drop_index_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Ignore a written-out pandas index (an unnamed first column) but nothing else."""
    unnamed = [c for c in frame.columns if str(c).startswith("Unnamed: ") or str(c) == ""]
    return frame.drop(columns=unnamed) if unnamed else frame


def _with_ids(submission: pd.DataFrame, labels_df: pd.DataFrame, id_col: str,
              prediction_cols: list[str]) -> pd.DataFrame:
    """The submission in the Kaggle form [id, predictions...]: the paper's finish gets its ids by row order.

    The paper's agents save ``predict_target``'s output as it is (appendix I: ``save_dataframe_to_csv(
    df="test_predictions")``): one column of predictions, one row per test.csv row in its order, no ids.
    Without the id column, one column (any name) or exactly the per-class columns is read that way; the
    held-out labels are in test.csv's row order (``splits`` writes both from one frame), so the ids come
    from them. A frame with the id column, or any other shape, is left for the column check to judge.
    """
    present = [str(c) for c in submission.columns]
    if id_col in present or not present:
        return submission
    if len(prediction_cols) == 1:
        predictions_only = len(present) == 1
    else:   # per-class probabilities: exactly the class columns
        predictions_only = sorted(present) == sorted(prediction_cols)
    if not predictions_only:
        form = "one column" if len(prediction_cols) == 1 else f"the columns {prediction_cols}"
        raise _Invalid(f"the submission has {len(present)} columns {_some(present)} and no {id_col!r} column: save "
                       f"either the predictions alone ({form}, one row per test.csv row, in its order) or a frame "
                       f"with exactly the columns {[id_col, *prediction_cols]}")
    if len(submission) != len(labels_df):
        raise _Invalid(f"the submission has no {id_col!r} column, so it is read as predictions in test.csv's row "
                       f"order and needs one row per test.csv row: it has {len(submission)} rows, test.csv has "
                       f"{len(labels_df)} (predict the test features, not the train features)")
    frame = submission.set_axis(prediction_cols if len(prediction_cols) == 1 else present, axis=1)
    frame.insert(0, id_col, labels_df[id_col].to_numpy())
    return frame.reset_index(drop=True)


def _check_columns(submission: pd.DataFrame, expected: list[str]) -> None:
    present = [str(c) for c in submission.columns]
    missing = [c for c in expected if c not in present]
    extra = [c for c in present if c not in expected]
    duplicated = sorted({c for c in present if present.count(c) > 1})
    problems = []
    if missing:
        problems.append(f"missing column(s) {missing}")
    if extra:
        problems.append(f"unexpected column(s) {extra}")
    if duplicated:
        problems.append(f"duplicated column(s) {duplicated}")
    if problems:
        raise _Invalid(f"{'; '.join(problems)}: the submission must have exactly the columns "
                       f"{expected} (found {present}), or be the predictions alone in test.csv's row order")


def _id_keys(ids: pd.Series, exact_integers: bool = True) -> pd.Series:
    """Comparable string keys for ids: 7, 7.0 and "7" match; strings are stripped. Integers are exact unless
    ``exact_integers`` is false (the other side holds floats): through float, ids past 2**53 merge. Held as
    Python objects: pandas 3's Arrow strings took ~1 s per ``isin`` of 100k ids, objects 30 ms."""
    if pd.api.types.is_bool_dtype(ids):
        keys = ids.astype(str)
    elif exact_integers and pd.api.types.is_integer_dtype(ids) and not ids.hasnans:
        keys = ids.astype(str)
    elif pd.api.types.is_numeric_dtype(ids):
        numbers = ids.astype(float)
        integral = (numbers.notna() & np.isfinite(numbers) & (numbers == np.round(numbers))
                    & (numbers.abs() < 2.0**63))   # whole numbers int64 holds (uint64 ids past it overflowed)
        keys = numbers.astype("int64").astype(str) if integral.all() else ids.astype(str)
    else:
        keys = ids.astype(str).str.strip().where(ids.notna(), "<missing>")
    return keys.reset_index(drop=True).astype(object)


def _some(values: Iterable[Any]) -> str:
    values = [v.item() if isinstance(v, np.generic) else v for v in values]
    shown = ", ".join(repr(v) for v in values[:_SHOWN])
    return shown + (f", ... ({len(values)} in all)" if len(values) > _SHOWN else "")


def _check_ids(sub_raw: pd.Series, sub_ids: pd.Series, label_raw: pd.Series, label_ids: pd.Series,
               id_col: str) -> None:
    """Same id set, no duplicates; reasons quote the ids as written."""
    duplicated = sub_ids.duplicated().to_numpy()
    if duplicated.any():
        raise _Invalid(f"duplicate {id_col} value(s): {_some(pd.unique(sub_raw[duplicated]))}")
    n_expected = len(label_ids)
    # isin against the other Series hashes it once; against a Python set of strings, 100k ids took ~2 s
    missing = label_raw[~label_ids.isin(sub_ids).to_numpy()].tolist()
    unexpected = sub_raw[~sub_ids.isin(label_ids).to_numpy()].tolist()
    if len(sub_ids) != n_expected or missing or unexpected:
        parts = [f"submission has {len(sub_ids)} rows, expected {n_expected} (one per test row)"]
        if missing:
            parts.append(f"missing {id_col} value(s): {_some(missing)}")
        if unexpected:
            parts.append(f"unexpected {id_col} value(s) not in the test set: {_some(unexpected)}")
        raise _Invalid("; ".join(parts))


def _check_no_missing(values: pd.Series, ids: pd.Series, id_col: str, column: str) -> None:
    empty = values.isna()
    if pd.api.types.is_string_dtype(values) or values.dtype == object:
        empty |= values.astype(str).str.strip().eq("")
    if empty.any():
        raise _Invalid(f"{int(empty.sum())} missing prediction(s) in {column!r} for {id_col} "
                       f"{_some(ids[empty.to_numpy()])}")


def _bad_values_reason(values: pd.Series, bad: np.ndarray, ids: pd.Series, id_col: str,
                       column: str, what: str) -> str:
    return (f"{int(bad.sum())} value(s) in {column!r} {what}; got {_some(pd.unique(values[bad]))} "
            f"for {id_col} {_some(ids[bad])}")


def _numbers(values: pd.Series, ids: pd.Series, id_col: str, column: str, what: str) -> np.ndarray:
    """Values as floats; booleans count as 0/1; non-numeric or non-finite values are invalid."""
    if pd.api.types.is_bool_dtype(values):
        return values.astype(float).to_numpy()
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(numbers)
    if bad.any():
        raise _Invalid(_bad_values_reason(values, bad, ids, id_col, column, f"are not finite numbers ({what})"))
    return numbers


def _coerce_regression(values: pd.Series, ids: pd.Series, id_col: str, column: str, metric: str | None = None) -> np.ndarray:
    numbers = _numbers(values, ids, id_col, column, "a regression target needs numbers")
    if metric == "rmsle":
        negative = numbers < 0
        if negative.any():
            # Kaggle's RMSLE scorer and scikit-learn refuse negative predictions (log1p is undefined below -1
            # and a negative count or price has no meaning); clipping them would score a submission Kaggle fails
            raise _Invalid(_bad_values_reason(values, negative, ids, id_col, column,
                                              "are negative; RMSLE needs predictions >= 0 (Kaggle rejects "
                                              "negative ones: predict 0 or more)"))
    return numbers


def _coerce_probability(values: pd.Series, ids: pd.Series, id_col: str, column: str) -> np.ndarray:
    _check_no_missing(values, ids, id_col, column)
    numbers = _numbers(values, ids, id_col, column, "probabilities must be numbers in [0, 1]")
    bad = (numbers < 0) | (numbers > 1)
    if bad.any():
        raise _Invalid(_bad_values_reason(values, bad, ids, id_col, column,
                                          "are outside [0, 1] (probabilities expected)"))
    return numbers


def _is_bool_labels(truth: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(truth):
        return True
    return truth.dtype == object and truth.dropna().map(type).eq(bool).all()


def _sorted_classes(truth: pd.Series) -> list:
    return sorted(pd.unique(truth.dropna()).tolist())


def _coerce_labels(values: pd.Series, truth: pd.Series, classes: Sequence[Any], ids: pd.Series, id_col: str,
                   column: str) -> np.ndarray:
    """Class predictions in the truth's own form (see validate_submission for the rules)."""
    if _is_bool_labels(truth):
        return _coerce_bool_labels(values, ids, id_col, column)
    if pd.api.types.is_numeric_dtype(truth):
        return _coerce_numeric_labels(values, classes, ids, id_col, column)
    return _coerce_string_labels(values, classes, ids, id_col, column)


def _coerce_bool_labels(values: pd.Series, ids: pd.Series, id_col: str, column: str) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values):
        return values.to_numpy(dtype=bool)
    mapped = values.map(lambda v: _BOOL_WORDS.get(str(v).strip().lower()))
    bad = mapped.isna().to_numpy()
    if bad.any():
        raise _Invalid(_bad_values_reason(values, bad, ids, id_col, column,
                                          "are not booleans (use True/False, 1/0)"))
    return mapped.to_numpy(dtype=bool)


def _coerce_numeric_labels(values: pd.Series, classes: Sequence[Any], ids: pd.Series, id_col: str,
                           column: str) -> np.ndarray:
    numbers = _numbers(values, ids, id_col, column, f"class labels are {_some(classes)}")
    allowed = np.asarray(classes, dtype=float)
    bad = ~np.isin(numbers, allowed)
    if bad.any():
        raise _Invalid(_bad_values_reason(values, bad, ids, id_col, column,
                                          f"are not valid classes (valid: {list(classes)})"))
    # Back to the classes' own type (ints stay ints).
    lookup = {float(c): c for c in classes}
    return np.asarray([lookup[n] for n in numbers])


def _coerce_string_labels(values: pd.Series, classes: Sequence[Any], ids: pd.Series, id_col: str,
                          column: str) -> np.ndarray:
    class_names = [str(c) for c in classes]
    as_text = values.astype(str).str.strip()
    if as_text.isin(class_names).all():
        return np.asarray([classes[class_names.index(v)] for v in as_text], dtype=object)
    # Integer codes 0..k-1 in sorted label order (what LabelEncoder produces).
    codes = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    is_code = np.isfinite(codes) & (codes == np.round(codes)) & (codes >= 0) & (codes < len(classes))
    if is_code.all():
        return np.asarray([classes[int(c)] for c in codes], dtype=object)
    is_label = as_text.isin(class_names).to_numpy()
    bad = ~(is_label | is_code)
    if bad.any():
        raise _Invalid(_bad_values_reason(
            values, bad, ids, id_col, column,
            f"are not valid classes (valid: {class_names}, or integer codes 0..{len(classes) - 1} "
            f"in that order)"))
    raise _Invalid(f"{column!r} mixes class labels ({_some(values[is_label].unique())}) with integer "
                   f"codes ({_some(values[is_code].unique())}); use one form for every row")


# -- scoring -------------------------------------------------------------------------------
def _positive_class(classes: Sequence[Any]) -> Any:
    """The positive class of a binary task: True / 1 / the last label in sorted order."""
    return classes[-1]


def metric_inputs(task: Task, truth: pd.Series, predictions: npt.ArrayLike | pd.DataFrame,
                  classes: Sequence[Any] | None) -> tuple[np.ndarray, np.ndarray]:
    """(y_true, y_pred) as the metric expects them."""
    if graded_per_class(task):
        codes = pd.Categorical(truth, categories=classes).codes
        return np.asarray(codes), np.asarray(predictions, dtype=float)
    if task.prediction == "probability":
        assert classes is not None   # probabilities are predicted for classification tasks only
        y_true = (truth.to_numpy() == _positive_class(classes)).astype(int)
        return y_true, np.asarray(predictions, dtype=float)
    if task.problem_type == "regression":
        return truth.to_numpy(dtype=float), np.asarray(predictions, dtype=float)
    return truth.to_numpy(), np.asarray(predictions)


def baseline_prediction(task: Task, train_target: pd.Series, n_rows: int,
                        classes: Sequence[Any] | None) -> np.ndarray:
    """The trivial constant prediction that normalized score 0 stands for.

    Regression: the train mean (for rmsle, expm1 of the mean of log1p, the constant that
    minimizes RMSLE). Label classification: the majority train class (ties: first in sorted
    order); with ``[scoring] class_weights`` the class with the largest weight (the majority of
    the test distribution the metric estimates). Probability tasks: the train class prior as a
    constant probability (multiclass: the prior vector on every row).
    """
    weights = (getattr(task, "scoring", None) or {}).get("class_weights")
    if weights and task.prediction == "label" and task.problem_type != "regression":
        assert classes is not None   # a classification task has classes
        by_label = {str(c): c for c in classes}
        heaviest = max((w, label) for label, w in weights.items() if label in by_label)[1]
        return np.asarray([by_label[heaviest]] * n_rows)
    target = train_target.dropna()
    if task.problem_type == "regression":
        values = target.to_numpy(dtype=float)
        if task.metric == "rmsle":
            constant = float(np.expm1(np.mean(np.log1p(np.clip(values, 0, None)))))
        else:
            constant = float(np.mean(values))
        return np.full(n_rows, constant)
    if graded_per_class(task):
        prior = target.value_counts(normalize=True).reindex(classes, fill_value=0.0).to_numpy(dtype=float)
        return np.tile(prior, (n_rows, 1))
    if task.prediction == "probability":
        assert classes is not None   # probabilities are predicted for classification tasks only
        prior = float((target.to_numpy() == _positive_class(classes)).mean())
        return np.full(n_rows, prior)
    counts = target.value_counts()
    majority = sorted(counts[counts == counts.max()].index.tolist())[0]
    return np.asarray([majority] * n_rows, dtype=object if isinstance(majority, str) else None)


def baseline_description(task: Task) -> str:
    """Which trivial prediction normalized score 0 stands for on ``task`` (:func:`baseline_prediction`'s rule)."""
    weights = (getattr(task, "scoring", None) or {}).get("class_weights")
    if weights and task.prediction == "label" and task.problem_type != "regression":
        return "the class with the largest test-prior weight, on every row"
    if task.problem_type == "regression":
        return ("the constant minimizing RMSLE (expm1 of the train mean of log1p)" if task.metric == "rmsle"
                else "the train mean")
    if task.prediction == "probability":
        return "the train class prior as a constant probability" + (" vector" if graded_per_class(task)
                                                                       else "")
    return "the train majority class, on every row"


def _rounded(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.6g}")


def normalized_score(score: float, baseline: float, metric: Metric) -> float | None:
    """(score - baseline) / (perfect - baseline); None when the baseline is already perfect."""
    span = metric.perfect - baseline
    if math.isclose(span, 0.0, abs_tol=1e-12):
        return None
    return (score - baseline) / span


def task_leaderboard(task: Task, metric: Metric | None = None, board: str = DEFAULT_BOARD) -> Leaderboard | None:
    """The task's ``board`` (public | private) leaderboard, or None when it has no such board file.

    Whether a score may be placed on it is :func:`tasks.percentile_note`'s decision, not this one's.
    """
    name = board_file(task, board)
    if not name:
        return None
    metric = metric or task_metric(task)
    return Leaderboard.load(LEADERBOARDS_DIR / name, metric.greater_is_better,
                            total_teams=getattr(task, "leaderboard_teams", None))


def _read_submission(submission: Path | str | bytes | pd.DataFrame) -> pd.DataFrame:
    """The submission as a frame: a frame as given, a file's or a snapshot's bytes read as CSV."""
    if isinstance(submission, pd.DataFrame):
        return submission
    if isinstance(submission, bytes):
        source: Path | io.BytesIO = io.BytesIO(submission)
        label, where = SUBMISSION_FILE, SUBMISSION_FILE
    else:
        path = source = Path(submission)
        label, where = path.name, str(path)
        if path.is_dir():
            raise _Invalid(f"the submission path {path} is a directory, not a CSV file")
        if not path.is_file():
            raise _Invalid(f"submission file not found: {path}")
    try:
        with warnings.catch_warnings():
            # index_col=False: rows with more fields than the header must not silently turn
            # the first column into an index; pandas only warns about them, so make it an error.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(source, index_col=False)
    except pd.errors.EmptyDataError:
        raise _Invalid(f"submission file is empty: {where}") from None
    except pd.errors.ParserWarning:
        raise _Invalid(f"submission is not a readable CSV ({label}): some rows have more "
                       f"fields than the header") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise _Invalid(f"submission is not a readable CSV ({label}): "
                       f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
    except Exception as exc:  # noqa: BLE001 - OverflowError, MemoryError, ...: the file's failure, said plainly
        raise _Invalid(f"submission could not be read as CSV ({label}): {type(exc).__name__}: "
                       f"{str(exc).strip()[:300]}") from None


def check_submission(task: Task, submission: Path | str | bytes | pd.DataFrame, labels_df: pd.DataFrame,
                     classes: Sequence[Any] | None = None) -> tuple[bool, str, pd.Series | pd.DataFrame | None]:
    """Read and validate a submission (a path, the file's bytes or a frame): the one rule the grader and
    the stage-10 check of the search share. Returns :func:`validate_submission`'s triple."""
    try:
        submission_df = _read_submission(submission)
    except _Invalid as exc:
        return False, safe_text(str(exc)), None
    return validate_submission(task, submission_df, labels_df, classes=classes)


def _split_source(split: Split) -> str | None:
    """The data source the split was made from (its meta.json), or None when it does not say."""
    try:
        return split.meta.get("data_source")
    except (AttributeError, OSError, ValueError):
        return None


def scored_mask(task: Task, labels: pd.DataFrame) -> np.ndarray:
    """Which held-out rows count: the spec's ``[scoring] rows`` filter, else all of them."""
    rows = getattr(task, "scoring_rows", None)
    if rows is None:
        return np.ones(len(labels), dtype=bool)
    return rows.mask(labels)


def grade_submission(task: Task, submission: Path | str | pd.DataFrame, split: Split, board: str = DEFAULT_BOARD) -> Grade:
    """Validate, score and place a submission; invalid submissions give ``Grade(valid=False)``."""
    check_board(board)
    metric = task_metric(task)
    labels = split.read_labels()   # verified against the split's recorded SHA-256; in test.csv's row order
    train_target = pd.read_csv(split.train_path, usecols=[task.target])[task.target]
    classes = columns = None
    if task.problem_type != "regression":
        columns = _sorted_classes(train_target)
        classes = sorted(set(columns) | set(_sorted_classes(labels[task.target])))
    # Per-class probabilities come in one column per class the agent can know, those of its train.csv (stage
    # 10 asks for the same); a class only in the held-out labels was given probability 0. Labels may be any
    # class of either part.
    ok, reason, predictions = check_submission(task, submission, labels,
                                               classes=columns if graded_per_class(task) else classes)
    if not ok:
        return Grade.invalid(reason, metric=metric.name)
    assert predictions is not None   # check_submission's contract: a valid submission comes with its predictions
    if graded_per_class(task):
        assert classes is not None   # per-class tasks are classification tasks
        predictions = predictions.reindex(columns=[str(c) for c in classes], fill_value=0.0)

    # The submission covers every held-out row (validated above); only the scored rows count.
    scored = scored_mask(task, labels)
    if not scored.any():
        raise ValueError(f"task {task.slug!r}: no held-out row passes the scoring filter {task.scoring_rows}")
    truth = labels[task.target][scored]
    y_true, y_pred = metric_inputs(task, truth, predictions[scored], classes)
    try:
        score = metric(y_true, y_pred)
    except (ValueError, OverflowError, FloatingPointError) as exc:
        return Grade.invalid(f"the metric cannot score these predictions: {exc}", metric=metric.name)
    if not math.isfinite(score):
        return Grade.invalid(f"the {metric.name} of these predictions is not finite ({score}): predictions too "
                             "large to score", metric=metric.name)
    # Held-out-row noise, shared by every trial graded on this split: the same seeded row resamples
    # for every submission, so replicate b pairs across trials and planners (hand-made splits: seed 0).
    row_seed = int(getattr(split, "seed", 0))
    score_samples = row_bootstrap(metric, y_true, y_pred, seed=row_seed)
    _, y_base = metric_inputs(task, truth, baseline_prediction(task, train_target, len(truth), classes), classes)
    baseline = metric(y_true, y_base)
    # the baseline on the same row resamples (same seed → same rows), so each replicate is normalized on its rows
    baseline_samples = row_bootstrap(metric, y_true, y_base, seed=row_seed)
    normalized_samples = [None if s is None or b is None else _rounded(normalized_score(s, b, metric))
                          for s, b in zip(score_samples, baseline_samples)]

    note = percentile_note(task, _split_source(split), board)
    grade = Grade(valid=True, reason="ok", score=score, metric=metric.name, baseline=baseline,
                  normalized=normalized_score(score, baseline, metric), percentile_note=note, board=board,
                  scored_rows=int(scored.sum()), score_samples=score_samples,
                  normalized_samples=normalized_samples, row_seed=row_seed)
    leaderboard = task_leaderboard(task, metric, board) if note is None else None
    if leaderboard is not None:
        grade.percentile = leaderboard.percentile(score)
        grade.percentile_samples = [None if s is None else round(leaderboard.percentile(s), 2)
                                    for s in score_samples]
        grade.medal = leaderboard.medal(score)
        grade.above_median = leaderboard.above_median(score)
    return grade


ROW_REPLICATES = 200        # held-out-row resamples scored per trial at grading time


# -- held-out rows ------------------------------------------------------------------------------
def _row_rng(seed: int) -> np.random.Generator:
    # a fixed salt keeps the row resamples apart from other streams seeded with the split seed
    return np.random.default_rng([int(seed), 0x5EED_B007])


def row_bootstrap(metric: Callable[[np.ndarray, np.ndarray], float], y_true: npt.ArrayLike, y_pred: npt.ArrayLike,
                  seed: int,
                  replicates: int = ROW_REPLICATES) -> list[float | None]:
    """``metric`` on ``replicates`` resamples (with replacement) of the scored rows.

    Seeded by the split seed: every submission graded on the same split gets the same row
    resamples, so replicate b is comparable across trials and planners. A resample the metric
    cannot score (e.g. ROC AUC on a single class) is None. Values keep 6 significant digits.
    """
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    rng = _row_rng(seed)
    out: list[float | None] = []
    for _ in range(replicates):
        rows = rng.integers(0, len(y_true), size=len(y_true))
        try:
            value = float(metric(y_true[rows], y_pred[rows]))
        except ValueError:
            value = float("nan")
        out.append(float(f"{value:.6g}") if math.isfinite(value) else None)
    return out
