"""Feature-engineering tools: derived columns, encoders, normalizers, column selection.

Every tool returns a new frame and never mutates its input (pandas copy-on-write
makes ``df.copy(deep=False)`` plus column assignment cheap and safe), so sibling
branches of a search tree that share an input frame never see each other's edits.

Model-written expressions, conditions and lambdas only go through
:mod:`mltb_core.toolkit.expressions` (mltb's own expression language). The tracking column ``_is_train`` added by
``concatenate_train_test`` is never encoded or normalized.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
import pandas as pd

from mltb_core.toolkit.params import NUMBER, Column, NewName, OneOf, Range
from mltb_core.toolkit.registry import (PAPER, ToolInputError, ToolReturn, make_get_and_set_tool, make_get_tool,
                                        make_override_tool)
from mltb_core.toolkit.docparts import shared_doc
from mltb_core.toolkit.expressions import compile_lambda, documents_expressions, evaluate_condition, evaluate_expression
from mltb_core.toolkit.validation import (TRACKING_COLUMN, TRAIN_ROWS_ONLY, as_column_list, choose, dropped_test_rows,
                                          numeric_columns, require_choice, require_columns, require_frame, require_name,
                                          require_positive_int)

__all__ = [
    "MAX_ONE_HOT_LEVELS", "MAX_ONE_HOT_NEW_COLUMNS", "MAX_REGEX_LENGTH",
    "create_numeric_feature", "create_categorical_feature", "create_conditional_feature",
    "extract_string_pattern", "split_string_column", "create_group_aggregation", "get_group_aggregation",
    "create_rolling_feature", "create_lag_feature", "create_lead_feature", "extract_datetime_features",
    "create_time_delta", "apply_custom_function", "one_hot_encode", "label_encode", "normalize_features",
    "encode_all_categorical_columns", "normalize_all_numerical_columns", "drop_feature", "get_features",
    "rename_feature", "get_unique_values", "filter_dataframe",
]

# Memory guard for one-hot encoding: a 10k-row frame with thousands of dummies is
# slow to fit and usually a mistake (an id or free-text column).
MAX_ONE_HOT_LEVELS = 200
MAX_ONE_HOT_NEW_COLUMNS = 1000
MAX_REGEX_LENGTH = 200
# A quantified group that is itself quantified, e.g. (a+)+ or (.*)*: the classic
# catastrophic-backtracking shape.
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)\s*(?:[+*]|\{\d*,)")

_FEATURES = ("features",)
# The model's word -> the reduction name mltb hands pandas (a literal from this file, never the model's
# string: pandas resolves these names with getattr, so only table values may reach it; see validation.choose).
AGG_FUNCS = {name: name for name in ("mean", "median", "sum", "min", "max", "std", "var", "count", "nunique",
                                     "first", "last")}
ROLLING_FUNCS = {name: AGG_FUNCS[name] for name in ("mean", "median", "sum", "min", "max", "std", "var", "count")}
# The paper's part names -> how mltb computes each (a table, not getattr(stamps.dt, part)).
_DATETIME_EXTRACTORS: dict[str, Callable[[pd.Series], pd.Series]] = {
    "year": lambda s: s.dt.year, "month": lambda s: s.dt.month, "day": lambda s: s.dt.day,
    "dayofweek": lambda s: s.dt.day_of_week, "hour": lambda s: s.dt.hour, "minute": lambda s: s.dt.minute,
    "second": lambda s: s.dt.second, "dayofyear": lambda s: s.dt.day_of_year,
    "weekofyear": lambda s: s.dt.isocalendar().week.astype("Float64").astype(float), "quarter": lambda s: s.dt.quarter,
    "is_weekend": lambda s: (s.dt.day_of_week >= 5).astype(float).where(s.notna()),
    "is_month_start": lambda s: s.dt.is_month_start.astype(float).where(s.notna()),
    "is_month_end": lambda s: s.dt.is_month_end.astype(float).where(s.notna()),
}
DATETIME_PARTS = tuple(_DATETIME_EXTRACTORS)
DEFAULT_DATETIME_PARTS = ("year", "month", "day", "dayofweek", "hour")
TIME_UNITS = {"D": "D", "d": "D", "days": "D", "day": "D", "h": "h", "H": "h", "hours": "h", "hour": "h",
              "m": "min", "min": "min", "minutes": "min", "minute": "min", "s": "s", "S": "s",
              "seconds": "s", "second": "s", "W": "W", "w": "W", "weeks": "W", "week": "W"}
NORMALIZE_METHODS = ("standard", "minmax", "robust", "maxabs")


# ----------------------------------------------------------------------- helpers
def _with_columns(df: pd.DataFrame, new: dict[str, Any]) -> pd.DataFrame:
    """A new frame with ``new`` columns added or replaced; ``df`` is untouched (copy-on-write)."""
    if len(new) > 20:  # many columns: build the frame once instead of inserting one by one (fragmentation)
        columns = {c: new.get(c, df[c]) for c in df.columns}
        columns.update({k: v for k, v in new.items() if k not in columns})
        return pd.DataFrame(columns, index=df.index)
    out = df.copy(deep=False)
    for name, values in new.items():
        out[name] = values
    return out


def _as_series(values: Any, df: pd.DataFrame, what: str) -> pd.Series:
    """Align an expression result with ``df``'s rows (scalars broadcast)."""
    if isinstance(values, pd.DataFrame):
        raise ToolInputError(f"{what} produced a table, not one column")
    if isinstance(values, pd.Series):
        if len(values) != len(df):
            raise ToolInputError(f"{what} produced {len(values)} values but the frame has {len(df)} rows")
        return values if values.index.equals(df.index) else pd.Series(values.to_numpy(), index=df.index)
    if np.ndim(values) == 0:
        return pd.Series([values] * len(df), index=df.index)
    arr = np.asarray(values)
    if arr.ndim != 1 or len(arr) != len(df):
        raise ToolInputError(f"{what} produced shape {arr.shape}; expected {len(df)} values")
    return pd.Series(arr, index=df.index)


