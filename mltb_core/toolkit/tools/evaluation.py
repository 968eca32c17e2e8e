"""Evaluation tools: metrics, predictions, model/frame persistence and the submission file.

Files go through :mod:`mltb_core.toolkit.sandbox`; ``load_model`` only unpickles bytes
that ``save_model`` wrote during this trial: it keeps the SHA-256 of what it wrote
in the trial's memory (``ctx.model_hashes``, out of the model's reach), and
``load_model`` reads a file once, hashes those bytes and unpickles the same bytes,
because unpickling anything else could run arbitrary code.
"""
from __future__ import annotations

import hashlib
import pickle
import re
from typing import Annotated, Any

import numpy as np
import pandas as pd
from sklearn import metrics as skm

from mltb_core.toolkit.params import ESTIMATOR, PREDICTIONS, TABLE, TARGET, OneOf, ReadFile, WriteFile
from mltb_core.toolkit.registry import (PAPER, ToolContext, ToolInputError, ToolReturn, doc_from, make_get_and_set_tool,
                                        make_get_tool, make_set_tool)
from mltb_core.toolkit.sandbox import resolve_read, resolve_write
from mltb_core.toolkit.validation import TRACKING_COLUMN, as_target, require_csv_path, require_frame, require_model

__all__ = [
    "evaluate_regression_model", "evaluate_classification_model", "predict_target", "save_model", "load_model",
    "save_dataframe_to_csv", "csv_table", "create_submission", "align_features", "average_predictions",
    "ENSEMBLE_TOOL",
]

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")
_AUTO_FEATURE_NAME = re.compile(r"^(Column_\d+|f\d+|\d+)$")


# ---------------------------------------------------------------- helpers
def model_feature_names(model: Any) -> list[str] | None:
    """Training columns of a fitted sklearn / LightGBM / XGBoost / CatBoost model, if known."""
    for attr in ("feature_names_in_", "feature_name_", "feature_names_"):
        try:
            names = getattr(model, attr, None)
        except Exception:  # noqa: BLE001 - some libraries raise instead of returning None when unfitted
            names = None
        if names is not None and not callable(names) and len(names):   # an odd object's method is no name list
            return [str(n) for n in names]
    return None


def feature_key(name: Any) -> str:
    """A feature name as LightGBM stores it (non-word characters become '_'), for matching names."""
    return re.sub(r"[^\w]", "_", str(name))


def same_features(a: list[Any], b: list[Any]) -> bool:
    """Whether two feature lists name the same columns in the same order, up to LightGBM's renaming."""
    return [feature_key(x) for x in a] == [feature_key(x) for x in b]


def align_features(model: Any, X: Any) -> Any:
    """Reorder ``X``'s columns to the model's training order; refuse missing/extra columns clearly."""
    if not isinstance(X, pd.DataFrame):
        return X
    names = model_feature_names(model)
    if names is None:
        return X
    columns = [str(c) for c in X.columns]
    if all(_AUTO_FEATURE_NAME.match(n) for n in names) and set(names) != set(columns):
        # Trained on an unnamed array: only the width can be checked.
        if len(names) != len(columns):
            raise ToolInputError(f"the model was trained on {len(names)} features but X has {len(columns)} columns")
        return X
    if set(names) != set(columns):
        # LightGBM renames special characters at fit time ('55 Cancri e' -> '55_Cancri_e'): match on that form.
        by_key = {feature_key(c): c for c in columns}
        renamed = {by_key[feature_key(n)]: n for n in names if n not in columns and feature_key(n) in by_key}
        if renamed:
            X = X.rename(columns=renamed)
            columns = [str(c) for c in X.columns]
    missing = [n for n in names if n not in columns]
    extra = [c for c in columns if c not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} column(s) the model was trained on: {missing[:20]}")
        if extra:
            hint = f" ('{TRACKING_COLUMN}' must be dropped: split the combined frame first)" \
                if TRACKING_COLUMN in extra else ""
            parts.append(f"{len(extra)} column(s) the model never saw: {extra[:20]}{hint}")
        # every training column plus more: typically the test split still holding the target's placeholder
        advice = ("Drop them; if one is the target (its test rows hold only a placeholder), convert the test "
                  "frame with convert_dataframe_to_features_target (is_train=false), which drops it."
                  if extra and not missing else "Apply the same cleaning/feature steps to both train and test data.")
        raise ToolInputError("X does not have the model's training columns: " + "; ".join(parts) + ". " + advice)
    return X.set_axis(columns, axis=1)[names] if columns != names else X


