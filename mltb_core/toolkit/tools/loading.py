"""Data loading tools: read CSVs, combine/split train and test, features/target, frame summaries.

Also home of the value helpers the cleaning tools share (:func:`most_frequent`, :func:`placeholder_value`);
input checks live in :mod:`mltb_core.toolkit.validation`.
"""
from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import pandas as pd

from mltb_core.bench.tasks import TEST_FILE, TRAIN_FILE
from mltb_core.toolkit.params import CONVERTIBLE, PART_FRAME, Column, NewName, OneOf, ReadFile, frame_of
from mltb_core.toolkit.registry import (
    PAPER,
    ToolContext,
    ToolInputError,
    ToolReturn,
    make_get_and_set_tool,
    make_get_tool,
    make_set_tool,
)
from mltb_core.toolkit.docparts import shared_doc
from mltb_core.toolkit.sandbox import resolve_read
from mltb_core.toolkit.validation import (MAX_LISTED_COLUMNS, TRACKING_COLUMN, as_column_list, choose,
                                          distinct_shared_rows, mark_rows, require_columns, require_frame, rows_of,
                                          same_data)

__all__ = [
    "read_data", "concatenate_train_test", "split_combined_into_train_test",
    "convert_dataframe_to_features_target", "convert_to_dataframe", "concatenate_dataframes",
    "join_dataframes", "get_dataframe_summary", "get_dataframe_dtypes_summary",
]

SUMMARY_ROLES = ("loading", "cleaning", "features")


# -------------------------------------------------------------- shared helpers
def most_frequent(series: pd.Series) -> Any:
    """Most frequent non-missing value (None when the column is empty)."""
    modes = series.mode(dropna=True)
    return modes.iloc[0] if len(modes) else None


def placeholder_value(series: pd.Series) -> Any:
    """A harmless stand-in value of the column's type: False/0 for bool/numeric, else the mode."""
    if pd.api.types.is_bool_dtype(series.dtype):
        return False
    if pd.api.types.is_numeric_dtype(series.dtype):
        return 0
    value = most_frequent(series)
    return "" if value is None else value


# ------------------------------------------------------------------- tools
_READERS = {".csv": {}, ".gz": {}, ".tsv": {"sep": "\t"}, ".txt": {"sep": None, "engine": "python"}}
# The files read_data opens (a .gz only as .csv.gz or .tsv.gz).
READ_SUFFIXES = tuple(s for s in _READERS if s != ".gz") + (".csv.gz", ".tsv.gz")
# Which rows the task's own files in its data directory hold.
_TASK_ROWS = {TRAIN_FILE: "train", TEST_FILE: "test"}


@make_set_tool(toolsets=PAPER, roles=("loading",))
@shared_doc()
def read_data(filepath: Annotated[str, ReadFile(READ_SUFFIXES)], ctx: ToolContext) -> pd.DataFrame:
    """Read CSV data into a pandas DataFrame.

    Reads a CSV (also .csv.gz, .tsv) from the task's data directory or your sandbox.
    Relative paths are looked up in the task's data directory first, then your sandbox.

    Parameters
    ----------
    filepath
        E.g. "train.csv" or a path the task gives.

    $returns_frame
        The file's contents, stored on the scratchpad under `output`.

    Example
    -------
    {"tool_name": "read_data", "tool_args": {"bindings": {}, "func_kwargs": {"filepath": "train.csv"},
     "output": "train_df"}}
    """
    path = resolve_read(ctx, filepath)
    suffix = path.suffix.lower()
    if suffix not in _READERS or (suffix == ".gz" and not path.name.lower().endswith((".csv.gz", ".tsv.gz"))):
        raise ToolInputError(f"read_data reads .csv, .csv.gz or .tsv files; {path.name!r} is not one")
    options = dict(_READERS[suffix])
    if path.name.lower().endswith(".tsv.gz"):
        options = {"sep": "\t"}
    frame = pd.read_csv(path, **options)
    # The task's own files say which rows they hold, so a later tool can refuse the wrong part (issue 33:
    # train.csv converted as test features); any other file's rows stay unknown.
    if ctx.data_dir is not None and path.parent == ctx.data_dir and path.name in _TASK_ROWS:
        mark_rows(frame, _TASK_ROWS[path.name])
    return frame


