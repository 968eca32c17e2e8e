"""Input checks every tool shares (like scikit-learn's ``utils/validation.py``): is it a frame, do the
columns exist (with close-match suggestions), is a name usable, and the tracking column.

Messages go back to the model as tool errors, so each names the parameter, what was wrong and what
would be valid. One cutoff and one column count for suggestions, so every tool answers alike.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from mltb_core.bench.tasks import TEST_FILE, TRAIN_FILE
from mltb_core.plugins import MAX_SUGGESTIONS, SUGGESTION_CUTOFF, close_matches
from mltb_core.toolkit.registry import ToolInputError
from mltb_core.toolkit.scratchpad import MAX_LISTED_COLUMNS

__all__ = ["TRACKING_COLUMN", "ROWS_ATTR", "TRAIN_ROWS_ONLY", "mark_rows", "rows_of", "same_data",
           "distinct_shared_rows", "test_rows", "dropped_test_rows", "rows_held", "other_rows", "wrong_rows", "MAX_CATEGORY_LEVELS", "SUGGESTION_CUTOFF", "MAX_SUGGESTIONS", "MAX_LISTED_COLUMNS",
           "close_matches", "require_frame", "as_column_list", "require_columns", "listed_columns", "missing_columns_message", "require_name",
           "require_model", "choose", "require_choice", "require_positive_int", "as_features", "as_target",
           "is_numeric", "is_numeric_dtype", "numeric_columns", "infinite_columns", "require_numeric_columns", "require_csv_path",
           "DTYPE_NAMES", "resolve_dtype"]

# Added by concatenate_train_test: 1 on train rows, 0 on test rows; never a feature.
TRACKING_COLUMN = "_is_train"
# Which rows a frame holds, "train" or "test", where a tool knows it (the task's train.csv and test.csv as
# read_data reads them, the parts split_combined_into_train_test returns, the X and y of a train conversion). Kept in ``DataFrame.attrs``, which pandas carries through
# selections, drops and fills and drops when train and test rows are mixed, so a missing mark means "unknown"
# and never refuses anything.
ROWS_ATTR = "mltb_rows"
# Most levels a category column may have as a model input: the modeling tools refuse more, and the features
# stage counts a category column as encoded only within it.
MAX_CATEGORY_LEVELS = 50


def mark_rows(obj: Any, rows: str) -> Any:
    """``obj`` (a frame or Series) marked as holding ``rows`` ("train" or "test")."""
    obj.attrs[ROWS_ATTR] = rows
    return obj


def rows_of(obj: Any) -> str | None:
    """"train" or "test" when a tool marked the rows ``obj`` holds, else None."""
    rows = getattr(obj, "attrs", {}).get(ROWS_ATTR)
    return rows if rows in ("train", "test") else None


def same_data(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two frames hold the same data (one object bound twice, or a file read twice): combining such a
    pair only repeats it, the mistake of a model that never read test.csv (issue 33)."""
    return a is b or (a.shape == b.shape and a.equals(b))


def distinct_shared_rows(a: pd.DataFrame, b: pd.DataFrame) -> int:
    """The number of distinct rows when two frames of records hold the same set of rows, else 0. Rows compare by
    value and dtype, index and column order ignored: a column cast to another dtype counts as other rows, as a
    cast through float64 merged distinct integers past 2**53. Records: at least two columns, and more than half
    of the smaller frame's rows distinct, so label frames and low-cardinality columns, whose rows repeat by
    nature, never count. A train frame stacked on a grown copy of itself is such a pair, where ``same_data``
    sees two frames; stacking train on a subset of it (oversampling) is not, as the subset lacks rows (issue 33)."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    if (not len(small) or small.shape[1] < 2 or small.columns.has_duplicates or large.columns.has_duplicates
            or set(map(str, small.columns)) != set(map(str, large.columns))):
        return 0
    try:
        keys_small = pd.util.hash_pandas_object(small, index=False).to_numpy()
        distinct = pd.unique(keys_small)
        if 2 * len(distinct) <= len(small):   # mostly repeats: not records
            return 0
        keys_large = pd.util.hash_pandas_object(large[list(small.columns)], index=False).to_numpy()
    except (TypeError, ValueError, KeyError):   # unhashable cells (lists, dicts), or columns equal only as text
        return 0
    if len(pd.unique(keys_large)) != len(distinct) or not bool(pd.Series(keys_large).isin(distinct).all()):
        return 0
    return len(distinct)


def test_rows(obj: Any) -> Any:
    """Which rows of ``obj`` are test rows, as a boolean array: from a tool's mark, else from the tracking
    column's flags (0: test); None when unknown."""
    marked = rows_of(obj)
    if marked is not None:
        return np.full(len(obj), marked == "test")
    if isinstance(obj, pd.DataFrame) and TRACKING_COLUMN in obj.columns:
        return (obj[TRACKING_COLUMN] == 0).to_numpy()
    return None