def _predict(model: Any, X: Any) -> np.ndarray:
    require_model(model)
    pred = np.asarray(model.predict(align_features(model, X)))
    return pred.ravel() if pred.ndim == 2 and pred.shape[1] == 1 else pred


# ---------------------------------------------------------------- metrics
_EVALUATE_DOC = """Evaluate a trained $kind model on data.

    $computes

    Parameters
    ----------
    model
        A fitted $model.
    X_test
        Features (same columns as in training).
    y_test
        True $truth.
    model_name
        Name shown in the report.
    eval_data_label
        Shown in the report, e.g. "train" or "validation".

    Returns
    -------
    str
        The metrics as text.

    Example
    -------
    {"tool_name": "$tool_name", "tool_args": {"bindings": {"model": "$example_model",
     "X_test": "X_train", "y_test": "y_train"}, "func_kwargs": {"model_name": "$example_name",
     "eval_data_label": "train"}}}
    """


@make_get_tool(toolsets=PAPER, roles=("evaluation",), objects=("model", "X_test", "y_test"))
@doc_from(_EVALUATE_DOC, kind="regression", model="regression model", truth="target values",
          computes="""Computes RMSE, MAE, R2 (and RMSLE when all values are non-negative) of the
model's predictions on X_test against y_test. The data can be any labelled
set, e.g. the train set or a held-out split.""", example_model="best_model", example_name="LightGBM")
def evaluate_regression_model(model: Annotated[Any, ESTIMATOR], X_test: pd.DataFrame,
                              y_test: Annotated[pd.Series, TARGET], model_name: str = "model",
                              eval_data_label: str = "test") -> str:
    y = as_target(y_test, len(X_test), "y_test", "X_test")
    pred = _predict(model, X_test).astype(float)
    truth = y.to_numpy(dtype=float)
    lines = [f"Regression metrics for {model_name} on {eval_data_label} data ({len(truth)} rows):",
             f"RMSE: {np.sqrt(skm.mean_squared_error(truth, pred)):.6g}",
             f"MAE: {skm.mean_absolute_error(truth, pred):.6g}",
             f"R2: {skm.r2_score(truth, pred):.6g}" if len(truth) > 1 else "R2: n/a (one row)"]
    if (truth >= 0).all() and (pred >= 0).all():
        lines.append(f"RMSLE: {np.sqrt(skm.mean_squared_log_error(truth, pred)):.6g}")
    return "\n".join(lines)


@make_get_tool(toolsets=PAPER, roles=("evaluation",), objects=("model", "X_test", "y_test"))
@doc_from(_EVALUATE_DOC, kind="classification", model="classifier", truth="labels",
          computes="""Computes accuracy, precision, recall, F1 (macro-averaged for more than two
classes), ROC AUC and log loss when the model gives probabilities, and the
confusion matrix. The data can be any labelled set, e.g. the train set.""", example_model="best_estimator",
          example_name="CatBoost Classifier")
