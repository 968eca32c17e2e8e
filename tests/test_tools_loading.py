"""Loading tools through registry.execute, plus the sandbox path-traversal corpus."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import mltb_core.toolkit.tools  # noqa: F401 - registers the tools
from mltb_core.toolkit.registry import REGISTRY, ToolContext, ToolInputError
from mltb_core.toolkit.sandbox import resolve_read, resolve_write
from mltb_core.toolkit.scratchpad import Scratchpad
from mltb_core.toolkit.validation import mark_rows, rows_held
from tool_calls import call_tool, failed, tool_context


@pytest.fixture
def ctx(tmp_path) -> ToolContext:
    data = tmp_path / "data"
    data.mkdir()
    pd.DataFrame({"PassengerId": ["a", "b", "c"], "Age": [20.0, None, 40.0], "HomePlanet": ["Earth", "Mars", "Earth"],
                  "Transported": [True, False, True]}).to_csv(data / "train.csv", index=False)
    pd.DataFrame({"PassengerId": ["d", "e"], "Age": [30.0, 50.0],
                  "HomePlanet": ["Mars", "Earth"]}).to_csv(data / "test.csv", index=False)
    pd.DataFrame({"x": [1, 2]}).to_csv(data / "small.csv.gz", index=False)
    return tool_context(tmp_path, data_dir=data)


@pytest.fixture
def pad(ctx) -> Scratchpad:
    return Scratchpad(objects={
        "train": pd.read_csv(ctx.data_dir / "train.csv"),
        "test": pd.read_csv(ctx.data_dir / "test.csv"),
        "stores": pd.DataFrame({"HomePlanet": ["Earth", "Mars"], "Gravity": [1.0, 0.38]}),
    })


call = call_tool


def assert_error(result, fragment):
    failed(result, fragment)


# ------------------------------------------------------------------ read_data
def test_read_data_reads_csv_and_gz(pad, ctx):
    assert call(pad, ctx, "read_data", kwargs={"filepath": "train.csv"}, output="df").ok
    assert pad["df"].shape == (3, 4)
    assert call(pad, ctx, "read_data", kwargs={"filepath": "small.csv.gz"}, output="gz").ok
    assert pad["gz"]["x"].tolist() == [1, 2]


def test_read_data_is_lenient_with_task_style_paths(pad, ctx):
    assert call(pad, ctx, "read_data", kwargs={"filepath": "data/spaceship_titanic/test.csv"}, output="t").ok
    assert len(pad["t"]) == 2
    assert call(pad, ctx, "read_data", kwargs={"filepath": str(ctx.data_dir / "test.csv")}, output="t2").ok


def test_the_task_files_say_which_rows_they_hold(pad, ctx):
    """Issue 33: the marks began at a split, so train.csv read and converted with is_train=false still gave
    "test features" of the train rows. The task's own train.csv and test.csv now carry their part; any other
    file (a copy in the sandbox included) stays unknown and is taken either way."""
    convert = "convert_dataframe_to_features_target"
    assert call(pad, ctx, "read_data", kwargs={"filepath": "train.csv"}, output="train_raw").ok
    assert call(pad, ctx, "read_data", kwargs={"filepath": "data/x/test.csv"}, output="test_raw").ok
    assert call(pad, ctx, "fillna_with_value", {"df": "train_raw"}, {"columns": ["Age"], "value": 30.0},
                output="train_filled").ok
    for train_rows in ("train_raw", "train_filled"):
        assert_error(call(pad, ctx, convert, {"df": train_rows}, {"target_column": "Transported", "is_train": False},
                          output="X_test"), "'df' holds 3 training rows (train.csv's rows")
    assert "X_test" not in pad
    # the likeliest slip on this path, test.csv converted without is_train=false, is told the switch
    failed(call(pad, ctx, convert, {"df": "test_raw"}, {"target_column": "Transported"}, output=["X", "y"]),
           "'df' holds 2 test rows (test.csv's rows", "convert them with is_train=false")
    # a lookup join (left, unique right keys) keeps the left rows, so it keeps their part; with repeated
    # right keys the rows multiply and the part is unknown
    pad["planets"] = pd.DataFrame({"HomePlanet": ["Earth", "Mars"], "Gravity": [1.0, 0.38]})
    assert call(pad, ctx, "join_dataframes", {"left_df": "train_raw", "right_df": "planets"},
                {"left_on": "HomePlanet", "how": "left"}, output="train_joined").ok
    assert pad["train_joined"]["Gravity"].tolist() == [1.0, 0.38, 1.0]
    assert_error(call(pad, ctx, convert, {"df": "train_joined"}, {"target_column": "Transported", "is_train": False},
                      output="X_test"), "'df' holds 3 training rows")
    pad["planets_twice"] = pd.concat([pad["planets"], pad["planets"]], ignore_index=True)
    assert call(pad, ctx, "join_dataframes", {"left_df": "train_raw", "right_df": "planets_twice"},
                {"left_on": "HomePlanet", "how": "left"}, output="train_doubled").ok
    assert len(pad["train_doubled"]) == 6
    assert call(pad, ctx, convert, {"df": "train_doubled"}, {"target_column": "Transported", "is_train": False},
                output="X_doubled").ok
    pad["test_gap"] = pad["test_raw"].assign(Age=[None, 50.0])   # pandas keeps the mark
    assert_error(call(pad, ctx, "drop_rows_with_missing", {"df": "test_gap"}, output="t"), "test rows")
    assert "t" not in pad
    # the paper's path without combining still runs: train converted as train, test as test
    assert call(pad, ctx, convert, {"df": "train_filled"}, {"target_column": "Transported"}, output=["X", "y"]).ok
    result = call(pad, ctx, convert, {"df": "test_raw"}, {"target_column": "Transported", "is_train": False},
                  output="X_test")
    assert result.ok and pad["X_test"]["PassengerId"].tolist() == ["d", "e"]
    # the same bytes under another name are not the task's file
    assert call(pad, ctx, "save_dataframe_to_csv", {"df": "train_raw"}, {"filepath": "copy.csv"}).ok
    assert call(pad, ctx, "read_data", kwargs={"filepath": "copy.csv"}, output="copy").ok
    assert call(pad, ctx, convert, {"df": "copy"}, {"target_column": "Transported", "is_train": False},
                output="X_copy").ok


def test_read_data_bad_path(pad, ctx):
    result = call(pad, ctx, "read_data", kwargs={"filepath": "nope.csv"}, output="df")
    assert_error(result, "not found")
    assert "train.csv" in result.message  # lists what is available
    assert "df" not in pad


# ------------------------------------------------------ concat / split / convert
def test_concatenate_train_test_tracks_rows_and_fills_target(pad, ctx):
    result = call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "test"}, output="combined")
    assert result.ok, result.message
    combined = pad["combined"]
    assert combined["_is_train"].tolist() == [1, 1, 1, 0, 0]
    assert not combined["Transported"].isna().any()
    assert "placeholder" in result.message and "Transported" in result.message
    assert "_is_train" not in pad["train"].columns  # input unchanged


def test_concatenate_train_test_refuses_already_combined(pad, ctx):
    call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "test"}, output="combined")
    result = call(pad, ctx, "concatenate_train_test", {"train_df": "combined", "test_df": "test"}, output="again")
    failed(result, "'train_df' holds a '_is_train' column: it is combined already", "each before combining")
    # a slice of one part is combined once too (the grammar offered it, the tool refused it unexplained)
    assert call(pad, ctx, "filter_dataframe", {"df": "combined"}, {"condition": "_is_train == 1"},
                output="combined_train_rows").ok
    result = call(pad, ctx, "concatenate_train_test", {"train_df": "combined_train_rows", "test_df": "test"},
                  output="again")
    failed(result, "'train_df' holds a '_is_train' column", "train_df takes the train.csv frame")
    assert "again" not in pad


def test_concatenate_train_test_refuses_train_and_test_swapped(pad, ctx):
    """Swapped, each row got the other part's flag and the test rows a target; the parts of the task's files
    are known, so the swap is refused, and the grammar offers each frame only where it fits."""
    assert call(pad, ctx, "read_data", kwargs={"filepath": "train.csv"}, output="train_raw").ok
    assert call(pad, ctx, "read_data", kwargs={"filepath": "test.csv"}, output="test_raw").ok
    result = call(pad, ctx, "concatenate_train_test", {"train_df": "test_raw", "test_df": "train_raw"}, output="c")
    failed(result, "'train_df' holds 2 test rows (test.csv's rows", "train_df takes the train.csv frame and "
           "test_df the test.csv frame")
    assert "c" not in pad
    assert call(pad, ctx, "concatenate_train_test", {"train_df": "train_raw", "test_df": "test_raw"}, output="c").ok
    assert rows_held(pad["c"]) == {"train": 3, "test": 2}


def test_concatenate_train_test_refuses_one_frame_given_twice(pad, ctx):
    """Issue 33: train bound to both arguments 'succeeded' and the trial never read test.csv."""
    result = call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "train"}, output="combined")
    assert_error(result, "train_df and test_df are the same data")
    assert "read test.csv with read_data first" in result.message.replace("Read", "read")
    assert "filepath 'test.csv'" in result.message and "combined" not in pad
    # a second read of the same file is the same data too
    pad["train_again"] = pd.read_csv(ctx.data_dir / "train.csv")
    result = call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "train_again"}, output="c")
    assert_error(result, "same data")
    # train.csv as read_data reads it is known to hold training rows
    assert call(pad, ctx, "read_data", kwargs={"filepath": "train.csv"}, output="train_read").ok
    result = call(pad, ctx, "concatenate_train_test", {"train_df": "train_read", "test_df": "train_read"}, output="c")
    failed(result, "'test_df' holds 3 training rows (train.csv's rows", "test_df the test.csv frame (read each "
           "with read_data")
    # different data of the same shape is not refused
    pad["other"] = pad["train"].assign(Age=[1.0, 2.0, 3.0])
    assert call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "other"}, output="c").ok


def test_split_round_trip(pad, ctx):
    call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "test"}, output="combined")
    result = call(pad, ctx, "split_combined_into_train_test", {"combined": "combined"}, output="parts")
    assert result.ok, result.message
    pd.testing.assert_frame_equal(pad["parts_train"], pad["train"])
    assert pad["parts_test"]["PassengerId"].tolist() == ["d", "e"]
    assert "_is_train" not in pad["parts_test"].columns


def test_split_without_tracking_column(pad, ctx):
    assert_error(call(pad, ctx, "split_combined_into_train_test", {"combined": "train"}, output=["a", "b"]),
                 "no '_is_train' column")


def test_convert_features_target(pad, ctx):
    result = call(pad, ctx, "convert_dataframe_to_features_target", {"df": "train"},
                  {"target_column": "Transported"}, output=["X", "y"])
    assert result.ok, result.message
    assert "Transported" not in pad["X"].columns and pad["y"].tolist() == [True, False, True]
    result = call(pad, ctx, "convert_dataframe_to_features_target", {"df": "train"},
                  {"target_column": "Transported", "is_train": False}, output="X_test")
    assert result.ok and list(pad["X_test"].columns) == ["PassengerId", "Age", "HomePlanet"]


def test_convert_features_target_says_when_the_target_is_not_the_tasks(pad, tmp_path):
    """A real-LLM ReAct trial converted with target_column MedInc, HouseAge, Latitude... in turn, each a plain
    success; predicting a feature is a real ML step, so it runs, and the result says what y is."""
    from types import SimpleNamespace

    ctx = tool_context(tmp_path, task=SimpleNamespace(target="Transported"))
    result = call(pad, ctx, "convert_dataframe_to_features_target", {"df": "train"}, {"target_column": "Age"},
                  output=["X", "y"])
    assert result.ok and pad["y"].name == "Age"
    assert "'Age' is not the task's target ('Transported'); a model fitted on this y predicts 'Age'" in result.message
    result = call(pad, ctx, "convert_dataframe_to_features_target", {"df": "train"},
                  {"target_column": "Transported"}, output=["X", "y"])
    assert result.ok and "not the task's target" not in result.message


def test_convert_features_target_errors(pad, ctx):
    assert_error(call(pad, ctx, "convert_dataframe_to_features_target", {"df": "test"},
                      {"target_column": "Transported"}, output="xy"), "unknown column")
    call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "test"}, output="combined")
    assert_error(call(pad, ctx, "convert_dataframe_to_features_target", {"df": "combined"},
                      {"target_column": "Transported"}, output="xy"), "split_combined_into_train_test first")


def test_convert_refuses_the_wrong_rows_after_a_split(pad, ctx):
    """Issue 33: the real model converted its train features X with is_train=false and got "test features" of
    the train rows (9 of an MCTS-Shaped trial's 44 tool calls went round that). Each part of a split, and the X
    of a train conversion, is refused where it is the wrong rows; the paper's path still runs."""
    call(pad, ctx, "concatenate_train_test", {"train_df": "train", "test_df": "test"}, output="combined")
    call(pad, ctx, "split_combined_into_train_test", {"combined": "combined"}, output="parts")
    convert = "convert_dataframe_to_features_target"
    assert call(pad, ctx, convert, {"df": "parts_train"}, {"target_column": "Transported"}, output="Xy").ok
    for train_rows in ("Xy_X", "parts_train"):
        result = call(pad, ctx, convert, {"df": train_rows}, {"target_column": "Transported", "is_train": False},
                      output="X_test")
        assert_error(result, "'df' holds 3 training rows (train.csv's rows, e.g. a train part or the X of a train")
        assert "test part of split_combined_into_train_test" in result.message and "X_test" not in pad
    # a frame derived from the train features by another tool is still train rows
    assert call(pad, ctx, "get_dataframe_summary", {"df": "Xy_X"}).ok
    pad["Xy_X_age"] = pad["Xy_X"][["Age"]]
    assert_error(call(pad, ctx, convert, {"df": "Xy_X_age"}, {"target_column": "Transported", "is_train": False},
                      output="X_test"), "'df' holds 3 training rows")
    # a tool that builds its frame anew (get_dummies drops pandas' attrs) still returns train rows
    assert call(pad, ctx, "one_hot_encode", {"df": "Xy_X"}, {"columns": ["HomePlanet"]}, output="X_oh").ok
    assert "HomePlanet" not in pad["X_oh"].columns
    assert_error(call(pad, ctx, convert, {"df": "X_oh"}, {"target_column": "Transported", "is_train": False},
                      output="X_test"), "'df' holds 3 training rows")
    # a switch of the wrong type is named first (the part it would select is not guessed)
    assert_error(call(pad, ctx, convert, {"df": "parts_test"}, {"target_column": "Transported", "is_train": "false"},
                      output="X_test"), "'is_train' must be true or false")
    # a join of several inputs is left to pandas: equal lengths are no evidence of the same rows
    pad["keys"] = pd.DataFrame({"Age": [20.0, 40.0, 99.0], "Deck": ["A", "B", "C"]})
    assert call(pad, ctx, "join_dataframes", {"left_df": "Xy_X", "right_df": "keys"},
                {"left_on": "Age", "how": "right"}, output="joined").ok
    assert call(pad, ctx, convert, {"df": "joined"}, {"target_column": "Transported", "is_train": False},
                output="X_joined").ok
    # the test part's target is a placeholder: not a training target
    assert_error(call(pad, ctx, convert, {"df": "parts_test"}, {"target_column": "Transported"}, output="t"),
                 "'df' holds 2 test rows (test.csv's rows, e.g. the test part")
    pad["no_test_rows"] = pad["parts_test"].iloc[:0]
    assert_error(call(pad, ctx, convert, {"df": "no_test_rows"}, {"target_column": "Transported"}, output="t"),
                 "'df' is an empty frame taken from test rows (test.csv's rows")
    result = call(pad, ctx, convert, {"df": "parts_test"}, {"target_column": "Transported", "is_train": False},
                  output="X_test")
    assert result.ok, result.message
    assert pad["X_test"]["PassengerId"].tolist() == ["d", "e"] and "Transported" not in pad["X_test"].columns
    # the combined frame holds train rows too
    assert_error(call(pad, ctx, convert, {"df": "combined"}, {"target_column": "Transported", "is_train": False},
                      output="X_test"), "'df' holds 3 training rows ('_is_train' == 1)")
    # rows of both parts carry no mark: nothing is refused on a guess
    pad["mixed"] = pd.concat([pad["parts_train"], pad["parts_test"]], ignore_index=True)
    assert call(pad, ctx, convert, {"df": "mixed"}, {"target_column": "Transported", "is_train": False},
                output="X_mixed").ok
    # features converted again, or test.csv's frame without the target: returned as they are, and said so
    result = call(pad, ctx, convert, {"df": "X_test"}, {"target_column": "Transported", "is_train": False},
                  output="X_again")
    assert result.ok and "df has no column 'Transported': returned without change" in result.message
    pd.testing.assert_frame_equal(pad["X_again"], pad["X_test"])


def test_convert_to_dataframe(pad, ctx):
    pad["arr"] = np.array([[1, 2], [3, 4]])
    assert call(pad, ctx, "convert_to_dataframe", {"data": "arr"}, {"columns": ["p", "q"]}, output="f").ok
    assert list(pad["f"].columns) == ["p", "q"] and pad["f"]["q"].tolist() == [2, 4]
    assert_error(call(pad, ctx, "convert_to_dataframe", {"data": "arr"}, {"columns": ["only_one"]}, output="g"),
                 "columns lists 1")


def test_concatenate_dataframes(pad, ctx):
    pad["more"] = pad["train"].iloc[:2]
    assert call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "more"}, output="both").ok
    assert len(pad["both"]) == 5
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "test"}, {"axis": 1}, output="x"),
                 "same number of rows")


