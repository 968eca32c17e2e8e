"""Path-local scratchpad semantics: nearest wins, writes stay local, siblings are isolated, nothing is copied."""
import pandas as pd
import pytest

import re

from mltb_core.stages.rewards import Progress
from mltb_core.stages.workspace import StepFacts, UntrustedReply
from mltb_core.toolkit.constraints import OBJECT_NAME
from mltb_core.toolkit.registry import ToolContext, execute, make_get_and_set_tool, make_override_tool, ToolRegistry
from mltb_core.toolkit.scratchpad import (MAX_OBJECT_NAME_CHARS, MissingObjectError, ObjectNameError, Scratchpad,
                                          is_object_name)

GOOD_NAMES = ["df", "_x", "X_train2", "a" * MAX_OBJECT_NAME_CHARS]
BAD_NAMES = ["", "  ", "train df", "2nd", "x-y", "a.b", "ünï", "df\n", "a" * (MAX_OBJECT_NAME_CHARS + 1), 3, None]


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


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_a_name_outside_the_rule_is_refused_on_every_write(name):
    with pytest.raises(ObjectNameError, match="invalid object name"):
        Scratchpad().set(name, 1)
    with pytest.raises(ObjectNameError):
        Scratchpad(objects={name: 1})


def test_the_grammar_of_constrained_models_is_the_scratchpads_rule():
    grammar = re.compile(re.sub(r"\$$", r"\\Z", OBJECT_NAME["pattern"]))   # JSON schema's '$' is Python's \Z
    for name in GOOD_NAMES:
        assert is_object_name(name) and grammar.search(name)
    for name in BAD_NAMES[:-3]:   # the grammar leaves length to the scratchpad; non-strings cannot be in JSON text
        assert not is_object_name(name) and not grammar.search(name)


def test_a_bad_output_name_is_a_failed_call_before_the_tool_runs(tmp_path):
    registry, ran = ToolRegistry(), []

    @make_get_and_set_tool(roles=("cleaning",), registry=registry, output_parts=("train", "test"))
    def split(df: pd.DataFrame) -> tuple:
        """Split a frame in two."""
        ran.append(1)
        return df.iloc[:1], df.iloc[1:]

    pad = Scratchpad(objects={"df": pd.DataFrame({"x": [1, 2]})})
    for output in ("my frame", ["ok", "not ok"], "a" * (MAX_OBJECT_NAME_CHARS - 2)):   # the last: 'a..a_train' too long
        result = execute({"tool_name": "split", "tool_args": {"bindings": {"df": "df"}, "output": output}},
                         pad, ToolContext(sandbox=tmp_path), registry)
        assert not result.ok and "invalid object name" in result.message and "ObjectNameError" not in result.message
    assert ran == [] and pad.names() == ["df"]


def test_the_parent_refuses_a_worker_reply_naming_an_object_outside_the_rule():
    reply = {"ok": True, "message": "", "written": ["train"], "submission": None, "submission_check": [False, ""],
             "progress": {"stage": 0, "reward": 0.0, "cv_quality": None, "feedback": "", "newly_passed": [],
                          "predicted": False},
             "cv_scores": {}, "seconds": 0.1}
    assert StepFacts.from_json(reply, Progress()).written == ["train"]
    with pytest.raises(UntrustedReply, match="not an object name"):
        StepFacts.from_json({**reply, "written": ["train; rm -rf"]}, Progress())
    # 'predicted' (it reorders the next request's tool note) is a bool, and true only with stage 10 pending
    for predicted, stage in ((1, 0), ("yes", 0), (None, 0), (True, 0), (True, 10)):
        progress = {**reply["progress"], "predicted": predicted, "stage": stage,
                    "newly_passed": list(range(1, stage + 1)), "reward": float(stage)}
        with pytest.raises(UntrustedReply, match="progress.predicted"):
            StepFacts.from_json({**reply, "progress": progress}, Progress())
    at_nine = {**reply["progress"], "predicted": True, "stage": 9, "newly_passed": [], "reward": 9.0}
    facts = StepFacts.from_json({**reply, "progress": at_nine}, Progress(stage=9))
    assert facts.progress.predicted
    assert StepFacts.from_json(facts.to_json(), Progress(stage=9)).progress == facts.progress   # the round trip


def test_override_tool_in_one_branch_leaves_the_shared_frame_untouched(tmp_path):
    registry = ToolRegistry()

    @make_override_tool(roles=("cleaning",), registry=registry)
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
