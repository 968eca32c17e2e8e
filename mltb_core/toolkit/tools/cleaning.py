"""Data cleaning tools: the eight fillna tools, dropping rows, missing summary, casts.

Conditions and custom functions are model-written strings evaluated through
:mod:`mltb_core.toolkit.expressions` (mltb's own expression language). Every tool returns a new frame; inputs are never changed.
"""
from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import pandas as pd

from mltb_core.toolkit.params import INTEGER, NUMBER, Column, OneOf
from mltb_core.toolkit.registry import PAPER, ToolInputError, ToolReturn, make_get_tool, make_override_tool
from mltb_core.toolkit.docparts import shared_doc
from mltb_core.toolkit.expressions import compile_lambda, documents_expressions, evaluate_condition
from mltb_core.toolkit.tools.loading import most_frequent
from mltb_core.toolkit.validation import (MAX_LISTED_COLUMNS, TRACKING_COLUMN, TRAIN_ROWS_ONLY, as_column_list, choose,
                                          dropped_test_rows, is_numeric, listed_columns, require_columns,
                                          require_frame, require_numeric_columns, resolve_dtype, test_rows)

__all__ = [
    "fillna_with_value", "fillna_with_median", "fillna_with_mean", "fillna_with_mode", "fillna_with_condition",
    "fillna_with_multiple_conditions", "fillna_with_conditional_aggregation", "fillna_with_custom_function",
    "drop_rows_with_missing", "get_missing_summary", "cast_columns", "cast_numeric_columns",
    "cast_integer_columns_to_float", "cast_categorical_columns",
]

_CLEANING = ("cleaning",)
Scalar = str | int | float | bool | None


# ------------------------------------------------------------------ helpers
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))


def _fits_dtype(series: pd.Series, values: list) -> bool:
    """Whether ``values`` can be written into ``series`` without pandas refusing or warning."""
    dtype = series.dtype
    if pd.api.types.is_object_dtype(dtype):
        return True
    if pd.api.types.is_bool_dtype(dtype):
        return all(isinstance(v, (bool, np.bool_)) for v in values)
    if pd.api.types.is_numeric_dtype(dtype):
        return all(_is_number(v) for v in values)
    if pd.api.types.is_string_dtype(dtype):
        return all(isinstance(v, str) for v in values)
    return True


def fill_where(series: pd.Series, mask: pd.Series, fill: Any) -> pd.Series:
    """``series`` with ``fill`` (a scalar or an aligned Series) written where ``mask`` holds.

    Categories are extended and incompatible dtypes widened to object, so a
    model may fill a numeric column with "Unknown" without a pandas error.
    """
    values = list(pd.unique(fill[mask].dropna())) if isinstance(fill, pd.Series) else [fill]
    values = [v for v in values if v is not None and not (isinstance(v, float) and np.isnan(v))]
    if isinstance(series.dtype, pd.CategoricalDtype):
        new = [v for v in values if v not in series.cat.categories]
        if new:
            try:
                series = series.cat.add_categories(new)
            except (TypeError, ValueError):
                series = series.astype(object)
    elif not _fits_dtype(series, values):
        series = series.astype(object)
    return series.mask(mask, fill)


def _missing_fill(df: pd.DataFrame, column: str, fill: Any, only: pd.Series | None = None) -> pd.DataFrame:
    """Fill the missing cells of one column (restricted to ``only`` rows when given)."""
    mask = df[column].isna()
    if only is not None:
        mask &= only
    return df.assign(**{column: fill_where(df[column], mask, fill)})


def _fill_many(df: pd.DataFrame, fills: dict[str, Any]) -> pd.DataFrame:
    """Fill the missing cells of several columns at once: one new frame, not one copy per column."""
    new = {col: fill_where(df[col], df[col].isna(), value) for col, value in fills.items() if df[col].isna().any()}
    if not new:
        return df
    if len(new) <= 20:
        return df.assign(**new)
    return pd.DataFrame({col: new.get(col, df[col]) for col in df.columns}, index=df.index)