def test_concatenate_dataframes_refuses_one_frame_given_twice(pad, ctx):
    # seen in a LATS trial that never read test.csv: it stacked train on itself, and stage 1 never moved
    for axis in (0, 1):
        result = call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "train"}, {"axis": axis}, output="x")
        assert_error(result, "df1 and df2 are the same data")
        assert "test.csv" in result.message and "concatenate_train_test" in result.message
    pad["again"] = pad["train"].copy()          # the same file read twice is the same data too
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "again"}, output="y"), "same data")
    assert "x" not in pad and "y" not in pad
    # the test frame on itself: no advice to read the file it came from
    mark_rows(pad["test"], "test")
    result = call(pad, ctx, "concatenate_dataframes", {"df1": "test", "df2": "test"}, output="z")
    assert_error(result, "only repeats its rows")
    assert "read_data" not in result.message
    # two empty frames are not the mistake this refuses
    pad["none"] = pd.DataFrame()
    assert call(pad, ctx, "concatenate_dataframes", {"df1": "none", "df2": "none"}, output="e").ok


def test_concatenate_dataframes_refuses_stacking_a_frame_on_a_grown_copy_of_itself(pad, ctx):
    """Seen in a real-LLM ReAct trial on forest-cover-type: train stacked on train, then train on that. The
    second stack is not the same data, but the same rows; a subset stacked on its frame (oversampling), or
    label columns sharing their few values, are not refused."""
    pad["grown"] = pd.concat([pad["train"], pad["train"]], ignore_index=True)
    for df1, df2 in (("train", "grown"), ("grown", "train")):
        result = call(pad, ctx, "concatenate_dataframes", {"df1": df1, "df2": df2}, output="x")
        assert_error(result, "hold the same 3 distinct rows: stacking them only repeats those rows")
        assert "test.csv" in result.message and "concatenate_train_test" in result.message
    pad["shuffled"] = pad["train"].iloc[[2, 0, 1, 0]][["Transported", "PassengerId", "HomePlanet", "Age"]]
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "shuffled"}, output="x"),
                 "same 3 distinct rows")
    assert "x" not in pad
    # oversampling: a subset of train stacked on train
    pad["minority"] = pad["train"][~pad["train"]["Transported"]]
    assert call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "minority"}, output="over").ok
    assert len(pad["over"]) == 4
    # a frame that repeats a row of its own is still caught, and so are columns named by number
    pad["feat"] = pd.concat([pad["train"], pad["train"].iloc[[0]]], ignore_index=True)
    pad["feat2"] = pd.concat([pad["feat"], pad["feat"]], ignore_index=True)
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "feat", "df2": "feat2"}, output="x"),
                 "same 3 distinct rows")
    pad["array"] = pd.DataFrame(np.arange(12).reshape(6, 2))   # convert_to_dataframe's columns: 0, 1
    pad["array2"] = pd.concat([pad["array"], pad["array"]], ignore_index=True)
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "array", "df2": "array2"}, output="x"),
                 "same 6 distinct rows")
    # large integer ids stay distinct: two chunks with no id in common are not the same rows
    i = np.arange(100)
    pad["chunk1"] = pd.DataFrame({"id": 2**55 + 8 * i + 1, "y": i % 2})
    pad["chunk2"] = pd.DataFrame({"id": 2**55 + 8 * i + 2, "y": i % 2})
    assert call(pad, ctx, "concatenate_dataframes", {"df1": "chunk1", "df2": "chunk2"}, output="chunks").ok
    # label frames, whose rows repeat by nature, are not records: one row per class on a longer frame, NaNs
    for short, long in (([0, 1], [1, 0, 0, 1, 1]), ([True, False, True], [False, True, False]),
                        ([None], [None, None])):
        pad["y1"], pad["y2"] = pd.DataFrame({"y": short}), pd.DataFrame({"y": long})
        assert call(pad, ctx, "concatenate_dataframes", {"df1": "y1", "df2": "y2"}, output="ys").ok
    # nor are two low-cardinality columns, mostly repeats
    pad["low"] = pd.DataFrame({"a": [1, 2, 1, 2], "b": ["x", "y", "x", "y"]})
    pad["low2"] = pd.DataFrame({"a": [2, 1], "b": ["y", "x"]}).iloc[[0, 1, 0, 1, 0]]
    assert call(pad, ctx, "concatenate_dataframes", {"df1": "low", "df2": "low2"}, output="lows").ok
    # the same rows side by side are columns, not repeated rows: the shared-column rule answers
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "shuffled"}, {"axis": 1},
                      output="x"), "same number of rows")