def _maybe_numeric(series: pd.Series) -> pd.Series:
    """Turn text parts such as '0', '12' into numbers when every non-missing value parses."""
    if pd.api.types.is_numeric_dtype(series) or series.notna().sum() == 0:
        return series
    converted = pd.to_numeric(series, errors="coerce")
    return converted if converted.notna().sum() == series.notna().sum() else series


def _is_categorical_like(series: pd.Series) -> bool:
    """Columns a model cannot take as-is: text, object and category dtypes (bool counts as numeric)."""
    dtype = series.dtype
    return (pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype)
            or isinstance(dtype, pd.CategoricalDtype))


def _categorical_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c != TRACKING_COLUMN and _is_categorical_like(df[c])]


def _to_datetime(df: pd.DataFrame, column: str) -> pd.Series:
    series = df[column]
    if pd.api.types.is_datetime64_any_dtype(series):
        return series
    parsed = pd.to_datetime(series, errors="coerce", format="mixed")
    if parsed.notna().sum() == 0 and series.notna().sum() > 0:
        sample = series.dropna().iloc[0]
        raise ToolInputError(f"column {column!r} could not be parsed as dates (e.g. {sample!r})")
    return parsed


# ------------------------------------------------------------ derived features
@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@documents_expressions
@shared_doc()
def create_numeric_feature(df: pd.DataFrame, name: Annotated[str, NewName()], expression: str) -> pd.DataFrame:
    """Create a numeric column from an expression over existing columns.

    The expression may use column names directly (``Age * 2``) or as ``df['Col']``.
    Non-numeric results are rejected.

    Parameters
    ----------
    $frame_to_extend
    $new_or_replaced_column
    expression
        Expression evaluated against the frame, e.g. ``"RoomService + FoodCourt + Spa"``.
        {expression_language}

    $returns_new_column

    Examples
    --------
    {"tool_name": "create_numeric_feature", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"name": "TotalSpend", "expression": "RoomService + FoodCourt + Spa"},
     "output": "combined"}}
    """
    df = require_frame(df)
    require_name(name)
    values = _as_series(evaluate_expression(expression, df), df, f"expression {expression!r}")
    if pd.api.types.is_bool_dtype(values):
        values = values.astype(np.int8)
    elif not pd.api.types.is_numeric_dtype(values):
        converted = pd.to_numeric(values, errors="coerce")
        if converted.notna().sum() < values.notna().sum():
            raise ToolInputError(f"expression {expression!r} is not numeric (dtype {values.dtype}); "
                                 "use create_categorical_feature or apply_custom_function for text")
        values = converted
    return _with_columns(df, {name: values})


def _lookup_mapping(mapping: dict, value: Any) -> Any:
    """Mapping keys arrive as JSON strings; match numbers and bools by their text too."""
    if value in mapping:
        return mapping[value]
    candidates = [str(value)]
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        candidates.append(str(int(value)))
    for key in candidates:
        if key in mapping:
            return mapping[key]
    return np.nan


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def create_categorical_feature(df: pd.DataFrame, name: Annotated[str, NewName()], source_column: Annotated[str, Column()], mapping: dict) -> pd.DataFrame:
    """Create a column by mapping each value of a source column through a dictionary.

    Keys are matched exactly or by their text (so ``{"1": "low"}`` matches the
    number 1). Values without a key become missing (NaN); the result note says
    how many rows that affected.

    Parameters
    ----------
    $frame_to_extend
    $new_or_replaced_column
    source_column
        Column whose values are looked up in ``mapping``.
    mapping
        Source value -> new value, e.g. ``{"Earth": 0, "Europa": 1, "Mars": 2}``.

    $returns_frame
        A copy of ``df`` with the mapped column.

    Examples
    --------
    {"tool_name": "create_categorical_feature", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"name": "PlanetCode", "source_column": "HomePlanet",
     "mapping": {"Earth": 0, "Europa": 1, "Mars": 2}}, "output": "combined"}}
    """
    df = require_frame(df)
    require_name(name)
    require_columns(df, [source_column], "source_column")
    if not isinstance(mapping, dict) or not mapping:
        raise ToolInputError(f"'mapping' must be a non-empty dictionary of source value -> new value, got {mapping!r}")
    source = df[source_column]
    lookup = {value: _lookup_mapping(mapping, value) for value in source.dropna().unique()}
    mapped = source.map(lookup)
    mapped = _maybe_numeric(mapped.infer_objects())
    unmapped = int((source.notna() & mapped.isna()).sum())
    note = (f"{unmapped} row(s) of {source_column!r} had no key in 'mapping' and became NaN."
            if unmapped else "")
    return ToolReturn(_with_columns(df, {name: mapped}), note)


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@documents_expressions
@shared_doc()
def create_conditional_feature(df: pd.DataFrame, name: Annotated[str, NewName()], condition: str, true_value: Any,
                               false_value: Any) -> pd.DataFrame:
    """Create a column holding ``true_value`` where a condition holds and ``false_value`` elsewhere.

    Rows where the condition is missing (NaN) count as False.

    Parameters
    ----------
    $frame_to_extend
    $new_or_replaced_column
    condition
        Boolean expression over the columns, e.g. ``"Age < 18 and CryoSleep == True"``.
        {expression_language}
    true_value
        Literal value for rows where the condition is True.
    false_value
        Literal value for the other rows.

    $returns_new_column

    Examples
    --------
    {"tool_name": "create_conditional_feature", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"name": "IsChild", "condition": "Age < 18", "true_value": 1, "false_value": 0},
     "output": "combined"}}
    """
    df = require_frame(df)
    require_name(name)
    mask = evaluate_condition(condition, df).to_numpy(dtype=bool)
    if true_value is None or false_value is None:
        # None means "missing": build as objects so the other value keeps its type, then infer.
        values = pd.Series(np.where(mask, true_value, false_value), index=df.index, dtype=object)
        values = _maybe_numeric(values.where(values.notna(), np.nan).infer_objects())
    else:
        values = pd.Series(np.where(mask, true_value, false_value), index=df.index).infer_objects()
    return _with_columns(df, {name: values})