# concatenate_train_test's two frames: swapped, each row got the other part's flag (and the test rows a target)
_PAIR = (f"train_df takes the {TRAIN_FILE} frame and test_df the {TEST_FILE} frame (read each with read_data; "
         "cleaned or not), each before combining")


@make_get_and_set_tool(toolsets=PAPER, roles=("loading",))
@shared_doc()
def concatenate_train_test(train_df: Annotated[pd.DataFrame, frame_of("train", _PAIR, combined=False)],
                           test_df: Annotated[pd.DataFrame, frame_of("test", _PAIR, combined=False)]) -> pd.DataFrame:
    """Concatenate train and test data with tracking columns for proper splitting.

    Stacks the rows of train and test into one DataFrame so cleaning and feature
    engineering are applied identically to both. Adds the column `_is_train`
    (1 for train rows, 0 for test rows); keep it until you call
    split_combined_into_train_test. Columns only present in train (usually the
    target) get a placeholder in the test rows (False/0 for bool/numeric columns,
    otherwise the most frequent train value), so the concatenation itself adds
    no missing values.

    Parameters
    ----------
    train_df
        Training data (with the target column).
    test_df
        Test data (usually without the target column).

    $returns_frame
        The combined DataFrame with the `_is_train` column.

    Example
    -------
    {"tool_name": "concatenate_train_test", "tool_args": {"bindings": {"train_df": "train_df",
     "test_df": "test_df"}, "func_kwargs": {}, "output": "combined"}}
    """
    require_frame(train_df, "train_df")
    require_frame(test_df, "test_df")
    if same_data(train_df, test_df):
        # one frame given twice "succeeded" and left the trial stuck before test.csv was ever read (issue 33)
        raise ToolInputError(f"train_df and test_df are the same data: the test rows are missing. Read {TEST_FILE} "
                             f"with read_data first (filepath '{TEST_FILE}', e.g. output 'test_df') and bind that "
                             "frame to test_df")
    train_only = [c for c in train_df.columns if c not in test_df.columns]
    test_only = [c for c in test_df.columns if c not in train_df.columns]
    placeholders = {c: placeholder_value(train_df[c]) for c in train_only}
    # Added as whole blocks (not column by column): wide frames would fragment and warn.
    test_extra = pd.DataFrame({**{str(c): v for c, v in placeholders.items()}, TRACKING_COLUMN: 0}, index=test_df.index)
    train_extra = pd.DataFrame({TRACKING_COLUMN: 1}, index=train_df.index)
    combined = pd.concat(
        [pd.concat([train_df, train_extra], axis=1), pd.concat([test_df, test_extra], axis=1)],
        ignore_index=True, sort=False,
    )
    notes = [f"Combined {len(train_df)} train and {len(test_df)} test rows; '{TRACKING_COLUMN}' marks train rows."]
    if placeholders:
        shown = ", ".join(f"{c}={v!r}" for c, v in placeholders.items())
        notes.append(f"Columns only in train got a placeholder in test rows ({shown}); they are not real values.")
    if test_only:
        notes.append(f"Columns only in test are missing (NaN) in train rows: {', '.join(map(str, test_only))}.")
    return ToolReturn(combined, " ".join(notes))


