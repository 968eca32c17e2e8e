"""Modeling tools: the paper's ten ``fit_*`` tools and eight ``tune_*`` (GridSearchCV) tools.

Each tool validates its inputs (clear errors the model can act on), fits on all of
``X_train`` and returns the fitted estimator with a note reporting the
cross-validation score in the task's metric. The score is also stored on the
estimator (:mod:`mltb_core.toolkit.cvrecord`) for the reward module.

Libraries with awkward input contracts are wrapped in a small sklearn-compatible
:class:`PreparedClassifier` / :class:`PreparedRegressor` that does the same
preparation at fit and predict time: XGBoost needs labels 0..k-1 (we encode and
decode them, so labels 1..7 or booleans round-trip), CatBoost needs categorical
values as text and returns an (n, 1) array for multiclass predictions.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
import pandas as pd
from sklearn import metrics as skm
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold, cross_val_score
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import type_of_target

from mltb_core.toolkit.params import TARGET, Range
from mltb_core.toolkit import cvrecord, limits
from mltb_core.toolkit.registry import PAPER, ToolContext, ToolInputError, ToolReturn, make_get_and_set_tool
from mltb_core.toolkit.validation import MAX_CATEGORY_LEVELS, as_features, as_target, infinite_columns

__all__ = ["PreparedClassifier", "PreparedRegressor", "ModelSpec", "MODEL_SPECS", "FIT_TOOLS", "TUNE_TOOLS",
           "MAX_CATEGORY_LEVELS", "MAX_CLASSES", "CLASSIFICATION_METRICS", "REGRESSION_METRICS"]

MAX_FOLDS = 20
# A classifier target with more distinct values than this is refused unless it is the task's own target:
# no bundled task has more than 7 classes, and a boosted classifier grows one tree per class per round, so
# a numeric column taken as the target (spaceship's 'Spa', ~1,000 values) ran LightGBM into the 300-s limit.
MAX_CLASSES = 100
CLASSIFICATION_METRICS = ("accuracy", "prior_weighted_accuracy", "macro_f1", "roc_auc", "gini", "mcc", "log_loss")
REGRESSION_METRICS = ("rmse", "rmsle", "mae", "r2")
_ROLES = ("modeling", "fits_model")
_TUNING_ROLES = _ROLES + ("tuning",)
_CATEGORY_MISSING = "NaN"  # CatBoost takes categorical values as text only


# ------------------------------------------------------------------- wrappers
class _PreparedModel(BaseEstimator):
    """Fit ``estimator`` after library-specific preparation and undo it on predict.

    Parameters
    ----------
    estimator : estimator
        Unfitted estimator; a clone is fitted as ``estimator_``.
    encode_labels : bool
        Fit on label codes 0..k-1 and decode predictions back (XGBoost).
    categories_as_text : bool
        Pass category-dtype columns as text with missing as "NaN" and declare them
        as ``cat_features`` (CatBoost).
    """

    def __init__(self, estimator: Any = None, encode_labels: bool = False, categories_as_text: bool = False):
        self.estimator = estimator
        self.encode_labels = encode_labels
        self.categories_as_text = categories_as_text

    def fit(self, X: pd.DataFrame, y: Any) -> _PreparedModel:
        self.feature_names_in_ = np.asarray(X.columns, dtype=object)
        self.n_features_in_ = X.shape[1]
        self.category_columns_ = ([c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)]
                                  if self.categories_as_text else [])
        target = y
        if self.encode_labels:
            self.label_encoder_ = LabelEncoder().fit(y)
            target = self.label_encoder_.transform(y)
        estimator = clone(self.estimator)
        if self.category_columns_:
            estimator.set_params(cat_features=list(self.category_columns_))
        estimator.fit(self._prepare(X), target)
        self.estimator_ = estimator
        return self

    def _prepare(self, X: pd.DataFrame) -> pd.DataFrame:
        if not self.category_columns_:
            return X
        out = X.copy(deep=False)
        for column in self.category_columns_:
            values = X[column].astype(object)
            out[column] = values.where(values.notna(), _CATEGORY_MISSING).astype(str)
        return out

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        predictions = np.asarray(self.estimator_.predict(self._prepare(X)))
        if predictions.ndim == 2 and predictions.shape[1] == 1:
            predictions = predictions.ravel()
        if self.encode_labels:
            predictions = self.label_encoder_.inverse_transform(predictions.astype(int))
        return predictions

    def __getattr__(self, name: str) -> Any:
        # Forward fitted-model attributes (n_jobs, feature_importances_, ...) to the inner
        # estimator; guarded so unpickling/cloning never recurses.
        inner = self.__dict__.get("estimator_")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)


class PreparedClassifier(ClassifierMixin, _PreparedModel):
    """Classifier wrapper: predictions and ``classes_`` are in the original labels."""

    @property
    def classes_(self) -> np.ndarray:
        if self.encode_labels:
            return self.label_encoder_.classes_
        return self.estimator_.classes_

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.estimator_.predict_proba(self._prepare(X)))


class PreparedRegressor(RegressorMixin, _PreparedModel):
    """Regressor wrapper (CatBoost categorical handling)."""


# ---------------------------------------------------------------- model specs
@dataclass(frozen=True)
class ModelSpec:
    """One model family: how to build it, what input it takes, how to tune it."""

    name: str                 # tool-name stem: fit_<name>, tune_<name>
    title: str                # for docstrings and notes
    kind: str                 # "classifier" | "regressor"
    build: Callable[[int, int], Any]  # (seed, threads) -> unfitted estimator
    accepts_missing: bool
    categorical: str          # "reject" | "native" (category dtype used as-is) | "catboost"
    wrapper: Callable[[Any], Any] | None = None
    grid: dict[str, list] = field(default_factory=dict)

    def make(self, seed: int, threads: int) -> Any:
        estimator = self.build(seed, threads)
        return self.wrapper(estimator) if self.wrapper else estimator

    @property
    def grid_for_search(self) -> dict[str, list]:
        prefix = "estimator__" if self.wrapper else ""
        return {prefix + key: values for key, values in self.grid.items()}


def _logistic(seed: int, threads: int):
    from sklearn.linear_model import LogisticRegression

    # n_jobs has no effect on LogisticRegression since sklearn 1.8, so it is not set.
    return LogisticRegression(max_iter=1000, random_state=seed)


def _linear(seed: int, threads: int):
    from sklearn.linear_model import LinearRegression

    return LinearRegression(n_jobs=threads)


def _random_forest(kind: str) -> Callable[[int, int], Any]:
    def build(seed: int, threads: int):
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        cls = RandomForestClassifier if kind == "classifier" else RandomForestRegressor
        return cls(n_estimators=100, n_jobs=threads, random_state=seed)
    return build


def _xgboost(kind: str) -> Callable[[int, int], Any]:
    def build(seed: int, threads: int):
        import xgboost

        cls = xgboost.XGBClassifier if kind == "classifier" else xgboost.XGBRegressor
        return cls(n_estimators=200, learning_rate=0.1, max_depth=6, tree_method="hist",
                   enable_categorical=True, n_jobs=threads, random_state=seed, verbosity=0)
    return build


def _lightgbm(kind: str) -> Callable[[int, int], Any]:
    def build(seed: int, threads: int):
        import lightgbm

        cls = lightgbm.LGBMClassifier if kind == "classifier" else lightgbm.LGBMRegressor
        return cls(n_estimators=200, learning_rate=0.05, num_leaves=31, n_jobs=threads,
                   random_state=seed, verbose=-1)
    return build


def _catboost(kind: str) -> Callable[[int, int], Any]:
    def build(seed: int, threads: int):
        import catboost

        cls = catboost.CatBoostClassifier if kind == "classifier" else catboost.CatBoostRegressor
        return cls(iterations=200, learning_rate=0.1, depth=6, thread_count=threads, random_seed=seed,
                   verbose=0, allow_writing_files=False)
    return build


def _wrap_classifier(encode_labels: bool = False, categories_as_text: bool = False):
    return lambda est: PreparedClassifier(est, encode_labels=encode_labels, categories_as_text=categories_as_text)


def _specs() -> dict[str, ModelSpec]:
    rf_grid = {"max_depth": [None, 12], "min_samples_leaf": [1, 3], "max_features": ["sqrt", 0.5]}
    xgb_grid = {"max_depth": [4, 6], "learning_rate": [0.05, 0.1], "subsample": [0.8, 1.0]}
    lgbm_grid = {"num_leaves": [15, 31], "learning_rate": [0.05, 0.1], "min_child_samples": [10, 20]}
    cat_grid = {"depth": [4, 6], "learning_rate": [0.05, 0.1], "l2_leaf_reg": [1, 3]}
    specs = [
        ModelSpec("logistic_regressor", "Logistic Regression", "classifier", _logistic, False, "reject"),
        ModelSpec("linear_regressor", "Linear Regression", "regressor", _linear, False, "reject"),
    ]
    for kind in ("regressor", "classifier"):
        specs += [
            ModelSpec(f"random_forest_{kind}", "Random Forest", kind, _random_forest(kind), False, "reject",
                      grid=rf_grid),
            ModelSpec(f"xgboost_{kind}", "XGBoost", kind, _xgboost(kind), True, "native",
                      wrapper=_wrap_classifier(encode_labels=True) if kind == "classifier" else None,
                      grid=xgb_grid),
            ModelSpec(f"lightgbm_{kind}", "LightGBM", kind, _lightgbm(kind), True, "native", grid=lgbm_grid),
            ModelSpec(f"catboost_{kind}", "CatBoost", kind, _catboost(kind), True, "catboost",
                      wrapper=(_wrap_classifier(categories_as_text=True) if kind == "classifier"
                               else lambda est: PreparedRegressor(est, categories_as_text=True)),
                      grid=cat_grid),
        ]
    return {spec.name: spec for spec in specs}


MODEL_SPECS = _specs()


# ----------------------------------------------------------------- validation
def _check_feature_types(X: pd.DataFrame, spec: ModelSpec) -> None:
    categorical = [c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)]
    # is_string_dtype is also true for a category of strings, so categories are excluded first.
    text = [c for c in X.columns if c not in categorical
            and (pd.api.types.is_object_dtype(X[c]) or pd.api.types.is_string_dtype(X[c]))]
    if text:
        raise ToolInputError(f"X_train has text/object column(s) {text}; encode them (label_encode, one_hot_encode, "
                             "encode_all_categorical_columns) or drop them before fitting")
    dates = [c for c in X.columns if pd.api.types.is_datetime64_any_dtype(X[c])
             or pd.api.types.is_timedelta64_dtype(X[c])]
    if dates:
        raise ToolInputError(f"X_train has date/time column(s) {dates}; use extract_datetime_features or "
                             "create_time_delta and drop the originals")
    if categorical and spec.categorical == "reject":
        raise ToolInputError(f"{spec.title} cannot take category-dtype column(s) {categorical}; encode them "
                             "(label_encode or one_hot_encode) first")
    wide = {c: int(X[c].cat.categories.size) for c in categorical if X[c].cat.categories.size > MAX_CATEGORY_LEVELS}
    if wide:
        raise ToolInputError(f"category column(s) with more than {MAX_CATEGORY_LEVELS} levels: {wide}; "
                             "label_encode them or drop them")
    other = [c for c in X.columns if c not in categorical and not pd.api.types.is_numeric_dtype(X[c])]
    if other:
        raise ToolInputError(f"X_train column(s) {other} are not numeric ({[str(X[c].dtype) for c in other]}); "
                             "cast or encode them")
    infinite = infinite_columns(X)
    if infinite:
        raise ToolInputError(f"X_train column(s) {infinite} contain infinite values (often a division by zero); "
                             "replace them before fitting")
    if not spec.accepts_missing:
        missing = {c: int(n) for c, n in X.isna().sum().items() if n}
        if missing:
            raise ToolInputError(f"{spec.title} cannot handle missing values; X_train has NaN in {missing} "
                                 "(column: count). Fill them (fillna_with_median, fillna_with_mode, ...) or use "
                                 "XGBoost/LightGBM/CatBoost, which handle missing values")


def _target_values(y: pd.Series, spec: ModelSpec) -> np.ndarray:
    """The target as a numpy array the library accepts; rejects the wrong problem type."""
    is_text = (pd.api.types.is_object_dtype(y) or pd.api.types.is_string_dtype(y)
               or isinstance(y.dtype, pd.CategoricalDtype))
    if spec.kind == "regressor":
        if pd.api.types.is_bool_dtype(y):
            return y.to_numpy(dtype=float)
        if is_text:
            numbers = pd.to_numeric(y.astype(object), errors="coerce")
            if numbers.isna().any():
                sample = y[numbers.isna()].iloc[0]
                raise ToolInputError(f"y_train holds labels such as {sample!r}, not numbers; a regressor needs a "
                                     "numeric target (use a *_classifier tool for labels)")
            return numbers.to_numpy(dtype=float)
        return y.to_numpy(dtype=float)
    values = y.astype(object).to_numpy() if is_text else y.to_numpy()
    kind = type_of_target(values)
    if kind == "continuous":
        raise ToolInputError(f"y_train looks continuous ({y.nunique()} distinct non-integer values); a classifier "
                             "needs class labels: use a *_regressor tool, or fix the target column")
    if y.nunique() < 2:
        raise ToolInputError(f"y_train has a single class ({y.iloc[0]!r}); a classifier needs at least two")
    return values


# ------------------------------------------------------------------- scoring
@dataclass(frozen=True)
class _CVMetric:
    name: str
    greater_is_better: bool
    scorer: Callable[[Any, pd.DataFrame, Any], float]  # sklearn scorer: larger is better
    remark: str = ""


def _metric_value(metric: Any, estimator: Any, X: pd.DataFrame, y: Any) -> float:
    """The metric in its natural units on (X, y), using probabilities when the metric needs them."""
    if metric.needs != "probability":
        return metric(y, estimator.predict(X))
    y = np.asarray(y)
    proba = np.asarray(estimator.predict_proba(X), dtype=float)
    classes = list(estimator.classes_)
    if len(classes) == 2 and set(y.tolist()) <= set(classes):
        if metric.name == "log_loss":
            return float(skm.log_loss(y, proba, labels=classes))
        return metric(y == classes[1], proba[:, 1])
    # Multiclass, or a fold whose truth holds a class the training folds never saw
    # (rare classes with plain KFold): score over the union of labels, unseen ones at probability 0.
    labels = classes + [c for c in pd.unique(y) if c not in classes]
    full = np.zeros((len(y), len(labels)))
    full[:, :len(classes)] = proba
    if metric.name == "log_loss":
        full = np.clip(full, 1e-15, 1.0)
        return float(skm.log_loss(y, full / full.sum(axis=1, keepdims=True), labels=labels))
    present = [i for i, label in enumerate(labels) if label in set(y.tolist())]
    try:  # roc_auc_score wants its labels in sorted order
        present.sort(key=lambda i: labels[i])
    except TypeError:
        present.sort(key=lambda i: str(labels[i]))
    scores = full[:, present]
    totals = scores.sum(axis=1, keepdims=True)
    scores = np.divide(scores, totals, out=np.full_like(scores, 1.0 / len(present)), where=totals > 0)
    if len(present) == 2:
        auc = float(skm.roc_auc_score(y == labels[present[1]], scores[:, 1]))
    else:
        auc = float(skm.roc_auc_score(y, scores, multi_class="ovr", labels=[labels[i] for i in present]))
    return 2.0 * auc - 1.0 if metric.name == "gini" else auc


def _cv_metric(ctx: ToolContext | None, kind: str, y: np.ndarray) -> _CVMetric:
    from mltb_core.bench.metrics import METRICS, task_metric as configured_metric

    allowed = CLASSIFICATION_METRICS if kind == "classifier" else REGRESSION_METRICS
    default = "accuracy" if kind == "classifier" else "rmse"
    task = getattr(ctx, "task", None)
    task_metric = getattr(task, "metric", None)
    name, remark = default, ""
    if task_metric in allowed and task_metric in METRICS:
        name = task_metric
    elif task_metric:
        remark = f" (the task metric {task_metric!r} does not apply to a {kind}; showing {default})"
    if name == "rmsle" and np.min(y) < 0:
        name, remark = "rmse", " (rmsle needs a non-negative target; showing rmse)"
    # the task's own settings (prior_weighted_accuracy's class weights), as the grader scores it
    metric = configured_metric(task) if name == task_metric else METRICS[name]

    def scorer(estimator: Any, X: pd.DataFrame, y_true: Any) -> float:
        value = _metric_value(metric, estimator, X, y_true)
        return value if metric.greater_is_better else -value

    return _CVMetric(name, metric.greater_is_better, scorer, remark)


def _splitter(cv: Any, kind: str, y: np.ndarray, seed: int):
    if cv > len(y):
        raise ToolInputError(f"'cv'={cv} folds need at least {cv} rows; X_train has {len(y)}")
    if kind == "classifier":
        _, counts = np.unique(y.astype(str) if y.dtype == object else y, return_counts=True)
        if counts.min() >= cv:
            return StratifiedKFold(n_splits=int(cv), shuffle=True, random_state=seed)
    return KFold(n_splits=int(cv), shuffle=True, random_state=seed)


def _record_score(model: Any, metric: _CVMetric, mean: float, std: float, cv: int) -> str:
    cvrecord.attach(model, mean, metric.name, metric.greater_is_better, std)
    return f"{cv}-fold CV {metric.name}: {mean:.4f} ± {std:.4f}{metric.remark}"


# --------------------------------------------------------------------- tools
def _check_class_count(y: pd.Series, ctx: ToolContext | None) -> None:
    """Refuse a classifier target with more than MAX_CLASSES classes unless it is the task's own target."""
    count = int(y.nunique())
    if count <= MAX_CLASSES:
        return
    task = getattr(ctx, "task", None)
    target = getattr(task, "target", None)
    regression = getattr(task, "problem_type", None) == "regression"
    if target is not None and y.name == target and not regression:
        return   # the task's own labels: it has that many classes
    named = f"y_train ({y.name!r})" if y.name is not None else "y_train"
    if target is None:
        advice = "check the target column, or use a *_regressor tool if it is a number"
    elif regression:
        advice = f"the task's target {target!r} is a number: fit a *_regressor tool on it"
    else:
        advice = (f"the task's target is {target!r}: convert the train frame with "
                  f"convert_dataframe_to_features_target(target_column={target!r}) and fit on that y")
    raise ToolInputError(f"{named} has {count} distinct values, more than the {MAX_CLASSES} classes a classifier "
                         f"is fitted on here; {advice}")