def _compile_safe_regex(pattern: Any) -> re.Pattern:
    if not isinstance(pattern, str) or not pattern:
        raise ToolInputError(f"'pattern' must be a non-empty regular expression string, got {pattern!r}")
    if len(pattern) > MAX_REGEX_LENGTH:
        raise ToolInputError(f"'pattern' is {len(pattern)} characters; the limit is {MAX_REGEX_LENGTH}")
    if _NESTED_QUANTIFIER.search(pattern):
        raise ToolInputError(f"'pattern' {pattern!r} has a repeated group that itself repeats (like '(a+)+'), "
                             "which can backtrack catastrophically; simplify it")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ToolInputError(f"'pattern' {pattern!r} is not a valid regular expression: {exc}") from None


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def extract_string_pattern(df: pd.DataFrame, name: Annotated[str, NewName()], source_column: Annotated[str, Column()], pattern: str,
                           group: int | str = 0) -> pd.DataFrame:
    """Extract the first regex match (or one of its groups) from a text column into a new column.

    Rows without a match, or missing, become NaN. When every extracted value is a
    number the new column is numeric.

    Parameters
    ----------
    $frame_to_extend
    $new_column
    source_column
        Text column to search.
    pattern
        Python regular expression (at most 200 characters), e.g. ``"^([A-Z])/"``.
    group
        Which group to keep: 0 is the whole match, 1 the first parenthesised group, or a group name.

    $returns_frame
        A copy of ``df`` with the extracted column.

    Examples
    --------
    {"tool_name": "extract_string_pattern", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"name": "Title", "source_column": "Name", "pattern": "([A-Za-z]+)\\\\.", "group": 1},
     "output": "combined"}}
    """
    df = require_frame(df)
    require_name(name)
    require_columns(df, [source_column], "source_column")
    regex = _compile_safe_regex(pattern)
    if isinstance(group, int) and not isinstance(group, bool):
        if not 0 <= group <= regex.groups:
            raise ToolInputError(f"'group' {group} is out of range: the pattern has {regex.groups} group(s)")
    elif isinstance(group, str):
        if group not in regex.groupindex:
            raise ToolInputError(f"'group' {group!r} is not a named group of the pattern; "
                                 f"named groups: {list(regex.groupindex)}")
    else:
        raise ToolInputError(f"'group' must be an integer or a group name, got {group!r}")

    def extract(value: Any) -> Any:
        if not isinstance(value, str):
            return np.nan
        match = regex.search(value)
        return match.group(group) if match and match.group(group) is not None else np.nan

    source = df[source_column]
    lookup = {value: extract(value) for value in source.dropna().unique()}
    extracted = source.map(lookup).astype(object)
    extracted = _maybe_numeric(extracted.where(extracted.notna(), np.nan).infer_objects())
    return _with_columns(df, {name: extracted})


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def split_string_column(df: pd.DataFrame, name_prefix: Annotated[str, NewName()], source_column: Annotated[str, Column()], delimiter: str,
                        max_splits: int = -1, indices: list[int] | None = None) -> pd.DataFrame:
    """Split a text column on a delimiter into new columns ``<name_prefix>_0``, ``<name_prefix>_1``, ...

    Parts that are all numbers become numeric columns. Missing values stay missing.

    Parameters
    ----------
    $frame_to_extend
    name_prefix
        Prefix of the new columns; part i is stored as ``<name_prefix>_<i>``.
    source_column
        Text column to split.
    delimiter
        Literal separator (not a regex), e.g. ``"/"``.
    max_splits
        Maximum number of splits (-1: no limit).
    indices
        Which parts to keep (e.g. ``[0, 2]``); default keeps all parts.

    $returns_frame
        A copy of ``df`` with one column per kept part.

    Examples
    --------
    {"tool_name": "split_string_column", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"name_prefix": "Cabin", "source_column": "Cabin", "delimiter": "/",
     "indices": [0, 1, 2]}, "output": "combined"}}
    """
    df = require_frame(df)
    require_name(name_prefix, "name_prefix")
    require_columns(df, [source_column], "source_column")
    if not isinstance(delimiter, str) or not delimiter:
        raise ToolInputError(f"'delimiter' must be a non-empty string, got {delimiter!r}")
    if isinstance(max_splits, bool) or not isinstance(max_splits, int):
        raise ToolInputError(f"'max_splits' must be an integer (-1 for no limit), got {max_splits!r}")
    source = df[source_column]
    text = source.astype(object).where(source.notna(), None).map(lambda v: v if v is None else str(v))
    parts = text.str.split(delimiter, n=max_splits if max_splits >= 0 else -1, expand=True, regex=False)
    if parts.shape[1] == 0:  # every value missing
        parts = pd.DataFrame({0: pd.Series(np.nan, index=df.index)})
    keep = list(range(parts.shape[1])) if indices is None else indices
    if not isinstance(keep, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in keep):
        raise ToolInputError(f"'indices' must be a list of integers, got {indices!r}")
    bad = [i for i in keep if not -parts.shape[1] <= i < parts.shape[1]]
    if bad:
        raise ToolInputError(f"'indices' {bad} out of range: splitting {source_column!r} on {delimiter!r} "
                             f"gives at most {parts.shape[1]} part(s) (0..{parts.shape[1] - 1})")
    new = {}
    for i in keep:
        position = i % parts.shape[1]
        column = parts.iloc[:, position].astype(object)
        new[f"{name_prefix}_{position}"] = _maybe_numeric(column.where(column.notna(), np.nan).infer_objects())
    return _with_columns(df, new)