def _with_note(df_before: pd.DataFrame, df_after: pd.DataFrame, columns: list[str]) -> ToolReturn:
    before, after = df_before[columns].isna().sum(), df_after[columns].isna().sum()
    filled = {c: int(before[c] - after[c]) for c in columns}
    left = {c: int(after[c]) for c in columns if after[c]}
    changed = ", ".join(f"{c}: {n}" for c, n in filled.items() if n)
    note = f"Filled missing values ({changed})." if changed else "No missing values were filled."
    if left:
        note += " Still missing: " + ", ".join(f"{c}: {n}" for c, n in left.items()) + "."
    elif not changed:
        # a no-op "success" that names nothing else kept a real-LLM ReAct trial filling Age 39 times
        note += " " + _other_gaps(df_after, columns)
    return ToolReturn(df_after, note)


def _other_gaps(df: pd.DataFrame, columns: list[str]) -> str:
    """Where else ``df`` has missing values (at most MAX_LISTED_COLUMNS columns), leaving out a column missing
    exactly on the test rows: the target's placeholder on a combined frame, which no fill should touch."""
    test = test_rows(df)
    counts = df.isna().sum()
    gaps = [(c, int(n)) for c, n in counts.items() if n and c not in columns
            and not (test is not None and bool(test.any()) and np.array_equal(df[c].isna().to_numpy(), test))]
    if not gaps:
        return "No other column has missing values."
    shown = ", ".join(f"{c}: {n}" for c, n in gaps[:MAX_LISTED_COLUMNS])
    more = f" (and {len(gaps) - MAX_LISTED_COLUMNS} more columns)" if len(gaps) > MAX_LISTED_COLUMNS else ""
    return f"Columns with missing values: {shown}{more}."


_NOT_NUMERIC_HINT = "use fillna_with_mode or fillna_with_value for them"


_STATISTICS: dict[str, Any] = {"median": pd.Series.median, "mean": pd.Series.mean}


def _fill_with_statistic(df: pd.DataFrame, columns: Any, statistic: str, tool: str) -> ToolReturn:
    require_frame(df)
    names = require_numeric_columns(df, columns, tool, _NOT_NUMERIC_HINT)
    with_gaps = [col for col in names if df[col].isna().any()]
    reduce = _STATISTICS[statistic]
    fills = {col: value for col in with_gaps if pd.notna(value := reduce(df[col]))}
    return _with_note(df, _fill_many(df, fills), names)


def _conditions(conditions_and_values: Any) -> list[tuple[str, Any]]:
    if isinstance(conditions_and_values, dict):
        return list(conditions_and_values.items())
    if isinstance(conditions_and_values, (list, tuple)):
        pairs = []
        for item in conditions_and_values:
            if isinstance(item, dict) and {"condition", "value"} <= set(item):
                pairs.append((item["condition"], item["value"]))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                pairs.append((item[0], item[1]))
            else:
                raise ToolInputError(f"each entry of conditions_and_values must be [condition, value]; got {item!r}")
        return pairs
    raise ToolInputError("conditions_and_values must be a list of [condition, value] pairs or a "
                         f"{{condition: value}} object, got {type(conditions_and_values).__name__}")


# ------------------------------------------------------------------- fillna
@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@shared_doc()
def fillna_with_value(df: pd.DataFrame, columns: Annotated[str | list[str], Column(many=True)], value: Scalar) -> pd.DataFrame:
    """Fill missing values with a specific value.

    Parameters
    ----------
    $df_to_clean
    columns
        Column(s) whose missing values are filled.
    value
        The fill value (e.g. 0, "Unknown", false).

    $returns_frame
        A copy with the missing values filled; stored over `df` unless `output` is given.

    Example
    -------
    {"tool_name": "fillna_with_value", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"columns": ["RoomService", "Spa"], "value": 0}, "output": "combined"}}
    """
    require_frame(df)
    names = require_columns(df, columns)
    if value is None:
        raise ToolInputError("value must not be null: give the value that replaces missing entries")
    return _with_note(df, _fill_many(df, {col: value for col in names}), names)


_FILL_WITH_STATISTIC_DOC = """Fill missing values with $statistic of the column.

    Parameters
    ----------
    $df_to_clean
    $numeric_columns_to_fill

    $returns_frame
        A copy with missing numeric values replaced by each column's $statistic.

    Example
    -------
    {"tool_name": "$tool_name", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": $example_kwargs, "output": "combined"}}
    """