def _prepare(spec: ModelSpec, X_train: Any, y_train: Any, cv: Any, ctx: ToolContext | None):
    X = as_features(X_train)
    target = as_target(y_train, len(X))
    if spec.kind == "classifier":
        _check_class_count(target, ctx)
    y = _target_values(target, spec)
    _check_feature_types(X, spec)
    seed = int(getattr(ctx, "seed", 0) or 0)
    splitter = _splitter(cv, spec.kind, y, seed)
    metric = _cv_metric(ctx, spec.kind, y)
    return X, y, seed, splitter, metric


def _fit_with_cv(spec: ModelSpec, X_train: Any, y_train: Any, cv: Any, ctx: ToolContext | None) -> ToolReturn:
    X, y, seed, splitter, metric = _prepare(spec, X_train, y_train, cv, ctx)
    model = spec.make(seed, limits.thread_count())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence/feature-name chatter is noise for the agent
        scores = cross_val_score(model, X, y, cv=splitter, scoring=metric.scorer, n_jobs=1, error_score="raise")
        model.fit(X, y)
    sign = 1.0 if metric.greater_is_better else -1.0
    note = _record_score(model, metric, sign * scores.mean(), scores.std(), int(cv))
    return ToolReturn(model, f"{note}. Fitted {spec.title} {spec.kind} on all {len(X)} rows.")