def _grouped(df: pd.DataFrame, group_column: str | list[str], agg_column: str,
             agg_func: str) -> tuple[pd.api.typing.SeriesGroupBy, str]:
    groups = as_column_list(group_column, "group_column")
    if not groups:
        raise ToolInputError("'group_column' must name at least one column")
    require_columns(df, groups + [agg_column])
    agg_func = choose(agg_func, AGG_FUNCS, "agg_func")
    if agg_func not in ("count", "nunique", "first", "last") and not pd.api.types.is_numeric_dtype(df[agg_column]):
        raise ToolInputError(f"agg_func {agg_func!r} needs a numeric 'agg_column'; {agg_column!r} has dtype "
                             f"{df[agg_column].dtype} (use 'count', 'nunique', 'first' or 'last')")
    return df.groupby(groups, dropna=False, observed=True)[agg_column], agg_func


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def create_group_aggregation(df: pd.DataFrame, name: Annotated[str, NewName()], group_column: Annotated[str | list[str], Column(many=True)],
                             agg_column: Annotated[str, Column()], agg_func: Annotated[str, OneOf(tuple(AGG_FUNCS))]) -> pd.DataFrame:
    """Add a column holding an aggregate of ``agg_column`` within each group (e.g. group size, group mean).

    Parameters
    ----------
    $frame_to_extend
    $new_column
    $group_aggregate

    $returns_frame
        A copy of ``df`` where every row gets its group's aggregate.

    Examples
    --------
    {"tool_name": "create_group_aggregation", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"name": "GroupSize", "group_column": "Group", "agg_column": "PassengerId",
     "agg_func": "count"}, "output": "combined"}}
    """
    df = require_frame(df)
    require_name(name)
    grouped, reduction = _grouped(df, group_column, agg_column, agg_func)
    return _with_columns(df, {name: grouped.transform(reduction)})


@make_get_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def get_group_aggregation(df: pd.DataFrame, group_column: Annotated[str | list[str], Column(many=True)], agg_column: Annotated[str, Column()],
                          agg_func: Annotated[str, OneOf(tuple(AGG_FUNCS))]) -> pd.DataFrame:
    """Show an aggregate of ``agg_column`` per group, without changing the frame.

    Parameters
    ----------
    $frame_to_inspect
    $group_aggregate

    $returns_frame
        One row per group: the group key(s) and the aggregate.

    Examples
    --------
    {"tool_name": "get_group_aggregation", "tool_args": {"bindings": {"df": "train"},
     "func_kwargs": {"group_column": "HomePlanet", "agg_column": "Transported", "agg_func": "mean"}}}
    """
    df = require_frame(df)
    grouped, reduction = _grouped(df, group_column, agg_column, agg_func)
    return grouped.agg(reduction).reset_index()


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def create_rolling_feature(df: pd.DataFrame, name: Annotated[str, NewName()], source_column: Annotated[str, Column()],
                           window: Annotated[int, Range(int, 1)],
                           agg_func: Annotated[str, OneOf(tuple(ROLLING_FUNCS))] = "mean") -> pd.DataFrame:
    """Add a rolling-window aggregate of a numeric column, in the frame's current row order.

    The first rows use the partial window available (no leading NaN from the window itself).

    Parameters
    ----------
    $frame_to_extend_in_order
    $new_column
    source_column
        Numeric column to aggregate.
    window
        Window length in rows.
    agg_func

    $returns_frame
        A copy of ``df`` with the rolling column.

    Examples
    --------
    {"tool_name": "create_rolling_feature", "tool_args": {"bindings": {"df": "sales"},
     "func_kwargs": {"name": "Sales_roll7", "source_column": "Sales", "window": 7, "agg_func": "mean"},
     "output": "sales"}}
    """
    df = require_frame(df)
    require_name(name)
    require_columns(df, [source_column], "source_column")
    window = require_positive_int(window, "window")
    reduction = choose(agg_func, ROLLING_FUNCS, "agg_func")
    source = df[source_column]
    if not pd.api.types.is_numeric_dtype(source):
        raise ToolInputError(f"column {source_column!r} has dtype {source.dtype}; rolling needs a numeric column")
    rolled = source.astype(float).rolling(window, min_periods=1).agg(reduction)
    return _with_columns(df, {name: rolled})


def _shifted(df: pd.DataFrame, name: str, source_column: str, periods: int) -> pd.DataFrame:
    df = require_frame(df)
    require_name(name)
    require_columns(df, [source_column], "source_column")
    return _with_columns(df, {name: df[source_column].shift(periods)})