def test_concatenate_dataframes_sends_train_and_test_rows_to_concatenate_train_test(pad, ctx):
    """Stacked without the tracking column, the parts can never be split again (a real-LLM ReAct trial did it,
    then passed the result to concatenate_train_test as its train frame)."""
    mark_rows(pad["train"], "train")
    mark_rows(pad["test"], "test")
    for df1, df2, wanted in (("train", "test", "train_df=<df1>, test_df=<df2>"),
                             ("test", "train", "train_df=<df2>, test_df=<df1>")):
        result = call(pad, ctx, "concatenate_dataframes", {"df1": df1, "df2": df2}, output="x")
        assert_error(result, f"combine them with concatenate_train_test({wanted})")
    assert "x" not in pad
    # two frames of train rows (oversampling) still stack
    pad["few"] = pad["train"].iloc[:1]
    assert call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "few"}, output="more").ok
    # side by side, a train frame and a test frame of one length would pair unrelated rows
    pad["three"] = pd.concat([pad["test"], pad["test"].iloc[:1]], ignore_index=True).rename(columns=str.lower)
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "train", "df2": "three"}, {"axis": 1},
                      output="x"), "df1 holds train rows and df2 test rows: axis=1 pairs rows by position")
    # an unmarked frame beside a marked one keeps the mark, so the mix cannot be built in two steps
    pad["extra"] = pd.DataFrame({"Spa": [1.0, 2.0]})
    assert call(pad, ctx, "concatenate_dataframes", {"df1": "test", "df2": "extra"}, {"axis": 1}, output="wide").ok
    assert rows_held(pad["wide"]) == {"test": 2}
    pad["wide_train"] = pad["train"].iloc[:2].drop(columns="Transported").assign(Spa=[3.0, 4.0])
    mark_rows(pad["wide_train"], "train")
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "wide_train", "df2": "wide"}, output="x"),
                 "concatenate_train_test(train_df=<df1>, test_df=<df2>)")
    # nor by a join: an outer join would stack them with nothing to tell them apart
    result = call(pad, ctx, "join_dataframes", {"left_df": "train", "right_df": "test"},
                  {"left_on": "PassengerId", "how": "outer"}, output="x")
    assert_error(result, "left_df holds train rows and right_df test rows, which a join cannot combine: use "
                         "concatenate_train_test(train_df=<left_df>, test_df=<right_df>)")
    assert "x" not in pad