def evaluate_classification_model(model: Annotated[Any, ESTIMATOR], X_test: pd.DataFrame,
                                  y_test: Annotated[pd.Series, TARGET], model_name: str = "model",
                                  eval_data_label: str = "test") -> str:
    y = as_target(y_test, len(X_test), "y_test", "X_test")
    pred = pd.Series(_predict(model, X_test))
    if pred.dtype != y.dtype:  # e.g. CatBoost returns strings for bool labels
        try:
            pred = pred.astype(y.dtype)
        except (TypeError, ValueError):
            pass
    labels = sorted(pd.unique(pd.concat([y, pred], ignore_index=True)), key=str)
    binary = len(labels) <= 2
    average = "binary" if binary and len(labels) == 2 else "macro"
    pos = {"pos_label": labels[-1]} if average == "binary" else {}
    lines = [f"Classification metrics for {model_name} on {eval_data_label} data ({len(y)} rows, "
             f"{len(labels)} classes):",
             f"Accuracy: {skm.accuracy_score(y, pred):.6g}",
             f"Precision: {skm.precision_score(y, pred, average=average, zero_division=0, **pos):.6g}",
             f"Recall: {skm.recall_score(y, pred, average=average, zero_division=0, **pos):.6g}",
             f"F1: {skm.f1_score(y, pred, average=average, zero_division=0, **pos):.6g}"]
    if hasattr(model, "predict_proba") and y.nunique() > 1:
        try:
            proba = np.asarray(model.predict_proba(align_features(model, X_test)))
            classes = list(getattr(model, "classes_", range(proba.shape[1])))
            if proba.shape[1] == 2:
                lines.append(f"ROC AUC: {skm.roc_auc_score(y == classes[1], proba[:, 1]):.6g}")
            else:
                lines.append(f"ROC AUC (ovr): {skm.roc_auc_score(y, proba, multi_class='ovr', labels=classes):.6g}")
            lines.append(f"Log loss: {skm.log_loss(y, proba, labels=classes):.6g}")
        except (ValueError, TypeError) as exc:
            lines.append(f"(probability metrics unavailable: {exc})")
    matrix = skm.confusion_matrix(y.astype(str), pred.astype(str), labels=[str(v) for v in labels])
    lines.append("Confusion matrix (rows = true, columns = predicted):")
    lines.append(pd.DataFrame(matrix, index=[str(v) for v in labels], columns=[str(v) for v in labels]).to_string())
    return "\n".join(lines)


# ------------------------------------------------------------ predictions
@make_get_and_set_tool(toolsets=PAPER, roles=("evaluation",), objects=("model", "X_data"))
def predict_target(model: Annotated[Any, ESTIMATOR], X_data: pd.DataFrame, model_name: str = "model",
                   return_probabilities: bool = False, ctx: ToolContext | None = None) -> pd.Series | pd.DataFrame:
    """Make predictions using a trained model.

    The columns of X_data must be the ones the model was trained on (their order
    is fixed automatically); missing or extra columns are reported.

    Parameters
    ----------
    model
        Trained model (regression or classification).
    X_data
        Features to make predictions on, e.g. the test features.
    model_name
        Name of the model, shown in the result (the predictions are named after
        the task's target column).
    return_probabilities
        For classifiers: return probabilities instead of labels - a Series with
        the positive-class probability for binary tasks, a DataFrame with one
        column per class for multiclass tasks.

    Returns
    -------
    pd.Series or pd.DataFrame
        Predictions, one per row of X_data (same index and order). Predictions of
        the test features saved with save_dataframe_to_csv are a valid submission.

    Example
    -------
    {"tool_name": "predict_target", "tool_args": {"bindings": {"model": "best_estimator", "X_data": "X_test"},
     "func_kwargs": {"model_name": "CatBoost Classifier"}, "output": "test_predictions"}}
    """
    require_frame(X_data, "X_data")
    X = align_features(model, X_data)
    # Named after the target, so the predictions are the submission's target column as they are (the
    # paper's finish saves them alone); the model's name is only reported.
    target = getattr(getattr(ctx, "task", None), "target", None) or model_name
    note = f"Predictions of {model_name} for {len(X_data)} rows, named {str(target)!r}."
    if not return_probabilities:
        return ToolReturn(pd.Series(_predict(model, X), index=X_data.index, name=target), note)
    require_model(model, "predict_proba")
    proba = np.asarray(model.predict_proba(X))
    classes = list(getattr(model, "classes_", range(proba.shape[1])))
    if proba.ndim == 2 and proba.shape[1] == 2:
        return ToolReturn(pd.Series(proba[:, 1], index=X_data.index, name=target),
                          f"{note[:-1]}: the probability of class {classes[1]!r}.")
    return ToolReturn(pd.DataFrame(proba, index=X_data.index, columns=[str(c) for c in classes]),
                      f"Class probabilities of {model_name} for {len(X_data)} rows, one column per class.")


ENSEMBLE_TOOL = "average_predictions"
_AVERAGE_METHODS = ("auto", "mean", "vote")


def _vote(columns: list[np.ndarray]) -> np.ndarray:
    """Per row, the label most inputs predict; a tie goes to the label of the earliest input among the tied."""
    values = np.stack([np.asarray(c, dtype=object) for c in columns])          # (inputs, rows)
    votes = np.stack([(values == values[j]).sum(axis=0) for j in range(len(columns))])
    winner = votes.argmax(axis=0)                                              # first maximum: earliest input
    return values[winner, np.arange(values.shape[1])]