_SHIFT_DOC = """Add a column holding the value of ``source_column`` from ``$periods`` rows $when ($blank rows NaN).

    Parameters
    ----------
    $frame_to_extend_in_order
    $new_column
    source_column
        Column to shift.
    $periods
        How many rows $direction.

    $returns_frame
        A copy of ``df`` with the $column column.

    Examples
    --------
    {"tool_name": "$tool_name", "tool_args": {"bindings": {"df": "sales"},
     "func_kwargs": {"name": "$example", "source_column": "Sales", "$periods": 1}, "output": "sales"}}
    """


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc(_SHIFT_DOC, periods="lag", when="earlier", blank="first", direction="back",
            column="lagged", example="Sales_lag1")
def create_lag_feature(df: pd.DataFrame, name: Annotated[str, NewName()], source_column: Annotated[str, Column()],
                       lag: Annotated[int, Range(int, 1)] = 1) -> pd.DataFrame:
    return _shifted(df, name, source_column, require_positive_int(lag, "lag"))


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc(_SHIFT_DOC, periods="lead", when="later", blank="last", direction="ahead",
            column="leading", example="Sales_next")
def create_lead_feature(df: pd.DataFrame, name: Annotated[str, NewName()], source_column: Annotated[str, Column()],
                        lead: Annotated[int, Range(int, 1)] = 1) -> pd.DataFrame:
    return _shifted(df, name, source_column, -require_positive_int(lead, "lead"))


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def extract_datetime_features(df: pd.DataFrame, datetime_column: Annotated[str, Column()],
                              features: Annotated[list[str] | None, OneOf(DATETIME_PARTS, many=True)] = None) -> pd.DataFrame:
    """Add calendar parts of a date/time column as numeric columns ``<datetime_column>_<part>``.

    Text columns are parsed as dates first (unparseable values become NaN). The
    original column is kept: drop it before modelling, models cannot take dates.

    Parameters
    ----------
    $frame_to_extend
    datetime_column
        Date/time column (datetime dtype or parseable text).
    features
        Parts to extract; default: year, month, day, dayofweek, hour.

    $returns_frame
        A copy of ``df`` with one column per part.

    Examples
    --------
    {"tool_name": "extract_datetime_features", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"datetime_column": "pickup_datetime", "features": ["year", "month", "hour", "dayofweek"]},
     "output": "combined"}}
    """
    df = require_frame(df)
    require_columns(df, [datetime_column], "datetime_column")
    parts = list(DEFAULT_DATETIME_PARTS) if features is None else as_column_list(features, "features")
    unknown = [p for p in parts if type(p) is not str or p not in DATETIME_PARTS]
    if unknown or not parts:
        raise ToolInputError(f"unknown datetime feature(s) {unknown}; choose from {list(DATETIME_PARTS)}")
    stamps = _to_datetime(df, datetime_column)
    if getattr(stamps.dt, "tz", None) is not None:
        stamps = stamps.dt.tz_localize(None)
    new = {}
    for part in parts:
        values = _DATETIME_EXTRACTORS[part](stamps)
        if not values.isna().any():
            values = values.astype(np.int64)
        new[f"{datetime_column}_{part}"] = values
    return _with_columns(df, new)


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def create_time_delta(df: pd.DataFrame, name: Annotated[str, NewName()], start_column: Annotated[str, Column()], end_column: Annotated[str, Column()],
                      unit: Annotated[str, OneOf(tuple(TIME_UNITS))] = "D") -> pd.DataFrame:
    """Add the time elapsed from ``start_column`` to ``end_column`` as a number of ``unit``.

    Parameters
    ----------
    $frame_to_extend
    $new_column
    start_column
        Earlier date/time column (datetime dtype or parseable text).
    end_column
        Later date/time column.
    unit

    $returns_frame
        A copy of ``df`` with a float column (negative when end is before start).

    Examples
    --------
    {"tool_name": "create_time_delta", "tool_args": {"bindings": {"df": "trips"},
     "func_kwargs": {"name": "trip_minutes", "start_column": "pickup_datetime",
     "end_column": "dropoff_datetime", "unit": "min"}, "output": "trips"}}
    """
    df = require_frame(df)
    require_name(name)
    require_columns(df, [start_column, end_column])
    unit = choose(unit, TIME_UNITS, "unit")
    delta = _to_datetime(df, end_column) - _to_datetime(df, start_column)
    return _with_columns(df, {name: delta / pd.Timedelta(1, unit)})


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@documents_expressions
@shared_doc()
def apply_custom_function(df: pd.DataFrame, name: Annotated[str, NewName()], source_columns: Annotated[str | list[str], Column(many=True)], func: str) -> pd.DataFrame:
    """Create a column by applying a lambda, given as a string, to one or several columns.

    The lambda is evaluated over the whole column at once: with one source column
    its parameter is that column (missing values stay missing); with several it is
    the rows, read as ``row['Age']``.

    Parameters
    ----------
    $frame_to_extend
    $new_column
    source_columns
        Column(s) passed to the function.
    func
        Lambda source, e.g. ``"lambda x: x.split('/')[0] if isinstance(x, str) else None"``.
        {expression_language}

    $returns_new_column

    Examples
    --------
    {"tool_name": "apply_custom_function", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"name": "Cabin_deck", "source_columns": "Cabin",
     "func": "lambda x: x.split('/')[0] if isinstance(x, str) else None"}, "output": "combined"}}
    """
    df = require_frame(df)
    require_name(name)
    columns = as_column_list(source_columns, "source_columns")
    if not columns:
        raise ToolInputError("'source_columns' must name at least one column")
    require_columns(df, columns, "source_columns")
    if not isinstance(func, str):
        raise ToolInputError(f"'func' must be a lambda written as a string, e.g. \"lambda x: x * 2\"; got {func!r}")
    fn = compile_lambda(func)
    result = fn.apply(df[columns[0]] if len(columns) == 1 else df[columns])
    values = _as_series(result, df, f"func {func!r}").astype(object)
    values = _maybe_numeric(values.where(values.notna(), np.nan).infer_objects())
    return _with_columns(df, {name: values})