@make_get_and_set_tool(toolsets=PAPER, roles=("loading",), output_parts=("train", "test"))
def split_combined_into_train_test(combined: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split combined data back into train and test using tracking columns.

    Uses the `_is_train` column added by concatenate_train_test and drops it.
    The test part still holds the target placeholder; convert_dataframe_to_features_target
    with is_train=False drops it.

    Parameters
    ----------
    combined
        Combined DataFrame with the `_is_train` tracking column.

    Returns
    -------
    tuple
        (train_df, test_df). Give `output` as a list of two names, or one name `n`
        to get `n_train` and `n_test`.

    Example
    -------
    {"tool_name": "split_combined_into_train_test", "tool_args": {"bindings": {"combined": "combined"},
     "func_kwargs": {}, "output": ["train_df", "test_df"]}}
    """
    require_frame(combined, "combined")
    if TRACKING_COLUMN not in combined.columns:
        raise ToolInputError(
            f"combined has no '{TRACKING_COLUMN}' column: it is added by concatenate_train_test and must not be "
            "dropped, renamed, encoded or normalized before splitting. Re-run from the combined frame.")
    flags = combined[TRACKING_COLUMN]
    odd = sorted(set(pd.unique(flags.dropna())) - {0, 1})   # True == 1, False == 0
    if odd or flags.isna().any():
        raise ToolInputError(f"'{TRACKING_COLUMN}' must hold only 1 (train) and 0 (test); found {odd[:5] or 'NaN'}"
                             " - was it normalized or encoded?")
    is_train = flags.astype(bool).to_numpy()
    rest = combined.drop(columns=[TRACKING_COLUMN])
    # marked so that converting the wrong part is an error instead of features built from the wrong rows
    return (mark_rows(rest[is_train].reset_index(drop=True), "train"),
            mark_rows(rest[~is_train].reset_index(drop=True), "test"))


@make_get_and_set_tool(toolsets=PAPER, roles=("loading", "modeling"), output_parts=("X", "y"),
                       parts_unless=("is_train", False))
def convert_dataframe_to_features_target(df: Annotated[pd.DataFrame, PART_FRAME],
                                         target_column: Annotated[str, Column(unless=("is_train", False))],
                                         is_train: bool = True, ctx: ToolContext | None = None,
                                         ) -> pd.DataFrame | tuple[pd.DataFrame, pd.Series] | ToolReturn:
    """Convert DataFrame to features and target format.

    Parameters
    ----------
    df
        Input DataFrame, already split (the parts of split_combined_into_train_test).
    target_column
        The target column.
    is_train
        Whether the DataFrame is training data. True returns (X, y); False returns
        only X, dropping the target column if it is still there.

    Returns
    -------
    tuple or pd.DataFrame
        (X, y) when is_train (give `output` as two names, or one name `n` for `n_X`, `n_y`);
        X alone otherwise. The `_is_train` column is dropped if present.

    Example
    -------
    {"tool_name": "convert_dataframe_to_features_target", "tool_args": {"bindings": {"df": "train_df"},
     "func_kwargs": {"target_column": "Transported", "is_train": true}, "output": ["X_train", "y_train"]}}
    """
    # the rows df holds (train part, or test part when is_train is false) are checked from PART_FRAME
    require_frame(df)
    features = df.drop(columns=[TRACKING_COLUMN], errors="ignore")
    if not is_train:
        if target_column in features.columns:
            return features.drop(columns=[target_column])
        return ToolReturn(features, f"df has no column {target_column!r}: returned without change.")
    require_columns(df, [target_column], "target_column")
    y = mark_rows(features[target_column], "train")
    X = mark_rows(features.drop(columns=[target_column]), "train")
    notes = []
    if y.isna().any():
        notes.append(f"Warning: the target has {int(y.isna().sum())} missing values; models cannot be fitted on "
                     "them (drop those rows first).")
    task_target = getattr(getattr(ctx, "task", None), "target", None)
    if task_target is not None and target_column != task_target:
        # a real-LLM ReAct trial peeled feature after feature off as "targets" (MedInc, HouseAge, Latitude, ...),
        # each a success: not refused (predicting a feature is an ML step), but said
        notes.append(f"Note: {target_column!r} is not the task's target ({task_target!r}); a model fitted on this "
                     f"y predicts {target_column!r}.")
    return ToolReturn((X, y), " ".join(notes)) if notes else (X, y)


@make_get_and_set_tool(toolsets=PAPER, roles=("loading", "evaluation"), objects=("data",))
@shared_doc()
def convert_to_dataframe(data: Annotated[Any, CONVERTIBLE],
                         columns: Annotated[list[str] | None, NewName(many=True)] = None) -> pd.DataFrame:
    """Convert various data types to pandas DataFrame.

    Accepts a Series, numpy array, list, dict or DataFrame (e.g. predictions) and
    returns a DataFrame.

    Parameters
    ----------
    data
        The object to convert.
    columns
        Column names for the result (default: keep existing names, or 0, 1, ...).

    $returns_frame
        The data as a DataFrame.

    Example
    -------
    {"tool_name": "convert_to_dataframe", "tool_args": {"bindings": {"data": "predictions"},
     "func_kwargs": {"columns": ["Transported"]}, "output": "pred_df"}}
    """
    if isinstance(data, pd.DataFrame):
        frame = data
    elif isinstance(data, pd.Series):
        frame = data.to_frame()
    elif isinstance(data, (np.ndarray, list, tuple, dict, pd.Index)):
        try:
            frame = pd.DataFrame(data)
        except ValueError as exc:
            raise ToolInputError(f"cannot build a DataFrame from this {type(data).__name__}: {exc}") from None
    else:
        raise ToolInputError(f"cannot convert a {type(data).__name__} to a DataFrame; "
                             "give a Series, array, list, dict or DataFrame")
    if columns is not None:
        names = as_column_list(columns)
        if len(names) != frame.shape[1]:
            raise ToolInputError(f"columns lists {len(names)} name(s) but the data has {frame.shape[1]} column(s)")
        frame = frame.set_axis(names, axis=1)
    return frame


@make_get_and_set_tool(toolsets=PAPER, roles=("loading", "features"))
@shared_doc()
def concatenate_dataframes(df1: Annotated[pd.DataFrame, CONVERTIBLE], df2: Annotated[pd.DataFrame, CONVERTIBLE],
                           axis: Annotated[int, OneOf((0, 1))] = 0) -> pd.DataFrame:
    """Concatenate two DataFrames.

    axis=0 stacks rows (index renumbered); axis=1 puts columns side by side,
    matching rows by position (both must have the same number of rows).

    Parameters
    ----------
    df1
        First DataFrame (a Series or array is converted to one).
    df2
        Second DataFrame (converted likewise).
    axis
        0 to stack rows, 1 to add columns.

    $returns_frame
        The concatenated DataFrame.

    Example
    -------
    {"tool_name": "concatenate_dataframes", "tool_args": {"bindings": {"df1": "X_train", "df2": "extra"},
     "func_kwargs": {"axis": 1}, "output": "X_train_full"}}
    """
    if axis not in (0, 1):
        raise ToolInputError(f"axis must be 0 (rows) or 1 (columns), got {axis!r}")
    frames = [df1 if isinstance(df1, pd.DataFrame) else convert_to_dataframe(df1),
              df2 if isinstance(df2, pd.DataFrame) else convert_to_dataframe(df2)]
    part = rows_of(frames[0])
    # where a model meant to add the test rows, stacking train rows on themselves "succeeded" (issue 33)
    advice = "" if part == "test" else (
        f" To add the test rows, read {TEST_FILE} with read_data (filepath '{TEST_FILE}') and combine the two "
        "frames with concatenate_train_test.")
    if frames[0].size and same_data(*frames):
        raise ToolInputError(f"df1 and df2 are the same data: concatenating it with itself only repeats its "
                             f"{'rows' if axis == 0 else 'columns'}.{advice}")
    if axis == 0:
        # stacked without the tracking column, the two parts can never be told apart again (a real-LLM ReAct
        # trial on playground stacked train and test this way, then passed the result to concatenate_train_test)
        _refuse_train_test_mix(("df1", frames[0]), ("df2", frames[1]), ": combine them with")
    if axis == 0 and (distinct := distinct_shared_rows(*frames)):
        # a train frame stacked on a grown copy of itself (seen in a real-LLM ReAct trial): not the same data,
        # but the same rows. Stacking a subset on its frame (oversampling) repeats only some rows: allowed
        raise ToolInputError(f"df1 ({len(frames[0])} rows) and df2 ({len(frames[1])} rows) hold the same "
                             f"{distinct} distinct rows: stacking them only repeats those rows.{advice}")
    if axis == 0:
        try:
            return pd.concat(frames, axis=0, ignore_index=True, sort=False)
        except pd.errors.InvalidIndexError:   # columns repeated in one frame cannot be matched to the other's
            repeated = sorted({str(c) for f in frames for c in f.columns[f.columns.duplicated()]})
            raise ToolInputError(f"to stack rows, column names must be unique; repeated: {repeated[:10]}: rename or "
                                 "drop them first") from None
    if len(frames[0]) != len(frames[1]):
        raise ToolInputError(f"axis=1 needs the same number of rows; df1 has {len(frames[0])}, df2 {len(frames[1])}")
    other = rows_of(frames[1])
    if part is not None and other is not None and part != other:
        raise ToolInputError(f"df1 holds {part} rows and df2 {other} rows: axis=1 pairs rows by position, so each "
                             f"{part} row would get the columns of a different {other} row")
    shared = sorted(set(map(str, frames[0].columns)) & set(map(str, frames[1].columns)))
    if shared:
        raise ToolInputError(f"both DataFrames have column(s) {shared[:10]}; drop or rename them first")
    out = pd.concat([f.reset_index(drop=True) for f in frames], axis=1).set_axis(frames[0].index, axis=0)
    # side by side, the result holds the rows of either input (the call pairs them): keep their mark, which
    # pandas drops when only one input has it, so the row checks still see the part
    rows = part or other
    return mark_rows(out, rows) if rows is not None else out


def _refuse_train_test_mix(first: tuple[str, Any], second: tuple[str, Any], lead: str) -> None:
    """Refuse combining a frame of train rows with one of test rows (``(parameter, frame)`` pairs) other than by
    concatenate_train_test, which marks each row's part so split_combined_into_train_test can split them again."""
    rows = {rows_of(first[1]): first[0], rows_of(second[1]): second[0]}
    if set(rows) == {"train", "test"}:
        train_df, test_df = rows["train"], rows["test"]
        raise ToolInputError(f"{train_df} holds train rows and {test_df} test rows{lead} "
                             f"concatenate_train_test(train_df=<{train_df}>, test_df=<{test_df}>), which marks each "
                             f"row's part in '{TRACKING_COLUMN}' so that split_combined_into_train_test can split "
                             "them again")


_JOIN_KINDS = {kind: kind for kind in ("inner", "left", "right", "outer", "cross")}   # the model's word -> mltb's


@make_get_and_set_tool(toolsets=PAPER, roles=("loading", "features"))
@shared_doc()
def join_dataframes(left_df: pd.DataFrame, right_df: pd.DataFrame,
                    left_on: Annotated[str | list[str], Column(of="left_df", many=True, unless=("how", "cross"))],
                    right_on: Annotated[str | list[str] | None,
                                        Column(of="right_df", many=True, unless=("how", "cross"))] = None,
                    how: Annotated[str, OneOf(tuple(_JOIN_KINDS))] = "inner",
                    suffixes: list[str] = ("_x", "_y")) -> pd.DataFrame:
    """Join two DataFrames using pandas merge functionality.

    Parameters
    ----------
    left_df
        Left DataFrame.
    right_df
        Right DataFrame.
    left_on
        Key column(s) in left_df.
    right_on
        Key column(s) in right_df (default: same as left_on).
    how
    suffixes
        Two suffixes for overlapping column names.

    $returns_frame
        The merged DataFrame.

    Example
    -------
    {"tool_name": "join_dataframes", "tool_args": {"bindings": {"left_df": "train_df", "right_df": "stores"},
     "func_kwargs": {"left_on": "Store", "how": "left"}, "output": "train_df"}}
    """
    require_frame(left_df, "left_df")
    require_frame(right_df, "right_df")
    # train and test rows are different rows: a join pairs them by a shared value, or (outer) stacks them with
    # no column to tell them apart, the mix concatenate_dataframes refuses
    _refuse_train_test_mix(("left_df", left_df), ("right_df", right_df), ", which a join cannot combine: use")
    how = choose(how, _JOIN_KINDS, "how")
    suffixes = tuple(suffixes)
    if len(suffixes) != 2:
        raise ToolInputError(f"suffixes must have exactly two entries, got {list(suffixes)}")
    if how == "cross":
        return left_df.merge(right_df, how="cross", suffixes=suffixes)
    left_keys = require_columns(left_df, left_on, "left_on")
    right_keys = require_columns(right_df, left_on if right_on is None else right_on, "right_on")
    if len(left_keys) != len(right_keys):
        raise ToolInputError(f"left_on has {len(left_keys)} key(s) but right_on has {len(right_keys)}")
    joined = left_df.merge(right_df, how=how, left_on=left_keys, right_on=right_keys, suffixes=suffixes)
    # a left join on unique right keys keeps the left rows, one each, in order: so it keeps their mark too
    # (pandas drops it; a lookup join must not let train rows pass as test features, issue 33)
    rows = rows_of(left_df)
    if rows is not None and how == "left" and not right_df.duplicated(subset=right_keys).any():
        mark_rows(joined, rows)
    return joined


@make_get_tool(toolsets=PAPER, roles=SUMMARY_ROLES)
def get_dataframe_summary(df: pd.DataFrame) -> str:
    """Get a brief textual summary of a DataFrame to guide planning.

    Shows the shape, each column's dtype, missing count and (for text/categorical
    columns) number of distinct values, then a few sample rows.

    Parameters
    ----------
    df
        The DataFrame to summarize.

    Returns
    -------
    str
        The summary text.

    Example
    -------
    {"tool_name": "get_dataframe_summary", "tool_args": {"bindings": {"df": "train_df"}, "func_kwargs": {}}}
    """
    require_frame(df)
    lines = [f"Shape: {df.shape[0]} rows x {df.shape[1]} columns", "column | dtype | missing | distinct (text)"]
    for col in df.columns[:60]:
        series = df[col]
        missing = int(series.isna().sum())
        textual = not pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)
        distinct = str(series.nunique(dropna=True)) if textual else "-"
        lines.append(f"{col} | {series.dtype} | {missing} | {distinct}")
    if df.shape[1] > 60:
        lines.append(f"... and {df.shape[1] - 60} more columns")
    lines.append("Sample rows:")
    lines.append(df.head(3).to_string(max_cols=20, max_colwidth=30))
    return "\n".join(lines)