@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@shared_doc(_FILL_WITH_STATISTIC_DOC, statistic="median", example_kwargs='{"columns": ["Age"]}')
def fillna_with_median(df: pd.DataFrame, columns: Annotated[str | list[str] | None, Column(many=True, dtype=NUMBER, hint=_NOT_NUMERIC_HINT)] = None) -> pd.DataFrame:
    return _fill_with_statistic(df, columns, "median", "fillna_with_median")


@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@shared_doc(_FILL_WITH_STATISTIC_DOC, statistic="mean", example_kwargs="{}")
def fillna_with_mean(df: pd.DataFrame, columns: Annotated[str | list[str] | None, Column(many=True, dtype=NUMBER, hint=_NOT_NUMERIC_HINT)] = None) -> pd.DataFrame:
    return _fill_with_statistic(df, columns, "mean", "fillna_with_mean")


@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@shared_doc()
def fillna_with_mode(df: pd.DataFrame, columns: Annotated[str | list[str] | None, Column(many=True)] = None) -> pd.DataFrame:
    """Fill missing values with mode of the column.

    Works for any column type (text, boolean, numeric).

    Parameters
    ----------
    $df_to_clean
    columns
        Column(s) to fill; default: every column that has missing values.

    $returns_frame
        A copy with missing values replaced by each column's most frequent value.

    Example
    -------
    {"tool_name": "fillna_with_mode", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"columns": ["HomePlanet", "CryoSleep"]}, "output": "combined"}}
    """
    require_frame(df)
    names = require_columns(df, columns) if columns is not None else [c for c in df.columns if df[c].isna().any()]
    fills = {col: value for col in names if df[col].isna().any() and (value := most_frequent(df[col])) is not None}
    return _with_note(df, _fill_many(df, fills), names)


@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@documents_expressions
@shared_doc()
def fillna_with_condition(df: pd.DataFrame, target_column: Annotated[str, Column()], condition: str, fill_value: Scalar) -> pd.DataFrame:
    """Fill missing values in a column based on a condition.

    Only rows where `condition` holds and `target_column` is missing are filled.

    Parameters
    ----------
    $df_to_clean
    $column_to_fill
    condition
        A boolean condition over the columns, e.g. "CryoSleep == True" or
        "Age < 13 and HomePlanet == 'Earth'" (and/or/not work per row). {expression_language}
    fill_value
        Value written into the matching missing cells.

    $returns_filled

    Example
    -------
    {"tool_name": "fillna_with_condition", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"target_column": "RoomService", "condition": "CryoSleep == True", "fill_value": 0},
     "output": "combined"}}
    """
    require_frame(df)
    require_columns(df, [target_column], "target_column")
    mask = evaluate_condition(condition, df)
    return _with_note(df, _missing_fill(df, target_column, fill_value, only=mask), [target_column])


@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@documents_expressions
@shared_doc()
def fillna_with_multiple_conditions(df: pd.DataFrame, target_column: Annotated[str, Column()],
                                    conditions_and_values: list | dict) -> pd.DataFrame:
    """Fill missing values in a column based on multiple conditions.

    Conditions are tried in order; a missing cell takes the value of the first
    condition that holds for its row.

    Parameters
    ----------
    $df_to_clean
    $column_to_fill
    conditions_and_values
        [[condition, value], ...] pairs or a {condition: value} object; conditions
        are boolean conditions such as "Age < 13". {expression_language}

    $returns_filled

    Example
    -------
    {"tool_name": "fillna_with_multiple_conditions", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"target_column": "VIP", "conditions_and_values": [["Age < 18", false],
     ["HomePlanet == 'Europa'", true]]}, "output": "combined"}}
    """
    require_frame(df)
    require_columns(df, [target_column], "target_column")
    pairs = _conditions(conditions_and_values)
    if not pairs:
        raise ToolInputError("conditions_and_values is empty")
    out = df
    for condition, value in pairs:
        # Conditions see the original frame, so an earlier fill cannot change a later condition.
        out = _missing_fill(out, target_column, value, only=evaluate_condition(condition, df))
    return _with_note(df, out, [target_column])


# The model's word -> what mltb aggregates with (pandas resolves reduction names by getattr, so only these
# literals reach it; "mode" is mltb's own function).
_AGGREGATIONS: dict[str, Any] = {**{name: name for name in ("mean", "median", "min", "max", "sum", "first", "last")},
                                 "mode": most_frequent}