def test_concatenate_dataframes_names_repeated_columns_it_cannot_stack(pad, ctx):
    pad["twice"] = pd.DataFrame([[1, 2]], columns=["Age", "Age"])
    pad["once"] = pd.DataFrame({"Age": [3], "Spa": [4]})
    assert_error(call(pad, ctx, "concatenate_dataframes", {"df1": "once", "df2": "twice"}, output="x"),
                 "column names must be unique; repeated: ['Age']")


def test_join_dataframes(pad, ctx):
    result = call(pad, ctx, "join_dataframes", {"left_df": "train", "right_df": "stores"},
                  {"left_on": "HomePlanet", "how": "left"}, output="joined")
    assert result.ok, result.message
    assert pad["joined"]["Gravity"].tolist() == [1.0, 0.38, 1.0]
    assert_error(call(pad, ctx, "join_dataframes", {"left_df": "train", "right_df": "stores"},
                      {"left_on": "Homeplanet"}, output="j"), "did you mean 'HomePlanet'")


def test_summaries(pad, ctx):
    result = call(pad, ctx, "get_dataframe_summary", {"df": "train"})
    assert result.ok and "3 rows x 4 columns" in result.message and "Age | float64 | 1" in result.message
    result = call(pad, ctx, "get_dataframe_dtypes_summary", {"df": "train"})
    assert result.ok and "float64 (1): Age" in result.message and "HomePlanet" in result.message
    pad["not_a_frame"] = [1, 2]
    assert_error(call(pad, ctx, "get_dataframe_summary", {"df": "not_a_frame"}), "must be a DataFrame")
    assert_error(call(pad, ctx, "get_dataframe_dtypes_summary", {"df": "missing_name"}), "no object named")