@make_get_tool(toolsets=PAPER, roles=SUMMARY_ROLES)
@shared_doc()
def get_dataframe_dtypes_summary(df: pd.DataFrame) -> str:
    """Get comprehensive summary of the dtypes in the entire DataFrame.

    Groups the columns by dtype, so you can see at a glance which columns are
    numeric, text, boolean or categorical (e.g. which still need encoding).

    $inspect_df_returns_text
        One line per dtype: count and column names.

    Example
    -------
    {"tool_name": "get_dataframe_dtypes_summary", "tool_args": {"bindings": {"df": "combined"}, "func_kwargs": {}}}
    """
    require_frame(df)
    groups: dict[str, list[str]] = {}
    for col in df.columns:
        groups.setdefault(str(df[col].dtype), []).append(str(col))
    lines = [f"{df.shape[1]} columns, {df.shape[0]} rows"]
    for dtype, cols in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(cols[:MAX_LISTED_COLUMNS]) + (" ..." if len(cols) > MAX_LISTED_COLUMNS else "")
        lines.append(f"{dtype} ({len(cols)}): {shown}")
    non_numeric = [str(c) for c in df.columns
                   if not pd.api.types.is_numeric_dtype(df[c].dtype) and not pd.api.types.is_bool_dtype(df[c].dtype)]
    if non_numeric:
        lines.append(f"Non-numeric columns (models need them encoded): {', '.join(non_numeric[:MAX_LISTED_COLUMNS])}")
    return "\n".join(lines)
