"""Named-object memory that tools read and write by name.

The model never sees data, only names: a tool call binds parameter names to
object names (``bindings``) and stores its result under ``output``.

For tree search every node owns a :class:`Scratchpad` holding only what its
own tool call produced; reads walk the root→node chain (nearest wins), writes
land in the node itself. Siblings therefore never see each other's writes, and
an *override* in one branch shadows the name for that branch only. Nothing is
copied per node: objects are shared by reference, which is safe because tools
never mutate their inputs (pandas copy-on-write makes derived frames cheap).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["Scratchpad", "MissingObjectError", "ObjectNameError", "OBJECT_NAME_PATTERN", "MAX_OBJECT_NAME_CHARS",
           "is_object_name", "check_object_name", "MAX_LISTED_COLUMNS"]

# Columns named in any listing the model reads (a description, an error, a dtype summary) before "...":
# wide frames (santander: 4,991 columns) would flood the prompt. Here, the lowest toolkit module, so the
# scratchpad's descriptions and validation's errors share it.
MAX_LISTED_COLUMNS = 40

# The one rule for a scratchpad name, whatever the backend: an identifier of bounded length. The call grammar
# (params.OBJECT_NAME) holds names to the same pattern and bound: a bounded repeat grows the grammar with the
# bound (64 keeps a whole call's grammar in hundreds of kB), and an unbounded one lets a tiny model ramble
# inside a name until the reply's token limit.
OBJECT_NAME_PATTERN = "[A-Za-z_][A-Za-z0-9_]*"
MAX_OBJECT_NAME_CHARS = 64
_OBJECT_NAME = re.compile(OBJECT_NAME_PATTERN)


class ObjectNameError(ValueError):
    """A name the model chose for a scratchpad object breaks the rule (the call fails, the trial goes on)."""


def is_object_name(name: Any) -> bool:
    return type(name) is str and len(name) <= MAX_OBJECT_NAME_CHARS and _OBJECT_NAME.fullmatch(name) is not None


def check_object_name(name: Any) -> str:
    """``name`` when it is a valid object name; else an error saying what a name must be."""
    if not is_object_name(name):
        shown = repr(name)[:60] + ("..." if len(repr(name)) > 60 else "") if isinstance(name, str) else type(name).__name__
        raise ObjectNameError(f"invalid object name {shown}: a name is a letter or underscore followed by letters, "
                              f"digits or underscores, at most {MAX_OBJECT_NAME_CHARS} characters (e.g. train_df)")
    return name


class MissingObjectError(KeyError):
    """A binding names an object that is not on the scratchpad."""

    def __init__(self, name: str, available: list[str]):
        self.name = name
        self.available = available
        shown = ", ".join(available[:30]) or "(scratchpad is empty)"
        super().__init__(f"no object named {name!r} on the scratchpad; available: {shown}")

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return self.args[0]


class Scratchpad:
    """A path-local scratchpad: own objects plus read access to its ancestors."""

    __slots__ = ("_local", "parent", "depth")

    def __init__(self, parent: Scratchpad | None = None, objects: dict[str, Any] | None = None):
        self._local: dict[str, Any] = {}
        for name, value in (objects or {}).items():
            self.set(name, value)
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1

    # -- reads resolve along the path, nearest first ---------------------------------
    def get(self, name: str) -> Any:
        for pad in self._chain():
            if name in pad._local:
                return pad._local[name]
        raise MissingObjectError(name, self.names())

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return any(name in pad._local for pad in self._chain())

    def names(self) -> list[str]:
        """Every visible name, in first-written order along the path."""
        seen: dict[str, None] = {}
        for pad in reversed(list(self._chain())):
            for name in pad._local:
                seen.setdefault(name, None)
        return list(seen)

    def items(self) -> Iterator[tuple[str, Any]]:
        for name in self.names():
            yield name, self.get(name)

    def __len__(self) -> int:
        return len(self.names())

    # -- writes stay local ----------------------------------------------------------
    def set(self, name: str, value: Any) -> None:
        self._local[check_object_name(name)] = value

    def __setitem__(self, name: str, value: Any) -> None:
        self.set(name, value)

    @property
    def local_names(self) -> list[str]:
        """What this node's own tool call wrote."""
        return list(self._local)

    def child(self) -> Scratchpad:
        """A fresh node below this one: sees everything here, writes only to itself."""
        return Scratchpad(parent=self)

    def _chain(self) -> Iterator[Scratchpad]:
        pad: Scratchpad | None = self
        while pad is not None:
            yield pad
            pad = pad.parent

    def describe(self) -> str:
        """One line per visible object, the way the model is shown its memory."""
        return "\n".join(f"- {name}: {describe_object(obj)}" for name, obj in self.items())


def describe_object(obj: Any) -> str:
    """A short, data-free description of an object (type and shape)."""
    shape = getattr(obj, "shape", None)
    kind = type(obj).__name__
    if shape is not None:
        return f"{kind} shape={tuple(shape)}"
    if isinstance(obj, (list, tuple, dict, set)):
        return f"{kind} len={len(obj)}"
    if isinstance(obj, (int, float, bool, str)) and len(repr(obj)) <= 60:
        return f"{kind} {obj!r}"
    return kind


def describe_columns(obj: Any, limit: int = MAX_LISTED_COLUMNS) -> str:
    """Column names and dtypes of a frame (capped), e.g. ``columns=[Age:float64, Cabin:str]``."""
    columns = getattr(obj, "columns", None)
    dtypes = getattr(obj, "dtypes", None)
    if columns is None or dtypes is None:
        return ""
    shown = [f"{c}:{t}" for c, t in list(zip(columns, dtypes))[:limit]]
    more = f", ... {len(columns) - limit} more" if len(columns) > limit else ""
    return f"columns=[{', '.join(shown)}{more}]"