@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@shared_doc()
def fillna_with_conditional_aggregation(df: pd.DataFrame, target_column: Annotated[str, Column()], condition_column: Annotated[str, Column()],
                                        condition_values: Scalar | list | None = None,
                                        agg_func: Annotated[str, OneOf(tuple(_AGGREGATIONS))] = "mean") -> pd.DataFrame:
    """Fill missing values using conditional aggregation based on another column's values.

    For each value v of `condition_column` listed in `condition_values`, missing
    `target_column` cells in rows where condition_column == v are filled with
    agg_func of target_column over those rows (e.g. the mean Age per HomePlanet).

    Parameters
    ----------
    $df_to_clean
    $column_to_fill
    condition_column
        The column that defines the groups.
    condition_values
        Group values to fill; null means every group.
    agg_func

    $returns_frame
        A copy with the group statistics filled in.

    Example
    -------
    {"tool_name": "fillna_with_conditional_aggregation", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"target_column": "Age", "condition_column": "HomePlanet",
     "condition_values": ["Earth", "Mars"], "agg_func": "median"}, "output": "combined"}}
    """
    require_frame(df)
    require_columns(df, [target_column, condition_column])
    reduction = choose(agg_func, _AGGREGATIONS, "agg_func")
    if agg_func in ("mean", "median", "sum") and not is_numeric(df[target_column]):
        raise ToolInputError(f"agg_func {agg_func!r} needs a numeric target_column; {target_column} is "
                             f"{df[target_column].dtype} (use 'mode')")
    groups = df[condition_column]
    wanted = list(pd.unique(groups.dropna())) if condition_values is None else (
        list(condition_values) if isinstance(condition_values, (list, tuple)) else [condition_values])
    unknown = [v for v in wanted if not (groups == v).any()]
    if unknown:
        shown = ", ".join(map(repr, list(pd.unique(groups.dropna()))[:20]))
        raise ToolInputError(f"condition_values {unknown!r} do not occur in {condition_column}; values: {shown}")
    grouped = df[target_column].groupby(groups)
    per_group = grouped.agg(reduction)
    fill = groups.map(per_group.to_dict())
    return _with_note(df, _missing_fill(df, target_column, fill, only=groups.isin(wanted)), [target_column])


@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@documents_expressions
@shared_doc()
def fillna_with_custom_function(df: pd.DataFrame, target_column: Annotated[str, Column()], condition: str | None,
                                custom_func: str) -> pd.DataFrame:
    """Fill missing values using a custom function based on a condition.

    For rows where `condition` holds and `target_column` is missing, the value is
    custom_func(row), evaluated over all those rows at once (row['Age'] is their Age column).

    Parameters
    ----------
    $df_to_clean
    $column_to_fill
    condition
        Boolean condition selecting rows, e.g. "Age.notna()"; null for all rows.
    custom_func
        A lambda as a string taking the row, e.g.
        "lambda row: 0 if row['CryoSleep'] == True else row['Age'] / 10".
        {expression_language}

    $returns_filled

    Example
    -------
    {"tool_name": "fillna_with_custom_function", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"target_column": "Spa", "condition": "CryoSleep == True",
     "custom_func": "lambda row: 0"}, "output": "combined"}}
    """
    require_frame(df)
    require_columns(df, [target_column], "target_column")
    func = compile_lambda(custom_func)
    only = evaluate_condition(condition, df) if condition not in (None, "") else pd.Series(True, index=df.index)
    rows = df[df[target_column].isna() & only]
    if rows.empty:
        return _with_note(df, df, [target_column])
    fill = func.apply(rows)
    if not isinstance(fill, pd.Series):   # a constant
        fill = pd.Series([fill] * len(rows), index=rows.index, dtype=object).infer_objects()
    fill = fill.reindex(df.index)
    return _with_note(df, _missing_fill(df, target_column, fill, only=df.index.isin(rows.index)), [target_column])


