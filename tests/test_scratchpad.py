"""Path-local scratchpad semantics: nearest wins, writes stay local, siblings are isolated, nothing is copied."""
import pandas as pd
import pytest

from mltb_core.toolkit.registry import ToolContext, execute, make_override_tool, ToolRegistry
from mltb_core.toolkit.scratchpad import MissingObjectError, Scratchpad


def test_reads_resolve_along_the_path_nearest_first():
    root = Scratchpad(objects={"a": 1, "b": 2})
    child = root.child()
    child.set("a", 10)
    grandchild = child.child()
    assert grandchild.get("a") == 10 and grandchild.get("b") == 2
    assert root.get("a") == 1
    assert grandchild.names() == ["a", "b"] and grandchild.depth == 2


def test_writes_go_to_the_node_and_siblings_never_see_them():
    root = Scratchpad(objects={"df": "original"})
    left, right = root.child(), root.child()
    left.set("df", "overridden")
    left.set("only_left", 1)
    assert right.get("df") == "original"
    assert "only_left" not in right and "only_left" in left
    assert left.local_names == ["df", "only_left"] and right.local_names == []


def test_missing_object_error_lists_what_is_available():
    pad = Scratchpad(objects={"train": 1, "test": 2})
    with pytest.raises(MissingObjectError) as err:
        pad.get("trian")
    assert "trian" in str(err.value) and "train, test" in str(err.value)


def test_names_must_be_non_empty_strings():
    with pytest.raises(ValueError):
        Scratchpad().set("  ", 1)


def test_override_tool_in_one_branch_leaves_the_shared_frame_untouched(tmp_path):
    registry = ToolRegistry()

    @make_override_tool(stages=("cleaning",), registry=registry)
    def add_one(df: pd.DataFrame, column: str) -> pd.DataFrame:
        """Add one to a column."""
        out = df.copy()
        out[column] = out[column] + 1
        return out

    frame = pd.DataFrame({"x": [1, 2, 3]})
    root = Scratchpad(objects={"df": frame})
    left, right = root.child(), root.child()
    result = execute({"tool_name": "add_one", "tool_args": {"bindings": {"df": "df"}, "func_kwargs": {"column": "x"}}},
                     left, ToolContext(sandbox=tmp_path), registry)
    assert result.ok, result.message
    assert left.get("df")["x"].tolist() == [2, 3, 4]
    assert right.get("df")["x"].tolist() == [1, 2, 3]
    # the sibling reads the very same object, not a copy (no per-node copies)
    assert right.get("df") is frame and root.get("df") is frame