@make_get_and_set_tool(roles=("evaluation",),  # extended only: not in the paper's Table 9
                       objects=("predictions_1", "predictions_2", "predictions_3", "predictions_4", "predictions_5"))
def average_predictions(predictions_1: Annotated[Any, PREDICTIONS], predictions_2: Annotated[Any, PREDICTIONS],
                        predictions_3: Annotated[Any, PREDICTIONS] = None,
                        predictions_4: Annotated[Any, PREDICTIONS] = None,
                        predictions_5: Annotated[Any, PREDICTIONS] = None,
                        method: Annotated[str, OneOf(_AVERAGE_METHODS)] = "auto", ctx: ToolContext | None = None) -> Any:
    """Ensemble 2 to 5 models by averaging their test predictions (outputs of predict_target).

    All inputs must predict the same rows: same length and, for Series/DataFrames, the same
    index (predict each model on the same X_test); probability DataFrames must have the same
    class columns.

    Parameters
    ----------
    predictions_1, predictions_2
        Predictions of two models (required). List the best model first: it wins ties.
    predictions_3, predictions_4, predictions_5
        Optional further models' predictions.
    method
        "mean": the row-wise mean (regression values, or class probabilities from
        predict_target with return_probabilities=true; a DataFrame of one column per class
        is averaged per class). "vote": the majority label per row (class labels); a tie goes
        to the label of the earliest input. "auto" (default): "mean" for regression tasks
        and for floating-point predictions, "vote" otherwise (labels).

    Returns
    -------
    Series or DataFrame
        The averaged predictions, one per row, with the first input's index.

    Example
    -------
    {"tool_name": "average_predictions", "tool_args": {"bindings": {"predictions_1": "lgbm_predictions",
     "predictions_2": "xgb_predictions"}, "func_kwargs": {"method": "auto"}, "output": "ensemble_predictions"}}
    """
    if method not in _AVERAGE_METHODS:
        raise ToolInputError(f"method must be one of {', '.join(_AVERAGE_METHODS)}, got {method!r}")
    given = [(f"predictions_{i}", p) for i, p in
             enumerate((predictions_1, predictions_2, predictions_3, predictions_4, predictions_5), 1) if p is not None]
    frames = [name for name, p in given if isinstance(p, pd.DataFrame)]
    if frames and len(frames) != len(given):
        raise ToolInputError(f"{', '.join(frames)} hold per-class probability tables but the other inputs do not; "
                             "average predictions of the same kind (all labels, all values or all probabilities)")
    first_name, first = given[0]
    for name, p in given[1:]:
        if len(p) != len(first):
            raise ToolInputError(f"{name} has {len(p)} rows but {first_name} has {len(first)}; "
                                 "average predictions of the same rows (predict every model on the same X_test)")
        if hasattr(p, "index") and hasattr(first, "index") and not p.index.equals(first.index):
            raise ToolInputError(f"{name} and {first_name} have the same length but different row indexes; "
                                 "average predictions of the same rows (predict every model on the same X_test)")
        if frames and list(p.columns) != list(first.columns):
            raise ToolInputError(f"{name} has class columns {list(p.columns)} but {first_name} has "
                                 f"{list(first.columns)}; the models must know the same classes")
    index = first.index if hasattr(first, "index") else pd.RangeIndex(len(first))
    if frames:
        if method == "vote":
            raise ToolInputError("method 'vote' needs predicted labels, but the inputs are probability tables")
        mean = np.mean([p.to_numpy(dtype=float) for _, p in given], axis=0)
        return pd.DataFrame(mean, index=index, columns=first.columns)
    columns = [np.asarray(p).ravel() for _, p in given]
    if method == "auto":
        regression = getattr(getattr(ctx, "task", None), "problem_type", None) == "regression"
        method = "mean" if regression or all(np.issubdtype(c.dtype, np.floating) for c in columns) else "vote"
    name = getattr(first, "name", None)
    if method == "vote":
        voted = _vote(columns)
        dtype = columns[0].dtype if all(c.dtype == columns[0].dtype for c in columns) else object
        return pd.Series(voted.astype(dtype), index=index, name=name)
    try:
        stacked = np.stack([c.astype(float) for c in columns])
    except (TypeError, ValueError) as exc:
        raise ToolInputError(f"method 'mean' needs numeric predictions ({exc}); use method 'vote' for labels") from None
    return pd.Series(stacked.mean(axis=0), index=index, name=name)