# ----------------------------------------------------------------- drop rows
@make_override_tool(toolsets=PAPER, roles=_CLEANING)
@shared_doc()
def drop_rows_with_missing(df: pd.DataFrame, columns: Annotated[str | list[str] | None, Column(many=True)] = None,
                           threshold: int | float | None = None) -> pd.DataFrame:
    """Drop rows with missing values.

    Refuses to drop test rows of a combined train+test frame or of a test
    part (every test row needs a prediction): fill them instead.

    Parameters
    ----------
    $df_to_clean
    columns
        Only look at these columns (default: all).
    threshold
        Keep rows with at least this many non-missing values among the columns
        (an int), or at least this fraction of them (a float between 0 and 1).
        Default: drop a row if any of the columns is missing.

    $returns_frame
        A copy without the dropped rows (index kept).

    Example
    -------
    {"tool_name": "drop_rows_with_missing", "tool_args": {"bindings": {"df": "train_df"},
     "func_kwargs": {"columns": ["Transported"]}, "output": "train_df"}}
    """
    require_frame(df)
    names = require_columns(df, columns) if columns is not None else list(df.columns)
    present = df[names].notna().sum(axis=1)
    if threshold is None:
        keep = present == len(names)
    elif isinstance(threshold, float) and 0 < threshold <= 1:
        keep = present >= threshold * len(names)
    elif isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and threshold >= 0:
        if threshold > len(names):
            raise ToolInputError(f"threshold {threshold!r} asks for more non-missing values than the {len(names)} "
                                 "column(s) looked at, so every row would be dropped: give a count up to "
                                 f"{len(names)} or a fraction in (0, 1]")
        keep = present >= threshold
    else:
        raise ToolInputError(f"threshold must be a count >= 0 or a fraction in (0, 1], got {threshold!r}")
    if len(df) and not keep.any():
        # an empty frame stored over the input loses every row, test rows too, and nothing downstream can work
        why = "misses a value there" if threshold is None else f"keeps fewer non-missing values there than {threshold!r}"
        raise ToolInputError(f"all {len(df)} rows would be dropped (each {why}; columns looked at: "
                             f"{listed_columns(names)}): fill them instead (fillna_with_median / fillna_with_mode), "
                             "or drop the columns that are mostly missing (drop_feature)")
    # every test row needs a prediction, so a dropped one leaves no valid submission on this path (the stage
    # check then reported the combined frame as gone): refused, like dropping every row
    lost_test, _ = dropped_test_rows(df, keep.to_numpy())
    if lost_test:
        raise ToolInputError(f"{lost_test} test row(s) would be dropped, and the submission needs a prediction for "
                             "every test row: fill the missing values instead (fillna_with_median / "
                             f"fillna_with_mode), or drop rows of {TRAIN_ROWS_ONLY}")
    return ToolReturn(df[keep], f"Dropped {int((~keep).sum())} of {len(df)} rows.")


@make_get_tool(toolsets=PAPER, roles=_CLEANING)
@shared_doc()
def get_missing_summary(df: pd.DataFrame) -> str:
    """Get a summary of missing values in the DataFrame.

    $inspect_df_returns_text
        For each column with missing values: count, percentage and dtype.

    Example
    -------
    {"tool_name": "get_missing_summary", "tool_args": {"bindings": {"df": "combined"}, "func_kwargs": {}}}
    """
    require_frame(df)
    counts = df.isna().sum()
    counts = counts[counts > 0].sort_values(ascending=False)
    if counts.empty:
        return f"No missing values ({df.shape[0]} rows x {df.shape[1]} columns)."
    lines = [f"{len(counts)} of {df.shape[1]} columns have missing values ({df.shape[0]} rows):",
             "column | missing | percent | dtype"]
    for col, count in counts.items():
        lines.append(f"{col} | {int(count)} | {100 * count / max(len(df), 1):.1f}% | {df[col].dtype}")
    return "\n".join(lines)


# --------------------------------------------------------------------- casts
def _cast(series: pd.Series, type_name: str) -> pd.Series:
    """Cast one column, explaining failures (e.g. NaN into int)."""
    dtype = resolve_dtype(type_name, "type")   # a closed table: pandas_dtype('S1000000000') is a GB per value
    if dtype.startswith("datetime"):
        return pd.to_datetime(series, errors="coerce")
    if dtype.startswith(("int", "uint")) and series.isna().any():
        raise ToolInputError(f"column {series.name!r} has {int(series.isna().sum())} missing values and cannot be "
                             "cast to int; fill them first or use 'Int64' (nullable) or 'float'")
    try:
        return series.astype(dtype)
    except (ValueError, TypeError) as exc:
        raise ToolInputError(f"cannot cast column {series.name!r} ({series.dtype}) to {type_name!r}: {exc}") from None