# Where rows may be dropped without losing a test row (the advice of every tool that refuses to drop test rows)
TRAIN_ROWS_ONLY = f"train rows only (the {TRAIN_FILE} frame, or the train part after split_combined_into_train_test)"


def dropped_test_rows(df: pd.DataFrame, keep: Any) -> tuple[int, int]:
    """(test rows of ``df`` the boolean row mask ``keep`` drops, test rows of ``df``); (0, 0) when which rows
    are test rows is unknown."""
    test = test_rows(df)
    if test is None:
        return 0, 0
    return int((test & ~np.asarray(keep, dtype=bool)).sum()), int(test.sum())


def rows_held(obj: Any) -> dict[str, int]:
    """The known rows of ``obj`` by part ("train", "test") and their counts: from a tool's mark, else from
    the tracking column's flags; {} when unknown."""
    marked = rows_of(obj)
    if marked is not None:
        return {marked: len(obj)}
    if isinstance(obj, pd.DataFrame) and TRACKING_COLUMN in obj.columns:
        flags = obj[TRACKING_COLUMN]
        return {part: n for part, n in (("train", int((flags == 1).sum())), ("test", int((flags == 0).sum()))) if n}
    return {}


def other_rows(obj: Any, wanted: str, param: str) -> str | None:
    """"'param' holds N test rows (how that is known)" when ``obj`` holds rows of the part other than
    ``wanted`` ("train" or "test"); None when it may be a frame of ``wanted`` rows."""
    other = "test" if wanted == "train" else "train"
    count = rows_held(obj).get(other)
    if count is None:
        return None
    if TRACKING_COLUMN in getattr(obj, "columns", ()):
        where = f"'{TRACKING_COLUMN}' == {int(other == 'train')}"
    elif other == "train":
        where = f"{TRAIN_FILE}'s rows, e.g. a train part or the X of a train conversion"
    else:
        where = f"{TEST_FILE}'s rows, e.g. the test part of split_combined_into_train_test"
    part = "training" if other == "train" else "test"
    if count == 0:   # a filter that kept nothing: say it is empty, not that it "holds 0 rows" of the other part
        return f"'{param}' is an empty frame taken from {part} rows ({where})"
    return f"'{param}' holds {count} {part} rows ({where})"


def wrong_rows(obj: Any, wanted: str, param: str) -> str | None:
    """Why ``obj`` is not a frame of ``wanted`` rows to convert to features ("train": features and target,
    "test": test features), for the model; None when it may be."""
    held = other_rows(obj, wanted, param)
    if held is None:
        return None
    if wanted == "test":
        return (f"{held}: the test features come from the test part of split_combined_into_train_test (without "
                f"combining: the {TEST_FILE} frame, cleaned like the train frame), converted with is_train=false")
    if TRACKING_COLUMN in getattr(obj, "columns", ()):
        return (f"{held} whose target is only a placeholder: call split_combined_into_train_test first and convert "
                "the train part")
    return (f"{held}, which have no real target: for the test features convert them with is_train=false; the "
            "training target comes from the train rows")


def infinite_columns(X: pd.DataFrame) -> list[Any]:
    """The numeric (not bool, not category) columns of ``X`` holding an infinite value: no fit takes them."""
    numeric = [c for c in X.columns if pd.api.types.is_numeric_dtype(X[c]) and not pd.api.types.is_bool_dtype(X[c])
               and not isinstance(X[c].dtype, pd.CategoricalDtype)]
    return [c for c in numeric if np.isinf(X[c].to_numpy(dtype=float, na_value=np.nan)).any()]


def require_frame(obj: Any, param: str = "df") -> pd.DataFrame:
    """``obj`` when it is a DataFrame; else a tool error naming ``param`` and what it got."""
    if not isinstance(obj, pd.DataFrame):
        raise ToolInputError(f"'{param}' must be a DataFrame, got {type(obj).__name__}"
                             + (f" with shape {obj.shape}" if hasattr(obj, "shape") else ""))
    return obj