# -------------------------------------------------------------------- encoders
def _encodable_columns(df: pd.DataFrame, columns: str | list[str] | None) -> list[str]:
    """Explicit columns (checked) or every text/category column; never the tracking column."""
    chosen = as_column_list(columns)
    if chosen is None:
        return _categorical_columns(df)
    require_columns(df, chosen)
    if TRACKING_COLUMN in chosen:
        raise ToolInputError(f"{TRACKING_COLUMN!r} is the train/test tracking column and must not be encoded")
    return chosen


def _check_one_hot_size(df: pd.DataFrame, columns: list[str], drop_first: bool) -> None:
    """Memory guard: refuse encodings that would add too many dummy columns."""
    levels = {c: int(df[c].nunique(dropna=True)) for c in columns}
    too_many = {c: n for c, n in levels.items() if n > MAX_ONE_HOT_LEVELS}
    if too_many:
        listed = ", ".join(f"{c!r} ({n} distinct values)" for c, n in too_many.items())
        raise ToolInputError(f"one-hot encoding refused: {listed} exceed{'s' if len(too_many) == 1 else ''} "
                             f"{MAX_ONE_HOT_LEVELS} levels. Use label_encode for such columns, or drop them "
                             "(ids and free text rarely help), then one-hot encode the rest.")
    added = sum(n - 1 if drop_first else n for n in levels.values())
    if added > MAX_ONE_HOT_NEW_COLUMNS:
        widest = ", ".join(f"{c!r} ({n})" for c, n in sorted(levels.items(), key=lambda kv: -kv[1])[:5])
        raise ToolInputError(f"one-hot encoding refused: it would add {added} columns (limit "
                             f"{MAX_ONE_HOT_NEW_COLUMNS}). Widest columns: {widest}. Label-encode or drop some.")


def _one_hot(df: pd.DataFrame, columns: list[str], drop_first: bool, prefix: Any) -> pd.DataFrame:
    if not columns:
        return df.copy(deep=False)
    _check_one_hot_size(df, columns, drop_first)
    if isinstance(prefix, str) and len(columns) > 1:
        raise ToolInputError("a single string 'prefix' only works with one column; pass a list of prefixes "
                             "(one per column), a {column: prefix} dict, or omit it")
    if isinstance(prefix, list) and len(prefix) != len(columns):
        raise ToolInputError(f"'prefix' has {len(prefix)} entries but {len(columns)} columns are encoded")
    if isinstance(prefix, dict):
        require_columns(df, list(prefix))
    if prefix is not None and not isinstance(prefix, (str, list, dict)):
        raise ToolInputError(f"'prefix' must be a string, a list or a dict, got {prefix!r}")
    return pd.get_dummies(df, columns=columns, drop_first=bool(drop_first), prefix=prefix, dtype=np.uint8)