# ------------------------------------------------------------ persistence
@make_get_tool(toolsets=PAPER, roles=("modeling", "evaluation"), objects=("model",))
def save_model(model: Annotated[Any, ESTIMATOR], ctx: ToolContext,
               filepath: Annotated[str, WriteFile(PICKLE_SUFFIXES)] = "model.pkl") -> str:
    """Save the trained model to disk using pickle.

    The file is written inside your sandbox directory.

    Parameters
    ----------
    model
        The trained model.
    filepath

    Returns
    -------
    str
        Where the model was saved.

    Example
    -------
    {"tool_name": "save_model", "tool_args": {"bindings": {"model": "best_estimator"},
     "func_kwargs": {"filepath": "catboost_model.pkl"}}}
    """
    if not str(filepath).lower().endswith(PICKLE_SUFFIXES):
        raise ToolInputError(f"filepath {filepath!r} must end with one of {PICKLE_SUFFIXES}")
    require_model(model)
    path = resolve_write(ctx, filepath)
    try:
        payload = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise ToolInputError(f"this model cannot be pickled: {exc}") from None
    path.write_bytes(payload)
    ctx.written_files.add(path)
    ctx.model_hashes.add(hashlib.sha256(payload).hexdigest())
    return f"Model saved to {path.name} ({len(payload)} bytes)."


@make_set_tool(toolsets=PAPER, roles=("modeling", "evaluation"))
def load_model(filepath: Annotated[str, ReadFile(PICKLE_SUFFIXES)], ctx: ToolContext) -> Any:
    """Load a trained model from disk using pickle.

    Only models saved with save_model during this run can be loaded.

    Parameters
    ----------
    filepath
        As given to save_model.

    Returns
    -------
    Any
        The model, stored on the scratchpad under `output`.

    Example
    -------
    {"tool_name": "load_model", "tool_args": {"bindings": {}, "func_kwargs": {"filepath": "model.pkl"},
     "output": "model"}}
    """
    path = resolve_read(ctx, filepath)
    data = path.read_bytes()   # read once: the bytes checked are the bytes unpickled
    if hashlib.sha256(data).hexdigest() not in ctx.model_hashes:
        saved = sorted({p.name for p in ctx.written_files if str(p).lower().endswith(PICKLE_SUFFIXES)})
        raise ToolInputError(f"refusing to unpickle {filepath!r}: only models saved with save_model in this run can "
                             "be loaded, unchanged (unpickling other bytes could run arbitrary code). Saved models: "
                             f"{', '.join(saved) or 'none yet'}")
    return pickle.loads(data)  # noqa: S301 - exactly the bytes this trial's save_model wrote


def csv_table(df: Any) -> Any:
    """What save_dataframe_to_csv writes for ``df``: a Series (predict_target's output) as one column, anything
    else as it is. The stage check asks the grader about predictions saved this way."""
    return df.to_frame() if isinstance(df, pd.Series) else df


@make_get_tool(toolsets=PAPER, roles=("evaluation",))
def save_dataframe_to_csv(df: Annotated[pd.DataFrame, TABLE], filepath: Annotated[str, WriteFile((".csv",))],
                          ctx: ToolContext) -> str:
    """Save a DataFrame to CSV file.

    Writes the DataFrame (without its index) inside your sandbox directory.

    Parameters
    ----------
    df
        The DataFrame to save, e.g. a submission frame; a Series (e.g. the
        output of predict_target) is saved as one column.
    filepath
        E.g. "submission.csv".

    Returns
    -------
    str
        Confirmation with the number of rows and columns written.

    Example
    -------
    {"tool_name": "save_dataframe_to_csv", "tool_args": {"bindings": {"df": "submission_df"},
     "func_kwargs": {"filepath": "submission.csv"}}}
    """
    df = require_frame(csv_table(df))
    require_csv_path(filepath)
    path = resolve_write(ctx, filepath)
    df.to_csv(path, index=False)
    ctx.written_files.add(path)
    return f"Saved {len(df)} rows x {df.shape[1]} columns to {path.name}."