def as_column_list(columns: Any, param: str = "columns") -> list[Any] | None:
    """One column name or a list of names (models write both) as a list; None stays None."""
    if columns is None:
        return None
    if isinstance(columns, str):
        return [columns]
    if isinstance(columns, Mapping) or not isinstance(columns, Iterable):
        raise ToolInputError(f"'{param}' must be a column name or a list of column names, got {columns!r}")
    names = list(columns)
    # pandas turns a repeated name into a frame where a column was expected (the tool then fails with a
    # TypeError that names neither the list nor the name)
    repeated = [name for name, count in Counter(c for c in names if isinstance(c, Hashable)).items() if count > 1]
    if repeated:
        raise ToolInputError(f"'{param}' names {', '.join(map(repr, repeated))} more than once: list each column once")
    return names


def listed_columns(names: Iterable[Any]) -> str:
    """Column names for a message, at most ``MAX_LISTED_COLUMNS`` of them."""
    names = [str(c) for c in names]
    return ", ".join(names[:MAX_LISTED_COLUMNS]) + (" ..." if len(names) > MAX_LISTED_COLUMNS else "")


def missing_columns_message(df: pd.DataFrame, missing: Iterable[Any], param: str = "columns") -> str:
    existing = [str(c) for c in df.columns]
    hints = []
    for name in missing:
        close = close_matches(name, existing)
        hints.append(f"{name!r}" + (f" (did you mean {', '.join(map(repr, close))}?)" if close else ""))
    return f"unknown column(s) in '{param}': {'; '.join(hints)}. Available columns: {listed_columns(existing)}"


def require_columns(df: pd.DataFrame, columns: Any, param: str = "columns") -> list[Any]:
    """The requested columns as a list, or a tool error listing the unknown ones with close matches."""
    wanted = as_column_list(columns, param) or []
    present = set(df.columns)
    missing = [c for c in wanted if not isinstance(c, (str, int, float, tuple)) or c not in present]
    if missing:
        raise ToolInputError(missing_columns_message(df, missing, param))
    return wanted