def _tune_with_cv(spec: ModelSpec, X_train: Any, y_train: Any, cv: Any, ctx: ToolContext | None) -> ToolReturn:
    X, y, seed, splitter, metric = _prepare(spec, X_train, y_train, cv, ctx)
    search = GridSearchCV(spec.make(seed, limits.thread_count()), spec.grid_for_search, scoring=metric.scorer,
                          cv=splitter, n_jobs=1, refit=True, error_score="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search.fit(X, y)
    model = search.best_estimator_
    best = {key.removeprefix("estimator__"): value for key, value in search.best_params_.items()}
    model.mltb_best_params_ = best
    sign = 1.0 if metric.greater_is_better else -1.0
    std = float(search.cv_results_["std_test_score"][search.best_index_])
    note = _record_score(model, metric, sign * search.best_score_, std, int(cv))
    tried = len(search.cv_results_["params"])
    return ToolReturn(model, f"Best params: {best}. {note} (best of {tried} candidates). "
                             f"Refitted on all {len(X)} rows.")


def _docstring(spec: ModelSpec, tool_name: str, tuning: bool) -> str:
    kind = spec.kind.capitalize()
    stem = spec.name.rsplit("_", 1)[0]  # random_forest_classifier -> random_forest
    if tuning:
        grid = ", ".join(f"{k} in {v}" for k, v in spec.grid.items())
        head = (f"Perform hyperparameter tuning for {spec.title} {kind} using GridSearchCV.\n\n"
                f"Searches {grid}; refits the best model on all of X_train and reports the best "
                "parameters and their cross-validation score.")
        output = f"tuned_{stem}"
    else:
        head = f"Fit a {spec.title} {kind} on all of X_train and report its cross-validation score."
        output = f"{stem}_model"
    if spec.accepts_missing:
        inputs = "Missing values in X_train are handled natively."
    else:
        inputs = "X_train must have no missing values (fill them first)."
    if spec.categorical == "reject":
        inputs += " Columns must be numeric or bool: encode text/category columns first."
    else:
        inputs += (f" Columns must be numeric, bool or category dtype (at most {MAX_CATEGORY_LEVELS} levels, "
                   "used natively); encode text columns first.")
    target = ("y_train holds class labels (numbers, text or bool); predictions use the same labels."
              if spec.kind == "classifier" else "y_train must be numeric.")
    # Built unindented: the generated text must survive inspect.cleandoc unchanged.
    return f"""{head}

{inputs} {target}
The score uses the task's metric (accuracy for classifiers / RMSE for
regressors when no task is set) and is stored on the model.

Parameters
----------
X_train
    Training features, without the target column.
y_train
    The target, same rows as X_train.
cv
    Number of cross-validation folds.

Returns
-------
model
    The fitted {spec.title} {spec.kind}, for evaluate_*, predict_target or save_model.

Examples
--------
{{"tool_name": "{tool_name}", "tool_args": {{"bindings": {{"X_train": "X_train", "y_train": "y_train"}},
 "func_kwargs": {{"cv": 5}}, "output": "{output}"}}}}
"""


def _register(spec: ModelSpec, tuning: bool) -> Callable:
    tool_name = f"{'tune' if tuning else 'fit'}_{spec.name}"
    run = _tune_with_cv if tuning else _fit_with_cv

    def tool(X_train: pd.DataFrame, y_train: Annotated[pd.Series, TARGET],
             cv: Annotated[int, Range(int, 2, MAX_FOLDS, why="folds")] = 5, ctx: ToolContext | None = None) -> Any:
        return run(spec, X_train, y_train, cv, ctx)

    tool.__name__ = tool.__qualname__ = tool_name
    tool.__doc__ = _docstring(spec, tool_name, tuning)
    tool.__module__ = __name__
    make_get_and_set_tool(tool, roles=_TUNING_ROLES if tuning else _ROLES, toolsets=PAPER)
    globals()[tool_name] = tool
    __all__.append(tool_name)
    return tool


# The paper's names: fit_<model>_<kind> (logistic regression keeps the paper's "regressor").
FIT_TOOLS = {f"fit_{name}": _register(spec, tuning=False) for name, spec in MODEL_SPECS.items()}
TUNE_TOOLS = {f"tune_{name}": _register(spec, tuning=True) for name, spec in MODEL_SPECS.items() if spec.grid}
