"""Tool input checks have one home (mltb_core/toolkit/validation.py): no tool module keeps its own frame or
column check, suggestion cutoff or tracking column, and every tool words a bad column the same way."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mltb_core
import mltb_core.toolkit.tools  # noqa: F401  (registers the tools)
from mltb_core.toolkit import validation
from mltb_core.toolkit.registry import ToolInputError
from mltb_core.toolkit.scratchpad import Scratchpad
from mltb_core.toolkit.validation import (MAX_LISTED_COLUMNS, close_matches, require_columns,
                                          require_frame, require_name)
from tool_calls import call_tool, failed

CORE = Path(mltb_core.__file__).parent
TOOL_MODULES = sorted((CORE / "toolkit" / "tools").glob("*.py"))
CHECK_NAMES = {"require_frame", "require_columns", "require_name", "as_column_list", "missing_columns_message",
               "close_matches", "as_target", "as_features", "is_numeric", "numeric_columns",
               # the names these checks had when tool modules kept their own copies
               "check_choice", "check_positive_int", "check_lengths", "ensure_csv"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _defined_names(tree: ast.Module) -> set[str]:
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_the_tool_modules_exist():
    assert {p.stem for p in TOOL_MODULES} >= {"loading", "cleaning", "features", "modeling", "evaluation"}


@pytest.mark.parametrize("path", [p for p in TOOL_MODULES if p.stem != "__init__"], ids=lambda p: p.stem)
def test_no_tool_module_defines_its_own_checks(path):
    tree = _tree(path)
    own = {name for name in _defined_names(tree)
           if name.lstrip("_") in CHECK_NAMES or name == "TRACKING_COLUMN" or name.lstrip("_").startswith("require_")
           or name.lstrip("_") in {"as_list", "missing_columns_message"}}
    assert not own, f"{path.name} defines {sorted(own)}; use mltb_core.toolkit.validation"
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "difflib" not in imported, f"{path.name} makes its own suggestions; use validation.close_matches"


@pytest.mark.parametrize("path", [p for p in TOOL_MODULES if p.stem != "__init__"], ids=lambda p: p.stem)
def test_every_tool_module_uses_validation(path):
    sources = {node.module for node in ast.walk(_tree(path)) if isinstance(node, ast.ImportFrom)}
    assert "mltb_core.toolkit.validation" in sources, f"{path.name} does not check its inputs through validation"


def test_the_tracking_column_is_defined_once_in_the_library():
    homes = [str(p.relative_to(CORE)) for p in CORE.rglob("*.py") if "TRACKING_COLUMN" in _defined_names(_tree(p))]
    assert homes == ["toolkit/validation.py"]


# ------------------------------------------------------------------ the messages
@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame({"Age": [1.0, np.nan], "HomePlanet": ["a", "b"], "Transported": [True, False]})


def test_column_errors_name_the_parameter_suggest_and_list(frame):
    with pytest.raises(ToolInputError) as caught:
        require_columns(frame, ["homeplanet", "Zzz"], "source_column")
    assert str(caught.value) == ("unknown column(s) in 'source_column': 'homeplanet' (did you mean 'HomePlanet'?); "
                                 "'Zzz'. Available columns: Age, HomePlanet, Transported")


def test_wide_frames_list_a_bounded_number_of_columns():
    wide = pd.DataFrame({f"c{i}": [0] for i in range(MAX_LISTED_COLUMNS + 5)})
    with pytest.raises(ToolInputError, match=r"c39 \.\.\.$"):
        require_columns(wide, "nope")


def test_frame_name_and_list_checks():
    with pytest.raises(ToolInputError, match=r"^'X_train' must be a DataFrame, got ndarray with shape \(2,\)$"):
        require_frame(np.zeros(2), "X_train")
    with pytest.raises(ToolInputError, match="'name' must be a non-empty column name"):
        require_name("  ")
    with pytest.raises(ToolInputError, match="'columns' must be a column name or a list of column names"):
        require_columns(pd.DataFrame({"a": [1]}), {"a": 1})
    assert close_matches("agee", ["Age", "Spa"]) == ["Age"] and close_matches("xyz", ["Age"]) == []


# One bad column, three tool modules: the same words each time (they once disagreed on cutoff and wording).
CALLS = [
    ("fillna_with_median", {"columns": ["Agee"]}, "columns"),                 # cleaning
    ("drop_feature", {"column": "Agee"}, "column"),                           # features
    ("convert_dataframe_to_features_target", {"target_column": "Agee", "is_train": True}, "target_column"),  # loading
    ("fillna_with_value", {"columns": ["Agee"], "value": 0}, "columns"),
]


@pytest.mark.parametrize("tool, kwargs, param", CALLS, ids=[c[0] for c in CALLS])
def test_every_tool_words_a_bad_column_alike(ctx, frame, tool, kwargs, param):
    result = call_tool(Scratchpad(objects={"df": frame}), ctx, tool, {"df": "df"}, kwargs, "out")
    failed(result, f"unknown column(s) in '{param}': 'Agee' (did you mean 'Age'?). Available columns: Age,")



@pytest.mark.parametrize("tool, kwargs", [("fillna_with_mode", {"columns": ["HomePlanet", "Age", "HomePlanet", "Age"]}),
                                          ("fillna_with_median", {"columns": ["Age", "Age"]})])
def test_a_column_listed_twice_is_named_not_a_type_error(ctx, frame, tool, kwargs):
    """A model wrote fillna_with_mode(columns=[..., 'Destination', ..., 'Destination']): pandas then hands the
    tool a frame for that name and the model read "TypeError: int() argument must be ... not 'Series'"."""
    result = call_tool(Scratchpad(objects={"df": frame}), ctx, tool, {"df": "df"}, kwargs, "out")
    listed = "'HomePlanet', 'Age'" if tool == "fillna_with_mode" else "'Age'"
    failed(result, f"'columns' names {listed} more than once: list each column once")

def test_validation_is_the_module_the_tools_import():
    from mltb_core.toolkit.tools import cleaning, evaluation, features, loading, modeling

    for module in (cleaning, evaluation, features, loading):
        assert module.require_frame is validation.require_frame
    assert modeling.as_target is evaluation.as_target is validation.as_target


def test_one_target_check_for_fitting_and_evaluating():
    frame = pd.DataFrame({"y": [1.0, 2.0, 3.0]})
    assert validation.as_target(frame, 3).tolist() == [1.0, 2.0, 3.0]          # a one-column frame is its column
    assert validation.as_target([1, 2, 3], 3, "y_test", "X_test").tolist() == [1, 2, 3]
    for y, rows, words in ((frame.assign(z=1), 3, "has 2 columns"), (frame, 4, "X_test has 4 rows but y_test has 3"),
                           (frame["y"].where(frame["y"] > 1), 3, r"contains 1 missing value\(s\)"),
                           (np.ones((3, 2)), 3, "must be a Series of target values")):
        with pytest.raises(ToolInputError, match=words):
            validation.as_target(y, rows, "y_test", "X_test")


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2", None])
def test_a_count_is_a_positive_integer(value):
    with pytest.raises(ToolInputError, match="'lag' must be a positive integer"):
        validation.require_positive_int(value, "lag")
    assert validation.require_positive_int(np.int64(3), "lag") == 3


def test_numeric_columns_leave_out_bools_and_the_tracking_column():
    df = pd.DataFrame({"a": [1.0], "flag": [True], "text": ["x"], validation.TRACKING_COLUMN: [1]})
    assert validation.numeric_columns(df) == ["a"]
    with pytest.raises(ToolInputError, match=r"needs numeric columns; text \(\w+\) are not numeric \(a hint\)"):
        validation.require_numeric_columns(df, ["a", "text"], "some_tool", "a hint")
