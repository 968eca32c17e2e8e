"""Feature-engineering tools, exercised through registry.execute like the planner calls them."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from mltb_core.toolkit.registry import REGISTRY, ToolCall
from mltb_core.toolkit.tools import features
from mltb_core.toolkit.scratchpad import Scratchpad
from tool_calls import call_tool, failed, ok

# every tool the module exports (its __all__ also names its limits, in capitals)
FEATURE_TOOLS = [name for name in features.__all__ if not name.isupper()]


@pytest.fixture
def combined() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 40
    return pd.DataFrame({
        "PassengerId": [f"{i // 2:04d}_{i % 2 + 1:02d}" for i in range(n)],
        "HomePlanet": rng.choice(["Earth", "Europa", "Mars"], n),
        "CryoSleep": rng.random(n) > 0.5,
        "Cabin": [None if i % 10 == 3 else f"{'ABF'[i % 3]}/{i}/{'PS'[i % 2]}" for i in range(n)],
        "Age": np.where(np.arange(n) % 7 == 0, np.nan, rng.integers(1, 80, n).astype(float)),
        "RoomService": rng.integers(0, 500, n).astype(float),
        "Spa": rng.integers(0, 300, n).astype(float),
        "Name": [f"Mr. Person{i}" if i % 2 else f"Mrs. Person{i}" for i in range(n)],
        "Start": pd.date_range("2024-01-01", periods=n, freq="36h").astype(str),
        "End": pd.date_range("2024-01-03", periods=n, freq="36h").astype(str),
        "Transported": rng.random(n) > 0.5,
        "_is_train": [1] * 30 + [0] * 10,
    })


@pytest.fixture
def pad(combined) -> Scratchpad:
    return Scratchpad(objects={"combined": combined})


def call(pad, ctx, tool, func_kwargs=None, bindings=None, output=None):
    return call_tool(pad, ctx, tool, bindings or {"df": "combined"}, func_kwargs, output)


def test_every_tool_is_registered_with_stage_and_example_docstring():
    for name in FEATURE_TOOLS:
        tool = REGISTRY.get(name)
        assert "features" in tool.roles or "cleaning" in tool.roles, name
        assert "Parameters" in tool.doc and "Returns" in tool.doc, name
        example = ToolCall.from_dict(json.loads(tool.doc.split("Examples\n--------\n", 1)[1]))
        assert example.tool_name == name
        assert set(example.bindings) <= set(tool.object_params) and set(example.func_kwargs) <= set(tool.value_params)
        assert tool.object_params and tool.object_params[0] == "df", name
        tool.schema()  # schemas must build


def test_kinds_follow_the_paper():
    kinds = {name: REGISTRY.get(name).kind for name in FEATURE_TOOLS}
    assert kinds["get_group_aggregation"] == "get"
    assert kinds["get_unique_values"] == "get"
    assert kinds["get_features"] == "get-set"
    assert kinds["filter_dataframe"] == "get-set"
    assert all(k == "override" for n, k in kinds.items()
               if n not in ("get_group_aggregation", "get_unique_values", "get_features", "filter_dataframe"))


# --------------------------------------------------------------- derived features
def test_create_numeric_feature(pad, ctx, combined):
    ok(call(pad, ctx, "create_numeric_feature", {"name": "Total", "expression": "RoomService + Spa"}))
    out = pad["combined"]
    np.testing.assert_allclose(out["Total"], combined["RoomService"] + combined["Spa"])
    assert "Total" not in combined.columns  # input untouched
    failed(call(pad, ctx, "create_numeric_feature", {"name": "T", "expression": "RoomSevice + 1"}), "RoomSevice")
    failed(call(pad, ctx, "create_numeric_feature", {"name": "T", "expression": "HomePlanet"}), "not numeric")


def test_create_categorical_feature_matches_text_keys_and_reports_unmapped(pad, ctx, combined):
    result = ok(call(pad, ctx, "create_categorical_feature",
                     {"name": "Planet", "source_column": "HomePlanet", "mapping": {"Earth": 0, "Mars": 2}}))
    out = pad["combined"]
    assert out.loc[combined["HomePlanet"] == "Mars", "Planet"].eq(2).all()
    assert out.loc[combined["HomePlanet"] == "Europa", "Planet"].isna().all()
    assert "became NaN" in result.message
    ok(call(pad, ctx, "create_categorical_feature",
            {"name": "ServiceBand", "source_column": "_is_train", "mapping": {"1": "train", "0": "test"}}))
    assert set(pad["combined"]["ServiceBand"]) == {"train", "test"}
    failed(call(pad, ctx, "create_categorical_feature",
                {"name": "P", "source_column": "Homeplanet", "mapping": {"a": 1}}), "'HomePlanet'")
    failed(call(pad, ctx, "create_categorical_feature",
                {"name": "P", "source_column": "HomePlanet", "mapping": {}}), "mapping")


def test_create_conditional_feature(pad, ctx, combined):
    ok(call(pad, ctx, "create_conditional_feature",
            {"name": "Adult", "condition": "Age >= 18", "true_value": 1, "false_value": 0}))
    out = pad["combined"]
    expected = (combined["Age"] >= 18).astype(int)  # NaN age -> False -> 0
    assert out["Adult"].tolist() == expected.tolist()
    ok(call(pad, ctx, "create_conditional_feature",
            {"name": "BigSpa", "condition": "Spa > 150", "true_value": 1.5, "false_value": None}))
    big = pad["combined"]["BigSpa"]
    assert big.dtype == float and big.isna().tolist() == (combined["Spa"] <= 150).tolist()
    failed(call(pad, ctx, "create_conditional_feature",
                {"name": "X", "condition": "Agee > 1", "true_value": 1, "false_value": 0}), "Agee")


def test_extract_string_pattern_group_and_numeric(pad, ctx, combined):
    ok(call(pad, ctx, "extract_string_pattern",
            {"name": "Title", "source_column": "Name", "pattern": r"^(\w+)\.", "group": 1}))
    assert set(pad["combined"]["Title"]) == {"Mr", "Mrs"}
    ok(call(pad, ctx, "extract_string_pattern",
            {"name": "CabinNum", "source_column": "Cabin", "pattern": r"/(\d+)/", "group": 1}))
    num = pad["combined"]["CabinNum"]
    assert pd.api.types.is_numeric_dtype(num) and num.isna().sum() == combined["Cabin"].isna().sum()
    failed(call(pad, ctx, "extract_string_pattern",
                {"name": "x", "source_column": "Name", "pattern": "(a+)+$"}), "catastrophically")
    failed(call(pad, ctx, "extract_string_pattern",
                {"name": "x", "source_column": "Name", "pattern": "a" * 201}), "limit is 200")
    failed(call(pad, ctx, "extract_string_pattern",
                {"name": "x", "source_column": "Name", "pattern": "(", "group": 0}), "not a valid regular")
    failed(call(pad, ctx, "extract_string_pattern",
                {"name": "x", "source_column": "Name", "pattern": "(a)", "group": 3}), "out of range")


def test_split_string_column(pad, ctx, combined):
    ok(call(pad, ctx, "split_string_column",
            {"name_prefix": "Cabin", "source_column": "Cabin", "delimiter": "/", "indices": [0, 1, 2]}))
    out = pad["combined"]
    assert out["Cabin_0"].iloc[0] == "A" and out["Cabin_2"].iloc[1] == "S"
    assert pd.api.types.is_numeric_dtype(out["Cabin_1"])  # numeric parts become numbers
    assert out["Cabin_1"].isna().sum() == combined["Cabin"].isna().sum()
    failed(call(pad, ctx, "split_string_column",
                {"name_prefix": "C", "source_column": "Cabin", "delimiter": "/", "indices": [5]}), "out of range")


def test_group_aggregation_create_and_get(pad, ctx, combined):
    ok(call(pad, ctx, "create_group_aggregation",
            {"name": "PlanetSpa", "group_column": "HomePlanet", "agg_column": "Spa", "agg_func": "mean"}))
    out = pad["combined"]
    expected = combined.groupby("HomePlanet")["Spa"].transform("mean")
    np.testing.assert_allclose(out["PlanetSpa"], expected)
    shown = ok(call(pad, ctx, "get_group_aggregation",
                    {"group_column": "HomePlanet", "agg_column": "Spa", "agg_func": "max"}))
    assert shown.written == [] and "Europa" in shown.message
    assert shown.value["Spa"].max() == combined["Spa"].max()
    failed(call(pad, ctx, "get_group_aggregation",
                {"group_column": "HomePlanet", "agg_column": "Spa", "agg_func": "avg"}), "agg_func")
    failed(call(pad, ctx, "create_group_aggregation",
                {"name": "x", "group_column": "HomePlanet", "agg_column": "Name", "agg_func": "mean"}), "numeric")


def test_rolling_lag_lead(pad, ctx, combined):
    ok(call(pad, ctx, "create_rolling_feature", {"name": "R", "source_column": "Spa", "window": 3}))
    np.testing.assert_allclose(pad["combined"]["R"], combined["Spa"].rolling(3, min_periods=1).mean())
    ok(call(pad, ctx, "create_lag_feature", {"name": "L", "source_column": "Spa", "lag": 2}))
    ok(call(pad, ctx, "create_lead_feature", {"name": "F", "source_column": "Spa"}))
    out = pad["combined"]
    assert out["L"].iloc[2] == combined["Spa"].iloc[0] and out["L"].iloc[:2].isna().all()
    assert out["F"].iloc[0] == combined["Spa"].iloc[1] and np.isnan(out["F"].iloc[-1])
    failed(call(pad, ctx, "create_rolling_feature", {"name": "R", "source_column": "Spa", "window": 0}), "window")
    failed(call(pad, ctx, "create_rolling_feature", {"name": "R", "source_column": "Name", "window": 2}), "numeric")
    failed(call(pad, ctx, "create_lag_feature", {"name": "L", "source_column": "Spaa"}), "'Spa'")
    failed(call(pad, ctx, "create_lead_feature", {"name": "L", "source_column": "Spa", "lead": -1}), "lead")


def test_datetime_features_and_time_delta(pad, ctx, combined):
    ok(call(pad, ctx, "extract_datetime_features",
            {"datetime_column": "Start", "features": ["year", "month", "hour", "is_weekend"]}))
    out = pad["combined"]
    stamps = pd.to_datetime(combined["Start"])
    assert out["Start_hour"].tolist() == stamps.dt.hour.tolist()
    assert out["Start_is_weekend"].tolist() == (stamps.dt.day_of_week >= 5).astype(int).tolist()
    ok(call(pad, ctx, "create_time_delta",
            {"name": "Hours", "start_column": "Start", "end_column": "End", "unit": "h"}))
    assert pad["combined"]["Hours"].eq(48).all()
    failed(call(pad, ctx, "extract_datetime_features", {"datetime_column": "Start", "features": ["decade"]}),
           "decade")
    failed(call(pad, ctx, "extract_datetime_features", {"datetime_column": "Name"}), "could not be parsed")
    failed(call(pad, ctx, "create_time_delta",
                {"name": "d", "start_column": "Start", "end_column": "End", "unit": "fortnight"}), "unit")


def test_apply_custom_function_lambda_string_from_paper(pad, ctx, combined):
    ok(call(pad, ctx, "apply_custom_function",
            {"name": "Cabin_deck", "source_columns": "Cabin",
             "func": "lambda x: x.split('/')[0] if isinstance(x, str) else None"}, output="combined"))
    out = pad["combined"]
    assert out["Cabin_deck"].iloc[0] == "A" and pd.isna(out["Cabin_deck"].iloc[3])
    ok(call(pad, ctx, "apply_custom_function",
            {"name": "Spend", "source_columns": ["RoomService", "Spa"],
             "func": "lambda row: row['RoomService'] + row['Spa']"}))
    np.testing.assert_allclose(pad["combined"]["Spend"], combined["RoomService"] + combined["Spa"])
    failed(call(pad, ctx, "apply_custom_function",
                {"name": "x", "source_columns": "Cabin", "func": "lambda x: __import__('os')"}))
    # Vectorised: a missing Cabin stays missing instead of failing on NaN.split (the old per-row evaluator).
    ok(call(pad, ctx, "apply_custom_function", {"name": "deck", "source_columns": "Cabin",
                                                "func": "lambda x: x.split('/')[0]"}, output="decks"))
    assert pad["decks"]["deck"].isna().tolist() == combined["Cabin"].isna().tolist()
    failed(call(pad, ctx, "apply_custom_function",
                {"name": "x", "source_columns": "Cabin", "func": "lambda x: x.split('/')"}), "split")
    failed(call(pad, ctx, "apply_custom_function",
                {"name": "x", "source_columns": ["Cabn"], "func": "lambda x: x"}), "'Cabin'")


# --------------------------------------------------------------------- encoders
def test_one_hot_encode_uint8_and_keeps_tracking_column(pad, ctx, combined):
    ok(call(pad, ctx, "one_hot_encode", {"columns": ["HomePlanet"], "drop_first": False}))
    out = pad["combined"]
    dummies = [c for c in out.columns if c.startswith("HomePlanet_")]
    assert sorted(dummies) == ["HomePlanet_Earth", "HomePlanet_Europa", "HomePlanet_Mars"]
    assert all(out[c].dtype == np.uint8 for c in dummies)
    assert out[dummies].sum(axis=1).eq(1).all()
    assert out["_is_train"].tolist() == combined["_is_train"].tolist()
    failed(call(pad, ctx, "one_hot_encode", {"columns": ["Planet"]}), "HomePlanet")


def test_one_hot_memory_guard(ctx):
    wide = pd.DataFrame({"Id": [f"id{i}" for i in range(300)], "Small": ["a", "b", "c"] * 100})
    pad = Scratchpad(objects={"combined": wide})
    failed(call(pad, ctx, "one_hot_encode", {}), "'Id' (300 distinct values)", "label_encode")
    failed(call(pad, ctx, "encode_all_categorical_columns", {}), "300 distinct")
    many = pd.DataFrame({f"c{j}": [f"v{i % 150}" for i in range(300)] for j in range(8)})
    pad2 = Scratchpad(objects={"combined": many})
    failed(call(pad2, ctx, "one_hot_encode", {}), "would add 1192 columns")
    ok(call(pad, ctx, "one_hot_encode", {"columns": "Small"}))


def test_label_encode_sorted_codes_and_missing_error(pad, ctx, combined):
    ok(call(pad, ctx, "label_encode", {"columns": "HomePlanet"}))
    codes = pad["combined"]["HomePlanet"]
    mapping = {"Earth": 0, "Europa": 1, "Mars": 2}
    assert codes.tolist() == combined["HomePlanet"].map(mapping).tolist()
    failed(call(pad, ctx, "label_encode", {"columns": ["Cabin"]}), "'Cabin' (4 missing)", "Fill")


def test_encode_all_categorical_columns_skips_tracking_and_bool(ctx, combined):
    frame = combined[["HomePlanet", "CryoSleep", "Age", "_is_train"]].assign(
        Deck=pd.Categorical(["A", "B"] * 20))
    pad = Scratchpad(objects={"combined": frame, "raw": frame})
    ok(call(pad, ctx, "encode_all_categorical_columns", {"method": "one_hot", "drop_first": True}))
    out = pad["combined"]
    assert {"HomePlanet_Europa", "HomePlanet_Mars", "Deck_B", "CryoSleep", "Age", "_is_train"} == set(out.columns)
    ok(call(pad, ctx, "encode_all_categorical_columns", {"method": "label"}, bindings={"df": "raw"},
            output="labelled"))
    assert pad["labelled"]["Deck"].tolist() == [0, 1] * 20
    failed(call(pad, ctx, "encode_all_categorical_columns", {"method": "target"}), "method")


def test_normalizers(pad, ctx, combined):
    ok(call(pad, ctx, "normalize_features", {"columns": ["Spa"], "method": "minmax"}))
    spa = pad["combined"]["Spa"]
    assert spa.min() == 0 and spa.max() == 1
    ok(call(pad, ctx, "normalize_all_numerical_columns", {"method": "standard"}, output="std"))
    std = pad["std"]
    assert abs(std["RoomService"].mean()) < 1e-9 and abs(std["RoomService"].std(ddof=0) - 1) < 1e-9
    assert std["_is_train"].tolist() == combined["_is_train"].tolist()
    assert std["CryoSleep"].dtype == bool
    assert std["Age"].isna().sum() == combined["Age"].isna().sum()
    failed(call(pad, ctx, "normalize_features", {"columns": ["HomePlanet"]}), "HomePlanet (", "are not numeric")
    failed(call(pad, ctx, "normalize_features", {"columns": ["_is_train"]}), "tracking")
    failed(call(pad, ctx, "normalize_all_numerical_columns", {"method": "zscore"}), "method")


# ------------------------------------------------------------- column selection
def test_drop_get_rename(pad, ctx, combined):
    ok(call(pad, ctx, "drop_feature", {"column": ["Name", "Cabin"]}))
    assert "Name" not in pad["combined"].columns and "Name" in combined.columns
    failed(call(pad, ctx, "drop_feature", {"column": "Agee"}), "did you mean 'Age'")
    ok(call(pad, ctx, "get_features", {"columns": ["Age", "Spa"]}, output="X"))
    assert list(pad["X"].columns) == ["Age", "Spa"]
    failed(call(pad, ctx, "get_features", {"columns": ["Age", "Spa"]}), "output")
    failed(call(pad, ctx, "get_features", {"columns": ["age"]}, output="X"), "'Age'")
    ok(call(pad, ctx, "rename_feature", {"old_name": "Spa", "new_name": "SpaSpend"}))
    assert "SpaSpend" in pad["combined"].columns
    failed(call(pad, ctx, "rename_feature", {"old_name": "Age", "new_name": "RoomService"}), "duplicate")


def test_get_unique_values_and_filter(pad, ctx, combined):
    shown = ok(call(pad, ctx, "get_unique_values", {"column": "HomePlanet"}))
    table = shown.value
    assert table["HomePlanet"].tolist() == ["Earth", "Europa", "Mars"]
    assert table["count"].sum() == len(combined) and shown.written == []
    no_counts = ok(call(pad, ctx, "get_unique_values", {"column": "Cabin", "include_counts": False}))
    assert list(no_counts.value.columns) == ["Cabin"] and no_counts.value["Cabin"].isna().sum() == 1
    failed(call(pad, ctx, "get_unique_values", {"column": "Planet"}), "HomePlanet")
    kept = ok(call(pad, ctx, "filter_dataframe", {"condition": "_is_train == 1 and Age > 30"}, output="older"))
    expected = combined[(combined["_is_train"] == 1) & (combined["Age"] > 30)]
    assert pad["older"].index.tolist() == expected.index.tolist()
    assert f"Kept {len(expected)} of 40 rows" in kept.message
    failed(call(pad, ctx, "filter_dataframe", {"condition": "Age +"}, output="x"))


def test_filter_dataframe_keeps_every_test_row_or_none(pad, ctx, combined):
    """A filter that drops some test rows leaves a test part no valid submission can come from: refused, as
    drop_rows_with_missing refuses it; one that keeps none of them selects the train part, and train rows
    still filter freely."""
    test_ages = combined.loc[combined["_is_train"] == 0, "Age"]
    lost = int((~(test_ages > 30)).sum())
    assert 0 < lost < len(test_ages)
    failed(call(pad, ctx, "filter_dataframe", {"condition": "Age > 30"}, output="x"),
           f"drop {lost} of the 10 test rows", "train.csv", "split_combined_into_train_test")
    assert "x" not in pad
    ok(call(pad, ctx, "filter_dataframe", {"condition": "Transported.notna() and _is_train == 1"}, output="x"))
    assert len(pad["x"]) == 30
    ok(call(pad, ctx, "filter_dataframe", {"condition": "_is_train == 0 or Age > 30"}, output="y"))
    assert len(pad["y"]) == 10 + int((combined.loc[combined["_is_train"] == 1, "Age"] > 30).sum())
    failed(call(pad, ctx, "filter_dataframe", {"condition": "Age.isna()"}, output="x"), "`or _is_train == 0`")
    # the split test part (marked as test rows) is the same, and emptying a frame of test rows is refused too
    ok(call_tool(pad, ctx, "split_combined_into_train_test", {"combined": "combined"}, output="parts"))
    message = failed(call(pad, ctx, "filter_dataframe", {"condition": "Age > 30"}, {"df": "parts_test"},
                          output="t"), f"drop {lost} of the 10 test rows").message
    assert "to the condition to keep the test rows" not in message   # a test part has no tracking column
    failed(call(pad, ctx, "filter_dataframe", {"condition": "Age > 1000"}, {"df": "parts_test"}, output="t"),
           "drop 10 of the 10 test rows")
    assert "t" not in pad


def test_no_tool_writes_the_tracking_column_by_name(pad, ctx, combined):
    """Rewritten flags would move test rows into the train part past every check that reads them."""
    for tool, kwargs in (("create_numeric_feature", {"name": "_is_train", "expression": "1"}),
                         ("create_conditional_feature", {"name": "_is_train", "condition": "Age > 30",
                                                         "true_value": 1, "false_value": 0}),
                         ("rename_feature", {"old_name": "Spa", "new_name": "_is_train"})):
        failed(call(pad, ctx, tool, kwargs, output="combined"), "'_is_train' is the train/test tracking column")
    assert pad["combined"]["_is_train"].tolist() == combined["_is_train"].tolist()


# ------------------------------------------------------------------ isolation
def test_override_in_one_branch_is_invisible_to_its_sibling(pad, ctx, combined):
    left, right = pad.child(), pad.child()
    ok(call(left, ctx, "one_hot_encode", {"columns": ["HomePlanet"]}))
    ok(call(right, ctx, "create_numeric_feature", {"name": "Double", "expression": "Spa * 2"}))
    assert "HomePlanet" not in left["combined"].columns and "Double" not in left["combined"].columns
    assert "HomePlanet" in right["combined"].columns and "Double" in right["combined"].columns
    assert pad["combined"] is combined and list(combined.columns) == list(pad["combined"].columns)
    assert "Double" not in combined.columns
