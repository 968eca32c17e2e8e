"""Descriptions that several tools' docstrings share, written once.

A tool's docstring names one by ``$key`` on a line of its own, and ``@shared_doc()`` fills it in (see
``registry.doc_from``): the model reads the same words in every tool that takes the parameter. What the
model reads about the tools is pinned by tests/test_tool_texts_pinned.py.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mltb_core.toolkit.registry import doc_from

__all__ = ["PARTS", "shared_doc"]

RETURNS_FRAME = "Returns\n-------\npd.DataFrame"

PARTS = {
    # the frame a tool works on, by what the tool does with it
    "df_to_clean": "df\n    The DataFrame to clean.",
    "df_to_change": "df\n    The DataFrame to change.",
    "frame_to_extend": "df\n    The frame to extend.",
    "frame_to_extend_in_order": "df\n    The frame to extend (sort it first if order matters).",
    "frame_to_inspect": "df\n    The frame to inspect.",
    "frame_to_encode": "df\n    The frame to encode.",
    "frame_to_rescale": "df\n    The frame to rescale.",
    # other parameters
    "new_column": "name\n    Name of the new column.",
    "new_or_replaced_column": "name\n    Name of the new (or replaced) column.",
    "column_to_fill": "target_column\n    The column to fill.",
    "numeric_columns_to_fill": "columns\n"
                               "    Numeric column(s) to fill; default: every numeric column.",
    "columns_to_encode": "columns\n"
                         "    Columns to encode; default: every object/string/category column.",
    "group_aggregate": "group_column\n    Column(s) defining the groups.\n"
                       "agg_column\n    Column to aggregate.\n"
                       "agg_func",
    # Returns sections: the header of a tool that returns a frame (its description follows, indented), and
    # whole sections several tools share
    "returns_frame": RETURNS_FRAME,
    # the whole Parameters and Returns sections of a tool that reports on a frame (report described below it)
    "inspect_df_returns_text": "Parameters\n----------\ndf\n    The DataFrame to inspect.\n\n"
                               "Returns\n-------\nstr",
    "returns_filled": RETURNS_FRAME + "\n    A copy with the matching missing values filled.",
    "returns_cast": RETURNS_FRAME + "\n    A copy with the columns cast.",
    "returns_new_column": RETURNS_FRAME + "\n    A copy of ``df`` with the new column.",
    "returns_rescaled": RETURNS_FRAME + "\n    A copy of ``df`` with rescaled float columns.",
}


def shared_doc(template: str | None = None, **fields: Any) -> Callable[[Callable], Callable]:
    """``registry.doc_from`` with the :data:`PARTS` as fields (None: the function's own docstring)."""
    return doc_from(template, **PARTS, **fields)