def _label_encode(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    with_missing = {c: int(df[c].isna().sum()) for c in columns if df[c].isna().any()}
    if with_missing:
        listed = ", ".join(f"{c!r} ({n} missing)" for c, n in with_missing.items())
        raise ToolInputError(f"label_encode needs complete columns: {listed}. Fill them first "
                             "(e.g. fillna_with_mode or fillna_with_value with 'Unknown').")
    new = {}
    for column in columns:
        values = df[column]
        uniques = list(pd.unique(values.astype(object)))
        try:
            ordered = sorted(uniques)
        except TypeError:  # mixed types: order by text, deterministic like LabelEncoder on strings
            ordered = sorted(uniques, key=str)
        codes = pd.Categorical(values.astype(object), categories=ordered).codes
        new[column] = pd.Series(codes.astype(np.int64), index=df.index)
    return _with_columns(df, new)


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def one_hot_encode(df: pd.DataFrame, columns: Annotated[str | list[str] | None, Column(many=True, not_tracking="encoded")] = None,
                   drop_first: bool = True,
                   prefix: str | list[str] | dict | None = None) -> pd.DataFrame:
    """Replace categorical columns by 0/1 indicator columns ``<column>_<value>`` (uint8).

    Missing values get no indicator (all zeros). Refused when a column has more
    than 200 distinct values or the encoding would add more than 1,000 columns:
    label-encode or drop such columns. The ``_is_train`` tracking column is never
    encoded. With ``columns`` omitted every text/category column is encoded, which
    includes a text target: pass explicit columns when the target is text.

    Parameters
    ----------
    $frame_to_encode
    $columns_to_encode
    drop_first
        Drop the first level's indicator (avoids redundant columns).
    prefix
        Prefix(es) for the new column names; default: the source column names.

    $returns_frame
        A copy of ``df`` with the encoded columns replaced by indicators.

    Examples
    --------
    {"tool_name": "one_hot_encode", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"columns": ["HomePlanet", "Destination"], "drop_first": true}, "output": "combined"}}
    """
    df = require_frame(df)
    return _one_hot(df, _encodable_columns(df, columns), drop_first, prefix)


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def label_encode(df: pd.DataFrame,
                 columns: Annotated[str | list[str] | None, Column(many=True, not_tracking="encoded")] = None) -> pd.DataFrame:
    """Replace categorical columns by integer codes 0..k-1 in sorted order of their values.

    Columns must have no missing values (fill them first). With ``columns`` omitted
    every text/category column is encoded (including a text target: pass explicit
    columns then); the ``_is_train`` tracking column is never encoded.

    Parameters
    ----------
    $frame_to_encode
    $columns_to_encode

    $returns_frame
        A copy of ``df`` with integer-coded columns.

    Examples
    --------
    {"tool_name": "label_encode", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"columns": ["Cabin_deck", "Cabin_side"]}, "output": "combined"}}
    """
    df = require_frame(df)
    return _label_encode(df, _encodable_columns(df, columns))


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def encode_all_categorical_columns(df: pd.DataFrame, method: Annotated[str, OneOf(("one_hot", "label"))] = "one_hot",
                                   drop_first: bool = True) -> pd.DataFrame:
    """Encode every text/category column at once, by one-hot indicators or label codes.

    Skips the ``_is_train`` tracking column and numeric/bool columns. It does not
    know which column is the target: if the target is text, drop it or use
    one_hot_encode / label_encode with explicit columns instead. One-hot is refused
    for columns with more than 200 distinct values (use method 'label' or drop them).

    Parameters
    ----------
    $frame_to_encode
    method
        'one_hot' (uint8 indicators) or 'label' (integer codes, needs no missing values).
    drop_first
        For one-hot: drop the first level's indicator.

    $returns_frame
        A copy of ``df`` with every categorical column encoded.

    Examples
    --------
    {"tool_name": "encode_all_categorical_columns", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"method": "one_hot", "drop_first": true}, "output": "combined"}}
    """
    df = require_frame(df)
    require_choice(method, ("one_hot", "label"), "method")
    columns = _categorical_columns(df)
    if method == "label":
        return _label_encode(df, columns)
    return _one_hot(df, columns, drop_first, None)


# ------------------------------------------------------------------ normalizers
def _normalize(df: pd.DataFrame, columns: list[str], method: str) -> pd.DataFrame:
    require_choice(method, NORMALIZE_METHODS, "method")
    not_numeric = [c for c in columns if not pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c])]
    if not_numeric:
        raise ToolInputError(f"cannot normalize non-numeric column(s) {not_numeric}; encode them first")
    new = {}
    for column in columns:
        values = df[column].astype(float)
        if method == "standard":
            center, scale = values.mean(), values.std(ddof=0)
        elif method == "minmax":
            center, scale = values.min(), values.max() - values.min()
        elif method == "robust":
            center, scale = values.median(), values.quantile(0.75) - values.quantile(0.25)
        else:  # maxabs
            center, scale = 0.0, values.abs().max()
        # A constant (or empty) column would divide by zero: only shift it.
        if not np.isfinite(scale) or scale == 0:
            scale = 1.0
        new[column] = (values - (center if np.isfinite(center) else 0.0)) / scale
    return _with_columns(df, new)


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def normalize_features(df: pd.DataFrame,
                       columns: Annotated[str | list[str] | None,
                                          Column(many=True, dtype=NUMBER, hint="encode them first",
                                                 not_tracking="normalized")] = None,
                       method: Annotated[str, OneOf(NORMALIZE_METHODS)] = "standard") -> pd.DataFrame:
    """Rescale numeric columns (missing values stay missing).

    With ``columns`` omitted every numeric non-bool column is rescaled except the
    ``_is_train`` tracking column, which includes a numeric target: pass explicit
    columns (or drop the target first) to keep the target in its own units.

    Parameters
    ----------
    $frame_to_rescale
    columns
        Numeric columns to rescale; default: all numeric columns except ``_is_train``.
    method
        'standard' (zero mean, unit variance), 'minmax' (0..1), 'robust' (median/IQR) or 'maxabs' (-1..1).

    $returns_rescaled

    Examples
    --------
    {"tool_name": "normalize_features", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"columns": ["Age", "TotalSpend"], "method": "standard"}, "output": "combined"}}
    """
    df = require_frame(df)
    chosen = as_column_list(columns)
    if chosen is None:
        chosen = numeric_columns(df)
    else:
        require_columns(df, chosen)
        if TRACKING_COLUMN in chosen:
            raise ToolInputError(f"{TRACKING_COLUMN!r} is the train/test tracking column and must not be normalized")
    return _normalize(df, chosen, method)


@make_override_tool(toolsets=PAPER, roles=_FEATURES)
@shared_doc()
def normalize_all_numerical_columns(df: pd.DataFrame, method: Annotated[str, OneOf(NORMALIZE_METHODS)] = "standard") -> pd.DataFrame:
    """Rescale every numeric (non-bool) column except the ``_is_train`` tracking column.

    It does not know which column is the target: a numeric target would be
    rescaled too, so drop it first or use normalize_features with explicit columns.

    Parameters
    ----------
    $frame_to_rescale
    method

    $returns_rescaled

    Examples
    --------
    {"tool_name": "normalize_all_numerical_columns", "tool_args": {"bindings": {"df": "X_train"},
     "func_kwargs": {"method": "standard"}, "output": "X_train"}}
    """
    df = require_frame(df)
    return _normalize(df, numeric_columns(df), method)


# ------------------------------------------------------------ column selection
_COLUMN_ROLES = ("cleaning", "features", "modeling")


@make_override_tool(toolsets=PAPER, roles=_COLUMN_ROLES)
@shared_doc()
def drop_feature(df: pd.DataFrame, column: Annotated[str | list[str], Column(many=True)]) -> pd.DataFrame:
    """Drop one column or a list of columns.

    Parameters
    ----------
    df
        The frame to shrink.
    column
        Column name(s) to drop.

    $returns_frame
        A copy of ``df`` without those columns.

    Examples
    --------
    {"tool_name": "drop_feature", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"column": ["Name", "Cabin"]}, "output": "combined"}}
    """
    df = require_frame(df)
    columns = as_column_list(column, "column")
    if not columns:
        raise ToolInputError("'column' must name at least one column")
    require_columns(df, columns, "column")
    return df.drop(columns=columns)