# ------------------------------------------------------------- submission
def _looks_like_probabilities(values: pd.Series) -> bool:
    if not pd.api.types.is_float_dtype(values.dtype):
        return False
    finite = values.dropna()
    return bool(len(finite)) and finite.between(0, 1).all() and not finite.isin([0.0, 1.0]).all()


def _positive_column(frame: pd.DataFrame) -> Any:
    for name in (1, "1", True, "True", "1.0"):
        if name in frame.columns:
            return name
    return frame.columns[-1]


def _submission_values(predictions: Any, task: Any) -> pd.Series | pd.DataFrame:
    """The target column(s) of the submission from the model's predictions."""
    target, wants_proba = task.target, getattr(task, "prediction", "label") == "probability"
    if isinstance(predictions, pd.DataFrame):
        if target in predictions.columns:
            return predictions[target]
        if predictions.shape[1] == 1:
            return predictions.iloc[:, 0]
        if not wants_proba:
            raise ToolInputError(
                f"predictions has {predictions.shape[1]} columns (class probabilities?) but this task needs one "
                f"predicted label per row in '{target}'; use predict_target with return_probabilities=false")
        if predictions.shape[1] == 2 and task.problem_type == "binary":
            return predictions[_positive_column(predictions)]
        return predictions  # multiclass probabilities: one column per class
    values = pd.Series(np.asarray(predictions).ravel() if not isinstance(predictions, pd.Series) else
                       predictions.to_numpy())
    if not wants_proba and task.problem_type in ("binary", "multiclass") and _looks_like_probabilities(values):
        raise ToolInputError(f"the predictions look like probabilities, but '{target}' must hold predicted labels; "
                             "use predict_target with return_probabilities=false")
    return values


@make_get_tool(roles=("evaluation",), objects=("predictions", "test_df"))  # extended only: not in the paper
def create_submission(predictions: Annotated[Any, PREDICTIONS], test_df: pd.DataFrame, ctx: ToolContext,
                      filepath: Annotated[str, WriteFile((".csv",))] = "submission.csv") -> str:
    """Create the competition submission file from test predictions.

    Takes the id column from test_df and the predictions as the target column,
    in the format the task requires, and writes the CSV into your sandbox.

    Parameters
    ----------
    predictions
        Predictions for the test rows, in the same order as test_df (e.g. the
        output of predict_target on the test features).
    test_df
        The test data that still has the id column (e.g. the test part after
        split_combined_into_train_test, or the original test data).
    filepath
        "submission.csv" is what gets graded.

    Returns
    -------
    str
        Confirmation: rows, columns and the first rows of the submission.

    Example
    -------
    {"tool_name": "create_submission", "tool_args": {"bindings": {"predictions": "test_predictions",
     "test_df": "test_df"}, "func_kwargs": {}}}
    """
    task = ctx.task
    if task is None:
        raise ToolInputError("no task is attached to this run, so the submission format is unknown")
    require_frame(test_df, "test_df")
    if task.id_column not in test_df.columns:
        raise ToolInputError(f"test_df has no id column '{task.id_column}'; bind the test data that still has it "
                             f"(columns: {', '.join(map(str, test_df.columns[:30]))})")
    values = _submission_values(predictions, task)
    if len(values) != len(test_df):
        raise ToolInputError(f"predictions has {len(values)} rows but test_df has {len(test_df)}; "
                             "predict on the full test set (no rows dropped)")
    require_csv_path(filepath)
    ids = test_df[task.id_column].to_numpy()
    if isinstance(values, pd.DataFrame):
        submission = pd.concat([pd.DataFrame({task.id_column: ids}), values.reset_index(drop=True)], axis=1)
    else:
        submission = pd.DataFrame({task.id_column: ids, task.target: np.asarray(values)})
    path = resolve_write(ctx, filepath)
    submission.to_csv(path, index=False)
    ctx.written_files.add(path)
    return (f"Submission written to {path.name}: {len(submission)} rows, columns {list(submission.columns)}.\n"
            f"{submission.head(5).to_string(index=False)}")
