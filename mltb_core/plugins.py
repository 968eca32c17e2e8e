"""The one registry rule, shared by tools, planners, backends and tasks, and the entry-point loader.

Rule: a name is held by one registration. Registering it again is refused with an error naming both
origins, unless the new registration says it overrides (``overrides=True``; a task spec's
``overrides = true``). The same object twice, or a new object from the same origin (a module imported
again), is not a clash. Plug-ins are found through entry-point groups (``mltb.backends``,
``mltb.planners``); :func:`load_entry_points` is the one loader.

A layer of its own just above ``environment``: it imports nothing from mltb_core.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Callable, Generic, TypeVar

__all__ = ["RegistryError", "NameClashError", "origin_of", "claim", "load_entry_points", "Registry",
           "SUGGESTION_CUTOFF", "MAX_SUGGESTIONS", "close_matches", "did_you_mean"]

SUGGESTION_CUTOFF = 0.6     # difflib similarity for "did you mean"; case is ignored
MAX_SUGGESTIONS = 3


def close_matches(name: Any, options: Iterable[Any]) -> list[str]:
    """Up to MAX_SUGGESTIONS options that look like ``name`` (case-insensitive), best first: the one rule of
    "did you mean" for registered names (here) and for the tools' inputs (toolkit/validation.py)."""
    by_lower: dict[str, str] = {}
    for option in map(str, options):
        by_lower.setdefault(option.lower(), option)
    found = difflib.get_close_matches(str(name).lower(), list(by_lower), n=MAX_SUGGESTIONS, cutoff=SUGGESTION_CUTOFF)
    return [by_lower[key] for key in found]


def did_you_mean(names: str | Iterable[str], options: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a misspelt name (or names), or '' when none looks close."""
    options = list(options)
    wanted = [names] if isinstance(names, str) else list(names)
    found = [m for name in wanted for m in close_matches(name, options)[:1]]
    return f" (did you mean {' or '.join(map(repr, dict.fromkeys(found)))}?)" if found else ""

T = TypeVar("T")


class RegistryError(RuntimeError):
    """A plug-in is broken, or two registrations claim one name."""


class NameClashError(RegistryError):
    """Two registrations claim one name and the newer one does not say it overrides."""


def origin_of(obj: Any) -> str:
    """Where ``obj`` was defined (``module.QualName``), as errors name it; an instance names its class."""
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


def claim(table: MutableMapping[str, T], kind: str, name: str, obj: T, *, origin: str | None = None,
          overrides: bool = False, hint: str = "", error: type[RegistryError] = NameClashError,
          origins: MutableMapping[str, str] | None = None) -> T:
    """Register ``obj`` under ``name`` in ``table`` by the rule above; returns ``obj``.

    ``origins`` keeps each name's origin when it is not :func:`origin_of` the object (a task's spec
    file); ``hint`` says how to override deliberately.
    """
    origin = origin or origin_of(obj)
    held = table.get(name)
    if held is not None and held is not obj and not overrides:
        held_origin = origins.get(name, origin_of(held)) if origins is not None else origin_of(held)
        if held_origin != origin:
            raise error(f"{kind} name {name!r} is claimed by both {held_origin} and {origin}"
                        + (f"; {hint}" if hint else ""))
    table[name] = obj
    if origins is not None:
        origins[name] = origin
    return obj


def load_entry_points(group: str, builtins: Mapping[str, str] | None = None,
                      error: type[RegistryError] = RegistryError) -> list[tuple[str, Any]]:
    """``(name, loaded object)`` of every entry point in ``group``, by name; ``builtins`` (name ->
    ``module:attr``) stand in for entries the installed metadata lacks (an editable install made
    before they were declared). A broken entry point is an ``error`` naming it."""
    from importlib import metadata  # ~0.1 s: only when a registry is first read

    found = {ep.name: ep for ep in metadata.entry_points(group=group)}
    for name, value in (builtins or {}).items():
        found.setdefault(name, metadata.EntryPoint(name, value, group))
    loaded = []
    for name in sorted(found):
        ep = found[name]
        try:
            loaded.append((name, ep.load()))
        except Exception as exc:  # noqa: BLE001 - a broken plug-in names itself, it does not hide
            raise error(f"{kind_of(group)} entry point {ep.name} = {ep.value!r} (group {group}) "
                        f"failed to load: {exc}") from exc
    return loaded


def kind_of(group: str) -> str:
    """``mltb.planners`` -> ``planner``."""
    return group.rpartition(".")[2].removesuffix("s")


class Registry(Mapping[str, T], Generic[T]):
    """Name -> object under the rule above, in registration order; plug-ins of ``group`` are loaded
    on first read (after whatever registered itself at import: the built-ins) and come after them.

    ``check(name, obj)`` vets an entry point's object (raise :class:`RegistryError`) and returns
    ``overrides``; ``on_register(name, obj)`` runs after each registration.
    """

    def __init__(self, kind: str, group: str | None = None, *, hint: str = "",
                 check: Callable[[str, Any], bool] | None = None,
                 on_register: Callable[[str, T], None] | None = None) -> None:
        self.kind, self.group, self.hint = kind, group, hint
        self._check, self._on_register = check, on_register
        self._items: dict[str, T] = {}
        self._loaded = group is None

    def register(self, name: str, obj: T, *, overrides: bool = False) -> T:
        staged = dict(self._items)     # all or nothing: a refused registration leaves no trace
        claim(staged, self.kind, name, obj, overrides=overrides, hint=self.hint)
        if self._on_register is not None:
            self._on_register(name, obj)
        self._items = staged
        return obj

    def registered(self, name: str) -> T | None:
        """What ``name`` holds so far, without reading the entry points (for a registration's own checks)."""
        return self._items.get(name)

    def load(self) -> None:
        """Read the entry points once (a broken or clashing plug-in raises here, naming itself)."""
        if self._loaded:
            return
        for name, obj in load_entry_points(self.group):
            overrides = self._check(name, obj) if self._check is not None else False
            self.register(name, obj, overrides=overrides)
        self._loaded = True

    @contextmanager
    def scoped(self, *, reread: bool = False) -> Iterator[Registry[T]]:
        """``with registry.scoped(): ...``: what is registered (or loaded) inside the block is forgotten at
        its end, for tests and for a plug-in author trying a registration; ``reread=True`` reads the entry
        points again on the block's first use (a plug-in installed meanwhile). What ``on_register`` did (a
        planner's knobs joining the settings table) is the caller's to undo."""
        saved = dict(self._items), self._loaded
        if reread and self.group is not None:
            self._loaded = False
        try:
            yield self
        finally:
            self._items, self._loaded = saved

    def __getitem__(self, name: str) -> T:
        self.load()
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        self.load()
        return iter(list(self._items))

    def __len__(self) -> int:
        self.load()
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._items)})"