@make_get_and_set_tool(toolsets=PAPER, roles=_COLUMN_ROLES)
@shared_doc()
def get_features(df: pd.DataFrame, columns: Annotated[str | list[str], Column(many=True)]) -> pd.DataFrame:
    """Store a new frame holding only the given columns, in the given order.

    Parameters
    ----------
    df
        The source frame.
    columns
        Column name(s) to keep.

    $returns_frame
        A frame with just those columns.

    Examples
    --------
    {"tool_name": "get_features", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"columns": ["Age", "TotalSpend", "CryoSleep"]}, "output": "selected"}}
    """
    df = require_frame(df)
    chosen = as_column_list(columns)
    if not chosen:
        raise ToolInputError("'columns' must name at least one column")
    require_columns(df, chosen)
    duplicates = sorted({c for c in chosen if chosen.count(c) > 1})
    if duplicates:
        raise ToolInputError(f"'columns' lists {duplicates} more than once")
    return df[chosen]


@make_override_tool(toolsets=PAPER, roles=_COLUMN_ROLES)
@shared_doc()
def rename_feature(df: pd.DataFrame, old_name: Annotated[str | list[str], Column(many=True)],
                   new_name: Annotated[str | list[str], NewName(many=True)]) -> pd.DataFrame:
    """Rename one column, or several (lists of equal length).

    Parameters
    ----------
    df
        The frame whose columns are renamed.
    old_name
        Current column name(s).
    new_name
        As many as in ``old_name``; must not clash with other columns.

    $returns_frame
        A copy of ``df`` with renamed columns.

    Examples
    --------
    {"tool_name": "rename_feature", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"old_name": "Cabin_0", "new_name": "Deck"}, "output": "combined"}}
    """
    df = require_frame(df)
    old = as_column_list(old_name, "old_name") or []
    new = as_column_list(new_name, "new_name") or []
    if not old or len(old) != len(new):
        raise ToolInputError(f"'old_name' and 'new_name' must have the same number of names "
                             f"(got {len(old)} and {len(new)})")
    require_columns(df, old, "old_name")
    for name in new:
        require_name(name, "new_name")
    kept = [c for c in df.columns if c not in old]
    clashes = sorted({n for n in new if n in kept or new.count(n) > 1})
    if clashes:
        raise ToolInputError(f"renaming would create duplicate column(s) {clashes}; drop them first or pick other names")
    return df.rename(columns=dict(zip(old, new)))


@make_get_tool(toolsets=PAPER, roles=("cleaning", "features"))
@shared_doc()
def get_unique_values(df: pd.DataFrame, column: Annotated[str, Column()], sort: bool = True, include_counts: bool = True) -> pd.DataFrame:
    """Show the distinct values of a column (missing shown as NaN), optionally with their counts.

    Parameters
    ----------
    $frame_to_inspect
    column
        Column to summarise.
    sort
        Sort by value (otherwise by first appearance).
    include_counts
        Add a ``count`` column with how often each value occurs.

    $returns_frame
        One row per distinct value.

    Examples
    --------
    {"tool_name": "get_unique_values", "tool_args": {"bindings": {"df": "train"},
     "func_kwargs": {"column": "HomePlanet", "sort": true, "include_counts": true}}}
    """
    df = require_frame(df)
    require_columns(df, [column], "column")
    counts = df[column].value_counts(dropna=False, sort=False)
    table = pd.DataFrame({column: counts.index.to_numpy(), "count": counts.to_numpy()})
    if sort:
        try:
            table = table.sort_values(column, na_position="last", kind="stable")
        except TypeError:  # mixed types: order by text
            table = table.sort_values(column, key=lambda s: s.astype(str), kind="stable")
    if not include_counts:
        table = table.drop(columns="count")
    table = table.reset_index(drop=True)
    return ToolReturn(table, f"{len(table)} distinct value(s) in {column!r} over {len(df)} rows.")


@make_get_and_set_tool(toolsets=PAPER, roles=("cleaning", "features"))
@documents_expressions
@shared_doc()
def filter_dataframe(df: pd.DataFrame, condition: str) -> pd.DataFrame:
    """Store the rows for which a boolean condition holds (rows where it is missing are dropped).

    Refuses a condition that keeps only part of a frame's test rows, or none of
    a frame of test rows only (every test row needs a prediction): filter train
    rows, or keep the test rows of a combined frame with ``or _is_train == 0``.

    Parameters
    ----------
    df
        The frame to filter.
    condition
        Boolean expression over the columns, e.g. ``"Age >= 18 and Spa > 0"``.
        {expression_language}

    $returns_frame
        The matching rows (original index kept).

    Examples
    --------
    {"tool_name": "filter_dataframe", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"condition": "_is_train == 1"}, "output": "train_part"}}
    """
    df = require_frame(df)
    mask = evaluate_condition(condition, df).to_numpy(dtype=bool)
    lost, test = dropped_test_rows(df, mask)
    if lost and (lost < test or test == len(df)):
        # on a frame of train and test rows, keeping none of the test rows selects train rows; keeping some, or
        # emptying a frame of test rows, leaves test rows that no valid submission can come from
        # (drop_rows_with_missing refuses the same)
        keep = (f", or add `or {TRACKING_COLUMN} == 0` to the condition to keep the test rows"
                if TRACKING_COLUMN in df.columns else "")
        raise ToolInputError(f"the condition would drop {lost} of the {test} test rows, and the submission needs a "
                             f"prediction for every test row: filter {TRAIN_ROWS_ONLY}{keep}")
    out = df[mask]
    return ToolReturn(out, f"Kept {len(out)} of {len(df)} rows.")
