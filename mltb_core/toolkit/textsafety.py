"""Text and JSON that came from the model (or from code running what it asked for), made safe to carry.

Everything the model writes, and every message a tool produces from it, ends up in an LLM request, the
response cache's key, a trajectory line or a report. Three things must never happen on the way: a lone
surrogate that no UTF-8 encoder accepts (a ``UnicodeEncodeError`` far from its cause), a message so large
that the next request overflows the context window, and JSON nested deep enough to exhaust the stack.
These helpers are applied where such text enters the trusted side.
"""
from __future__ import annotations

from typing import Any

from mltb_core.bench.documents import JSONShapeError, clean_strings, encodable

__all__ = ["encodable", "cap_text", "clean_strings", "check_json_value", "MAX_JSON_DEPTH", "MAX_JSON_CHARS",
           "JSONShapeError"]

# the bounds of a tool call's JSON, passed to the one bounded parser (mltb_core.bench.documents.loads_bounded)
MAX_JSON_DEPTH = 32          # a tool call's arguments are two or three levels deep
MAX_JSON_CHARS = 100_000     # one tool call's arguments as text


def cap_text(text: str, limit: int) -> str:
    """Encodable ``text`` of at most about ``limit`` characters; a cut says how much was left out."""
    text = encodable(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... [cut: {len(text) - limit} more characters]"


def check_json_value(value: Any, max_depth: int = MAX_JSON_DEPTH, max_items: int = 100_000) -> None:
    """Refuse a parsed value nested deeper than ``max_depth`` or with more than ``max_items`` parts
    (an iterative walk: no recursion)."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        item, level = stack.pop()
        seen += 1
        if seen > max_items:
            raise JSONShapeError(f"the value has more than {max_items:,} parts")
        if isinstance(item, (list, tuple, dict)):
            if level > max_depth:
                raise JSONShapeError(f"the value is nested more than {max_depth} levels deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
