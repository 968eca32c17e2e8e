"""Cleaning tools through registry.execute: one working and one bad call each, plus isolation."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import mltb_core.toolkit.tools.cleaning  # noqa: F401 - registers the tools
import mltb_core.toolkit.tools.loading  # noqa: F401
from mltb_core.toolkit.registry import REGISTRY
from mltb_core.toolkit.scratchpad import Scratchpad
from tool_calls import call_tool, failed, ok


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame({
        "Age": [10.0, np.nan, 30.0, np.nan, 50.0],
        "HomePlanet": ["Earth", None, "Earth", "Mars", "Mars"],
        "CryoSleep": [True, True, False, None, False],
        "Spa": [1, 2, 3, 4, 5],
        "RoomService": [np.nan, 1.0, np.nan, 2.0, 3.0],
    })


@pytest.fixture
def pad(frame) -> Scratchpad:
    return Scratchpad(objects={"df": frame})


def call(pad, ctx, tool, kwargs=None, output=None):
    return call_tool(pad, ctx, tool, {"df": "df"}, kwargs, output)


def filled(pad, ctx, tool, kwargs=None) -> pd.DataFrame:
    """Run an override tool in a child pad and return the overridden frame."""
    child = pad.child()
    result = call(child, ctx, tool, kwargs)
    assert result.ok, result.message
    assert result.written == ["df"]
    return child["df"]


def assert_error(pad, ctx, tool, kwargs, fragment):
    before = pad["df"]
    failed(call(pad, ctx, tool, kwargs), fragment, REGISTRY.get(tool).doc)
    assert pad["df"] is before


def test_fillna_with_value(pad, ctx):
    out = filled(pad, ctx, "fillna_with_value", {"columns": ["Age", "RoomService"], "value": 0})
    assert out["Age"].tolist() == [10.0, 0.0, 30.0, 0.0, 50.0] and not out["RoomService"].isna().any()
    text = filled(pad, ctx, "fillna_with_value", {"columns": "Age", "value": "Unknown"})
    assert text["Age"].tolist()[1] == "Unknown"  # widened instead of a pandas dtype error
    assert_error(pad, ctx, "fillna_with_value", {"columns": ["Agge"], "value": 0}, "did you mean 'Age'")


def test_a_fill_that_fills_nothing_names_the_columns_that_still_have_gaps(pad, ctx):
    """A real-LLM ReAct trial filled Age 39 times after it had no gaps, each time told only "No missing
    values were filled"; the target's placeholder on a combined frame (missing on exactly the test rows) is
    no gap to fill and is left out."""
    assert call(pad, ctx, "fillna_with_median", {"columns": ["Age"]}).ok
    result = call(pad, ctx, "fillna_with_median", {"columns": ["Age"]})
    assert result.ok
    assert "No missing values were filled. Columns with missing values: HomePlanet: 1, CryoSleep: 1, " \
           "RoomService: 2." in result.message
    pad["df"] = pad["df"].assign(Transported=[True, False, True, np.nan, np.nan], _is_train=[1, 1, 1, 0, 0])
    for tool, columns in (("fillna_with_mode", ["HomePlanet", "CryoSleep"]),
                          ("fillna_with_median", ["RoomService"])):
        assert call(pad, ctx, tool, {"columns": columns}).ok
    result = call(pad, ctx, "fillna_with_median", {"columns": ["Age"]})
    assert result.ok and "No other column has missing values." in result.message
    # a target gap on a train row is a gap like any other
    pad["df"] = pad["df"].assign(Transported=[True, np.nan, True, np.nan, np.nan])
    assert "Columns with missing values: Transported: 3." in call(pad, ctx, "fillna_with_median",
                                                                   {"columns": ["Age"]}).message


def test_fillna_with_median_and_mean(pad, ctx):
    out = filled(pad, ctx, "fillna_with_median")
    assert out["Age"].tolist() == [10.0, 30.0, 30.0, 30.0, 50.0]
    assert out["RoomService"].tolist() == [2.0, 1.0, 2.0, 2.0, 3.0]
    assert out["HomePlanet"].isna().sum() == 1  # text columns untouched
    out = filled(pad, ctx, "fillna_with_mean", {"columns": "RoomService"})
    assert out["RoomService"].tolist() == [2.0, 1.0, 2.0, 2.0, 3.0] and out["Age"].isna().sum() == 2
    assert_error(pad, ctx, "fillna_with_median", {"columns": ["HomePlanet"]}, "needs numeric columns")
    assert_error(pad, ctx, "fillna_with_mean", {"columns": ["Nope"]}, "unknown column")


def test_fillna_with_mode(pad, ctx):
    out = filled(pad, ctx, "fillna_with_mode")
    assert out.isna().sum().sum() == 0
    assert out["HomePlanet"][1] in ("Earth", "Mars") and out["CryoSleep"][3] in (True, False)
    assert_error(pad, ctx, "fillna_with_mode", {"columns": "homeplanet"}, "did you mean 'HomePlanet'")


def test_fillna_with_condition(pad, ctx):
    out = filled(pad, ctx, "fillna_with_condition",
                 {"target_column": "RoomService", "condition": "CryoSleep == True", "fill_value": 0})
    assert out["RoomService"][0] == 0 and np.isnan(out["RoomService"][2])  # row 2 is not CryoSleep
    assert_error(pad, ctx, "fillna_with_condition",
                 {"target_column": "RoomService", "condition": "__import__('os')", "fill_value": 0}, "not part of mltb's expression language")


def test_fillna_with_multiple_conditions(pad, ctx):
    out = filled(pad, ctx, "fillna_with_multiple_conditions",
                 {"target_column": "Age", "conditions_and_values": [["Spa > 3", 99], ["Spa > 1", 5]]})
    assert out["Age"].tolist() == [10.0, 5.0, 30.0, 99.0, 50.0]
    as_dict = filled(pad, ctx, "fillna_with_multiple_conditions",
                     {"target_column": "Age", "conditions_and_values": {"Spa == 2": 7}})
    assert as_dict["Age"][1] == 7 and np.isnan(as_dict["Age"][3])
    assert_error(pad, ctx, "fillna_with_multiple_conditions",
                 {"target_column": "Age", "conditions_and_values": ["Spa > 3"]}, "[condition, value]")


def test_fillna_with_conditional_aggregation(pad, ctx):
    out = filled(pad, ctx, "fillna_with_conditional_aggregation",
                 {"target_column": "Age", "condition_column": "HomePlanet", "condition_values": ["Mars"],
                  "agg_func": "mean"})
    assert out["Age"][3] == 50.0 and np.isnan(out["Age"][1])  # row 1 has no planet
    assert_error(pad, ctx, "fillna_with_conditional_aggregation",
                 {"target_column": "Age", "condition_column": "HomePlanet", "condition_values": ["Venus"]},
                 "do not occur")


def test_fillna_with_custom_function(pad, ctx):
    out = filled(pad, ctx, "fillna_with_custom_function",
                 {"target_column": "Age", "condition": "Spa > 1", "custom_func": "lambda row: row['Spa'] * 10"})
    assert out["Age"].tolist() == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert_error(pad, ctx, "fillna_with_custom_function",
                 {"target_column": "Age", "condition": None, "custom_func": "lambda row: row.__class__"}, "not part of mltb's expression language")


def test_drop_rows_with_missing(pad, ctx):
    out = filled(pad, ctx, "drop_rows_with_missing", {"columns": ["Age"]})
    assert out["Spa"].tolist() == [1, 3, 5]
    out = filled(pad, ctx, "drop_rows_with_missing", {"threshold": 5})
    assert out["Spa"].tolist() == [5]
    assert_error(pad, ctx, "drop_rows_with_missing", {"threshold": -1}, "threshold must be")


def test_drop_rows_refuses_to_empty_the_frame(ctx, frame):
    """Seen on the real model: threshold=3000 over 2 columns dropped all 8,693 rows of the combined frame,
    test rows too, stored the empty frame over it, and 45 of the trial's 60 calls went into filling it. A
    count above the columns looked at, or any call that would drop every row, is refused; the frame stays."""
    pad = Scratchpad(objects={"df": frame.assign(Name=[None] * 5)})
    result = call(pad, ctx, "drop_rows_with_missing", {"columns": ["Age", "Name"], "threshold": 3000}, output="df")
    assert not result.ok and "threshold 3000 asks for more non-missing values than the 2 column(s)" in result.message
    result = call(pad, ctx, "drop_rows_with_missing", {"columns": ["Age", "Name"]}, output="df")
    assert not result.ok and "all 5 rows would be dropped (each misses a value there" in result.message
    assert "Name" in result.message and "fillna_with_median" in result.message
    result = call(pad, ctx, "drop_rows_with_missing", {"columns": ["Age", "Name"], "threshold": 2})
    assert not result.ok and "keeps fewer non-missing values there than 2" in result.message
    assert len(pad.get("df")) == 5
    assert call(pad.child(), ctx, "drop_rows_with_missing", {"columns": ["Age", "Name"], "threshold": 1}).ok
    empty = Scratchpad(objects={"df": frame.iloc[:0]})
    assert call(empty, ctx, "drop_rows_with_missing").ok        # nothing to lose


def test_drop_rows_refuses_to_drop_test_rows(ctx, frame):
    """Seen on the real model: a drop on the combined frame took 50 test rows with it and "succeeded" with a
    warning; with test rows gone no submission can be valid on that path. It is an error now, on the combined
    frame and on the test part of a split; train rows still drop."""
    drop = "drop_rows_with_missing"
    pad = Scratchpad(objects={"df": frame.assign(_is_train=[1, 1, 1, 0, 0])})   # Age is missing on rows 1 and 3
    failed(call(pad.child(), ctx, drop, {"columns": ["Age"]}), "1 test row(s) would be dropped",
           "fillna_with_median", "split_combined_into_train_test")
    ok(call_tool(pad, ctx, "split_combined_into_train_test", {"combined": "df"}, output="parts"))
    failed(call_tool(pad, ctx, drop, {"df": "parts_test"}, {"columns": ["Age"]}, output="t"),
           "1 test row(s) would be dropped")
    assert len(pad["parts_test"]) == 2 and "t" not in pad
    ok(call_tool(pad, ctx, drop, {"df": "parts_train"}, {"columns": ["Age"]}, output="t"))
    assert pad["t"]["Spa"].tolist() == [1, 3]
    # on the combined frame, a drop that only takes train rows runs
    pad["df"] = pad["df"].assign(Age=[np.nan, 1.0, 2.0, 3.0, 4.0])
    assert "Dropped 1 of 5 rows" in ok(call(pad, ctx, drop, {"columns": ["Age"]})).message


def test_get_missing_summary(pad, ctx):
    result = call(pad, ctx, "get_missing_summary")
    assert result.ok and "Age | 2 | 40.0%" in result.message and "Spa" not in result.message
    pad["series"] = pd.Series([1, None])
    failed(call_tool(pad, ctx, "get_missing_summary", {"df": "series"}), "must be a DataFrame")


def test_cast_columns(pad, ctx):
    out = filled(pad, ctx, "cast_columns", {"column_type_mapping": {"Spa": "float", "HomePlanet": "category"}})
    assert out["Spa"].dtype == "float64" and isinstance(out["HomePlanet"].dtype, pd.CategoricalDtype)
    assert_error(pad, ctx, "cast_columns", {"column_type_mapping": {"Age": "int"}}, "missing values")
    assert_error(pad, ctx, "cast_columns", {"column_type_mapping": {"Spa": "quaternion"}}, "unknown type")


def test_cast_numeric_columns(pad, ctx):
    out = filled(pad, ctx, "cast_numeric_columns", {"target_type": "float32"})
    assert out["Spa"].dtype == "float32" and out["Age"].dtype == "float32"
    assert_error(pad, ctx, "cast_numeric_columns", {"columns": ["HomePlanet"]}, "needs numeric columns")


def test_cast_integer_columns_to_float(pad, ctx):
    out = filled(pad, ctx, "cast_integer_columns_to_float")
    assert out["Spa"].dtype == "float64"
    assert_error(pad, ctx, "cast_integer_columns_to_float", {"columns": ["Age"]}, "not integer")


def test_cast_categorical_columns(pad, ctx):
    out = filled(pad, ctx, "cast_categorical_columns")
    assert isinstance(out["HomePlanet"].dtype, pd.CategoricalDtype) and out["Spa"].dtype == "int64"
    assert_error(pad, ctx, "cast_categorical_columns", {"columns": ["Planet"]}, "unknown column")


def test_fill_category_with_new_value(ctx, frame):
    pad = Scratchpad(objects={"df": frame.assign(HomePlanet=frame["HomePlanet"].astype("category"))})
    out = filled(pad, ctx, "fillna_with_value", {"columns": "HomePlanet", "value": "Unknown"})
    assert out["HomePlanet"][1] == "Unknown"


def test_sibling_isolation(pad, ctx, frame):
    left, right = pad.child(), pad.child()
    assert call(left, ctx, "fillna_with_value", {"columns": "Age", "value": -1}).ok
    assert call(right, ctx, "drop_rows_with_missing", {"columns": ["Age"]}).ok
    assert left["df"]["Age"][1] == -1
    assert len(right["df"]) == 3 and right["df"]["Age"].isna().sum() == 0
    pd.testing.assert_frame_equal(pad["df"], frame)
    assert pad["df"]["Age"].isna().sum() == 2


def test_every_cleaning_tool_is_tagged_cleaning():
    for name in ("fillna_with_value", "drop_rows_with_missing", "get_missing_summary", "cast_columns"):
        assert "cleaning" in REGISTRY.get(name).roles