def _cast_all(df: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    return df.assign(**{str(col): _cast(df[col], type_name) for col, type_name in mapping.items()})


@make_override_tool(toolsets=PAPER, roles=_CLEANING + ("features",))
@shared_doc()
def cast_columns(df: pd.DataFrame, column_type_mapping: dict) -> pd.DataFrame:
    """Cast columns to specified data types.

    Parameters
    ----------
    $df_to_change
    column_type_mapping
        {column: type}; types: "float", "int", "str", "bool", "category",
        "datetime" or a dtype name such as "float32" or "Int64" (nullable int).

    $returns_cast

    Example
    -------
    {"tool_name": "cast_columns", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": {"column_type_mapping": {"CryoSleep": "bool", "Age": "float"}}, "output": "combined"}}
    """
    require_frame(df)
    if not isinstance(column_type_mapping, dict) or not column_type_mapping:
        raise ToolInputError("column_type_mapping must be a non-empty {column: type} object")
    require_columns(df, list(column_type_mapping), "column_type_mapping")
    return _cast_all(df, column_type_mapping)


@make_override_tool(toolsets=PAPER, roles=_CLEANING + ("features",))
@shared_doc()
def cast_numeric_columns(df: pd.DataFrame, columns: Annotated[str | list[str] | None, Column(many=True, dtype=NUMBER, hint=_NOT_NUMERIC_HINT)] = None,
                         target_type: str = "float") -> pd.DataFrame:
    """Cast numeric columns to specified type.

    Parameters
    ----------
    $df_to_change
    columns
        Numeric column(s) to cast; default: every numeric column (not booleans).
    target_type
        "float", "int", "float32", "Int64"...

    $returns_cast

    Example
    -------
    {"tool_name": "cast_numeric_columns", "tool_args": {"bindings": {"df": "X_train"},
     "func_kwargs": {"target_type": "float32"}, "output": "X_train"}}
    """
    require_frame(df)
    names = require_numeric_columns(df, columns, "cast_numeric_columns", _NOT_NUMERIC_HINT)
    return _cast_all(df, {c: target_type for c in names})


# The paper's two tools that cast every column of a kind: one text, the kind's words filled in.
_CAST_KIND_DOC = """Cast $kind columns to $dtype type.

    Parameters
    ----------
    $df_to_change
    columns
        $which to cast; default: every $default column.

    $returns_frame
        A copy with those columns as $result

    Example
    -------
    {"tool_name": "$tool_name", "tool_args": {"bindings": {"df": "combined"},
     "func_kwargs": $example_kwargs, "output": "combined"}}
    """


@make_override_tool(toolsets=PAPER, roles=_CLEANING + ("features",))
@shared_doc(_CAST_KIND_DOC, kind="integer", dtype="float", which="Integer column(s)", default="integer",
            result="float64.", example_kwargs="{}")
def cast_integer_columns_to_float(df: pd.DataFrame,
                                  columns: Annotated[str | list[str] | None, Column(many=True, dtype=INTEGER)] = None) -> pd.DataFrame:
    require_frame(df)
    is_int = pd.api.types.is_integer_dtype
    if columns is None:
        names = [c for c in df.columns if is_int(df[c].dtype) and c != TRACKING_COLUMN]
    else:
        names = require_columns(df, columns)
        bad = [f"{c} ({df[c].dtype})" for c in names if not is_int(df[c].dtype)]
        if bad:
            raise ToolInputError(f"not integer column(s): {', '.join(bad)}")
    return _cast_all(df, {c: "float64" for c in names})


@make_override_tool(toolsets=PAPER, roles=_CLEANING + ("features",))
@shared_doc(_CAST_KIND_DOC, kind="categorical", dtype="category", which="Column(s)",
            default="text (object/string)", example_kwargs='{"columns": ["HomePlanet", "Destination"]}',
            result="pandas 'category' dtype (LightGBM and\nCatBoost use them natively; other models need encoding).")
def cast_categorical_columns(df: pd.DataFrame, columns: Annotated[str | list[str] | None, Column(many=True)] = None) -> pd.DataFrame:
    require_frame(df)
    if columns is None:
        names = [c for c in df.columns
                 if df[c].dtype == object or pd.api.types.is_string_dtype(df[c].dtype)]
    else:
        names = require_columns(df, as_column_list(columns))
    return _cast_all(df, {c: "category" for c in names})
