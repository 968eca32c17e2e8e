"""Imported by a test and, through the worker's tool-module hook, by the trial's tool worker: breaks the
majority vote of the ensemble tool there, where tools run. It defines one (unused) tool so that the trial
sends this module to its worker (the worker imports every module outside mltb_core that defines a tool)."""
from __future__ import annotations

from mltb_core.toolkit.registry import ToolInputError, make_set_tool
from mltb_core.toolkit.tools import evaluation

ORIGINAL_VOTE = evaluation._vote


def broken(columns):
    raise ToolInputError("vote broken for this test")


evaluation._vote = broken


@make_set_tool(roles=("modeling",))
def broken_vote_marker() -> int:
    """Unused: makes the worker import this module."""
    return 0