def require_name(name: Any, param: str = "name") -> str:
    """A new column's name: a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise ToolInputError(f"'{param}' must be a non-empty column name, got {name!r}")
    return name


def require_model(model: Any, method: str = "predict", param: str = "model") -> Any:
    """``model`` when it has ``method`` (a fitted estimator); else a tool error saying what to bind."""
    if not hasattr(model, method):
        raise ToolInputError(f"'{param}' must be a fitted model with a {method}() method, got {type(model).__name__}"
                             " (bind the estimator, e.g. the output of a fit_* or tune_* tool)")
    return model


def choose(value: Any, table: Mapping[str, Any], param: str) -> Any:
    """What mltb chose for the model's word ``value`` in ``table``; never the model's own object.

    Tools must not hand a model string to pandas/numpy/sklearn where it would be looked up by name
    (``agg('sum')``, ``getattr(obj, name)``, ``astype('S1000000000')``): they pass ``table[value]``, a value
    written in mltb's source, and anything not in the table is a tool error listing the allowed words.
    """
    if type(value) is not str or value not in table:
        shown = value if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
        raise ToolInputError(f"'{param}' must be one of {list(table)}, got {str(repr(shown))[:100]}")
    return table[value]


def require_choice(value: Any, choices: Iterable[str], param: str) -> str:
    """``value`` when it is one of ``choices`` (words mltb compares, never hands to a library by name)."""
    return choose(value, {choice: choice for choice in choices}, param)


def require_positive_int(value: Any, param: str) -> int:
    """``value`` as an int when it is an integer >= 1 (a bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ToolInputError(f"'{param}' must be a positive integer, got {value!r}")
    return int(value)


def is_numeric(series: pd.Series) -> bool:
    """A number column (bool is not one here: a mean or a scale of True/False says little)."""
    return is_numeric_dtype(series.dtype)


def is_numeric_dtype(dtype: Any) -> bool:
    """:func:`is_numeric` of a column's dtype (read from ``df.dtypes`` without building the column)."""
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def numeric_columns(df: pd.DataFrame) -> list[Any]:
    """Every numeric column but the tracking column."""
    return [c for c in df.columns if c != TRACKING_COLUMN and is_numeric(df[c])]


def require_numeric_columns(df: pd.DataFrame, columns: Any, tool: str, hint: str = "") -> list[Any]:
    """The requested columns (every numeric one when None); a tool error names the ones that are not numeric."""
    if columns is None:
        return numeric_columns(df)
    names = require_columns(df, columns)
    bad = [c for c in names if not is_numeric(df[c])]
    if bad:
        raise ToolInputError(f"{tool} needs numeric columns; {', '.join(f'{c} ({df[c].dtype})' for c in bad)} "
                             "are not numeric" + (f" ({hint})" if hint else ""))
    return names


def require_csv_path(filepath: Any, param: str = "filepath") -> str:
    """A file name ending in .csv (what the grader and Kaggle read)."""
    if not str(filepath).lower().endswith(".csv"):
        raise ToolInputError(f"{param} {filepath!r} must end with .csv")
    return str(filepath)


def as_features(X: Any, param: str = "X_train") -> pd.DataFrame:
    """Features as a non-empty frame with unique column names (a Series is refused: it is the target's kind,
    and the call grammar, which offers what this takes, would otherwise offer y_train as X_train)."""
    X = require_frame(X, param)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ToolInputError(f"{param} is empty (shape {X.shape})")
    duplicated = sorted({str(c) for c in X.columns[X.columns.duplicated()]})
    if duplicated:
        raise ToolInputError(f"{param} has duplicate column names {duplicated}; rename or drop them")
    return X


def as_target(y: Any, n_rows: int, param: str = "y_train", rows_param: str = "X_train") -> pd.Series:
    """Target values as a Series with one value per row of ``rows_param`` and none missing (a one-column
    frame is its column; a list or array becomes a Series)."""
    if isinstance(y, pd.DataFrame):
        if y.shape[1] != 1:
            raise ToolInputError(f"{param} has {y.shape[1]} columns; pass only the target column")
        y = y.iloc[:, 0]
    if not isinstance(y, pd.Series):
        try:
            y = pd.Series(np.asarray(y))
        except Exception:  # noqa: BLE001 - a model-made object of any kind
            raise ToolInputError(f"{param} must be a Series of target values, got {type(y).__name__}") from None
        if y.ndim != 1:
            raise ToolInputError(f"{param} must be one-dimensional")
    if len(y) != n_rows:
        raise ToolInputError(f"{rows_param} has {n_rows} rows but {param} has {len(y)}; they must come from the "
                             "same rows (split them together, e.g. with convert_dataframe_to_features_target)")
    missing = int(y.isna().sum())
    if missing:
        raise ToolInputError(f"{param} contains {missing} missing value(s); drop or fill the target first "
                             "(rows of the test part have no target: use the train part only)")
    return y


# Every dtype a model may ask for by name (cast tools and the expression language's astype), and the
# dtype mltb then uses. An open pandas_dtype(name) would also accept e.g. 'S1000000000' (a gigabyte
# per value) or 'V', so the table is closed.
DTYPE_NAMES: dict[str, Any] = {
    **{name: "float64" for name in ("float", "float64", "double", "number", "numeric")},
    "float32": "float32",
    **{name: "int64" for name in ("int", "int64", "integer", "long")},
    "int32": "int32", "int16": "int16", "int8": "int8",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "Int64": "Int64", "Int32": "Int32", "Float64": "Float64",
    **{name: "bool" for name in ("bool", "bool_", "boolean")},
    **{name: "str" for name in ("str", "string", "text")},
    "object": "object",
    **{name: "category" for name in ("category", "categorical")},
    **{name: "datetime64[ns]" for name in ("datetime", "datetime64", "datetime64[ns]", "date")},
}


def resolve_dtype(name: Any, param: str = "dtype") -> str:
    """The dtype mltb uses for a model's type name (``'int'`` -> ``'int64'``), case-insensitive for the
    plain words; a tool error listing the names otherwise."""
    if type(name) is str and name not in DTYPE_NAMES and name.lower() in DTYPE_NAMES:
        name = name.lower()
    if type(name) is not str or name not in DTYPE_NAMES:
        shown = repr(name)[:60] if isinstance(name, str) else type(name).__name__
        raise ToolInputError(f"unknown type {shown} for '{param}'; use one of {', '.join(DTYPE_NAMES)}")
    return DTYPE_NAMES[name]
