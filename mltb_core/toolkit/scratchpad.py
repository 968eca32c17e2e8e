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

from collections.abc import Iterator
from typing import Any

__all__ = ["Scratchpad", "MissingObjectError"]


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
        self._local: dict[str, Any] = dict(objects or {})
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1

    # -- reads resolve along the path, nearest first ---------------------------------
    def get(self, name: str) -> Any:
        pad: Scratchpad | None = self
        while pad is not None:
            if name in pad._local:
                return pad._local[name]
            pad = pad.parent
        raise MissingObjectError(name, self.names())

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        pad: Scratchpad | None = self
        while pad is not None:
            if name in pad._local:
                return True
            pad = pad.parent
        return False

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
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"object names must be non-empty strings, got {name!r}")
        self._local[name] = value

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


def describe_columns(obj: Any, limit: int = 40) -> str:
    """Column names and dtypes of a frame (capped), e.g. ``columns=[Age:float64, Cabin:str]``."""
    columns = getattr(obj, "columns", None)
    dtypes = getattr(obj, "dtypes", None)
    if columns is None or dtypes is None:
        return ""
    shown = [f"{c}:{t}" for c, t in list(zip(columns, dtypes))[:limit]]
    more = f", ... {len(columns) - limit} more" if len(columns) > limit else ""
    return f"columns=[{', '.join(shown)}{more}]"