def test_override_in_child_leaves_parent_and_sibling(pad, ctx):
    left, right = pad.child(), pad.child()
    assert call(left, ctx, "join_dataframes", {"left_df": "train", "right_df": "stores"},
                {"left_on": "HomePlanet"}, output="train").ok
    assert "Gravity" in left["train"].columns
    assert "Gravity" not in pad["train"].columns and "Gravity" not in right["train"].columns


def test_stage_tags():
    assert "loading" in REGISTRY.get("read_data").roles
    assert {"loading", "modeling"} <= set(REGISTRY.get("convert_dataframe_to_features_target").roles)
    assert {"loading", "cleaning", "features"} <= set(REGISTRY.get("get_dataframe_summary").roles)


# ------------------------------------------------------------ sandbox corpus
@pytest.fixture
def outside(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    return secret


def _traversal_cases(ctx, outside):
    link = ctx.sandbox / "link.csv"
    link.symlink_to(outside)
    link_dir = ctx.sandbox / "linkdir"
    link_dir.symlink_to(outside.parent)
    return [
        "../../etc/passwd", "../secret.txt", "sub/../../secret.txt", "/etc/passwd", str(outside),
        "~/.ssh/id_rsa", "~root/.bashrc", "file:///etc/passwd", "http://example.com/train.csv",
        "s3://bucket/train.csv", "train.csv\x00.txt", "", "link.csv", "linkdir/secret.txt",
        "/proc/self/environ", str(ctx.sandbox) + "/../secret.txt",
    ]


def test_resolve_read_rejects_traversal_corpus(ctx, outside):
    cases = _traversal_cases(ctx, outside)
    assert len(cases) >= 15
    for case in cases:
        with pytest.raises(ToolInputError) as info:
            resolve_read(ctx, case)
        message = str(info.value)
        # Names what is allowed, without the sandbox's location (only a path the model wrote is echoed).
        assert "files may be read from the sandbox or the task's data directory" in message, (case, message)
        assert str(ctx.sandbox) not in message.replace(repr(case.strip()), ""), (case, message)


def test_resolve_write_rejects_traversal_corpus(ctx, outside):
    for case in _traversal_cases(ctx, outside) + [str(ctx.data_dir / "train.csv"), "."]:
        with pytest.raises(ToolInputError):
            resolve_write(ctx, case)
    assert outside.read_text() == "top secret"


def test_resolve_read_and_write_inside(ctx):
    target = resolve_write(ctx, "out/preds.csv")
    assert target == ctx.sandbox / "out" / "preds.csv" and target.parent.is_dir()
    target.write_text("a\n1\n")
    assert resolve_read(ctx, "out/preds.csv") == target
    assert resolve_read(ctx, "./train.csv") == ctx.data_dir / "train.csv"
    assert resolve_read(ctx, os.fspath(ctx.data_dir / "train.csv")) == ctx.data_dir / "train.csv"
