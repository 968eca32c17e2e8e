"""State-aware constrained calls: the JSON schema of the next tool call, built from what exists.

Per node, :func:`call_schema` turns the offered tools, the node's scratchpad and the readable files
into one JSON schema of a paper-format call ``{"tool_name", "tool_args": {"bindings", "func_kwargs",
"output"}}``, an ``anyOf`` with one branch per tool (and per choice of the frame its column arguments
refer to):

Every restriction comes from the parameter's declaration (:mod:`~mltb_core.toolkit.params`), the same
one the executor checks each call against, so the grammar offers what the tool accepts and nothing else:

- ``tool_name`` is one offered tool whose required inputs can be given;
- each object binding names an existing object of a kind the parameter takes (:meth:`params.Bound.accepts`:
  a DataFrame, a Series or a one-column frame as a target, any table where a table is written, a model),
  and for a frame of one part (:class:`params.Part`) rows of that part in each branch of its switch;
- column arguments (:class:`params.Column`) are the columns of the frame they refer to (number columns
  where only those are taken), a file read (:class:`params.ReadFile`) one of the readable files of a kind
  the tool opens (the tool is not offered when there is none), a word (:class:`params.OneOf`) one of the
  tool's words, a number its :class:`~mltb_core.environment.Range`;
- names (objects, new columns, files written) have at most ``params.MAX_NAME_CHARS`` characters and lists
  at most ``params.MAX_LIST_ITEMS`` items (of columns or new column names: as many as a frame is wide); a rule another argument lifts (``target_column`` of test rows
  with ``is_train`` false, the keys of a cross join) gets a branch of its own with that value.

Only what exists goes in: no task knowledge (the target is in a schema only as a column of a bound
frame). llama.cpp turns the schema into a grammar; OpenAI servers get the per-tool argument schemas
(:func:`arguments_by_tool`) as function parameters.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mltb_core.toolkit.params import (MAX_LIST_ITEMS, OBJECT_NAME, Column, OneOf, State, declarations,
                                      rule_grammar)
from mltb_core.toolkit.registry import Tool

__all__ = ["call_schema", "arguments_by_tool", "readable_files", "OBJECT_NAME", "MAX_FRAME_BRANCHES", "MAX_FILES"]

# One branch per choice of the bound frame(s) up to this many; past it the columns of every candidate frame.
MAX_FRAME_BRANCHES = 8
MAX_FILES = 50          # readable files offered (the data directory holds a handful)


def readable_files(*roots: Path | None) -> list[str]:
    """Paths of the files inside ``roots`` (in the order given; a subdirectory's as ``dir/name``), relative as
    the read tools resolve them; at most :data:`MAX_FILES`."""
    names: dict[str, None] = {}
    for root in roots:
        if root is None or not Path(root).is_dir():
            continue
        root = Path(root)
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and not any(part.startswith(".") for part in relative.parts):
                names.setdefault(relative.as_posix(), None)
                if len(names) >= MAX_FILES:
                    return list(names)
    return list(names)


# llama-cpp-python's grammar converter needs an item schema for every array (an empty one fails).
_SCALAR: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}


def _bounded_arrays(schema: Any) -> Any:
    """``schema`` with a scalar item schema on arrays that have none (JSON-schema equivalent enough) and at
    most :data:`MAX_LIST_ITEMS` items in every array (the check refuses longer lists alike)."""
    if isinstance(schema, list):
        return [_bounded_arrays(part) for part in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded_arrays(v) if k not in ("enum", "const") else v for k, v in schema.items()}
    if out.get("type") == "array":
        out.setdefault("maxItems", MAX_LIST_ITEMS)
        if not out.get("items"):
            out["items"] = _SCALAR
    return out


def _output_schema(tool: Tool, parts: bool = True) -> dict[str, Any]:
    """One name (alone or as a one-item list, which the executor takes alike), or, for a call that returns
    the tool's parts, a list of one name per part."""
    forms = [OBJECT_NAME, {"type": "array", "items": OBJECT_NAME, "minItems": 1, "maxItems": 1}]
    if parts and len(tool.output_parts) > 1:
        n = len(tool.output_parts)
        forms.append({"type": "array", "items": OBJECT_NAME, "minItems": n, "maxItems": n})
    return {"anyOf": forms}


def _except(schema: dict[str, Any], rule: Any, value: Any) -> dict[str, Any] | None:
    """The values of a switch (a bool or a :class:`OneOf`) other than ``value``; None when not expressible."""
    if schema.get("type") == "boolean":
        return {"enum": [not value]}
    if isinstance(rule, OneOf):
        return {"enum": [v for v in rule.values if v != value]}
    return None


@dataclass(frozen=True)
class _Offer:
    """What one tool may be called with in this state: shared by all its branches."""
    tool: Tool
    found: Any                          # the tool's parameter declarations (params.declarations)
    objects: dict[str, Any]
    files: list[str]
    widest: int
    candidates: dict[str, list[str]]    # object parameter → the existing objects of a kind it takes
    required: list[str]                 # the object parameters a call must bind
    owners: list[str]                   # the object parameters whose frame's columns a column argument names


def _tool_branches(tool: Tool, objects: dict[str, Any], files: list[str], widest: int) -> list[dict[str, Any]]:
    """The call schemas for ``tool`` in this state; [] when a required input cannot be given."""
    found = declarations(tool)
    candidates = {p: [name for name, obj in objects.items() if found.bound[p].accepts(obj)] for p in tool.object_params}
    required = [p for p in tool.object_params if p in found.required]
    if any(not candidates[p] for p in required):
        return []
    offer = _Offer(tool, found, objects, files, widest, candidates, required, _column_owners(found, candidates))
    # a rule lifted by another argument's value (no key columns for a cross join): a branch with that value
    switches = list(dict.fromkeys(_switches(tool, found)))
    branches = []
    for chosen in _frame_choices(offer):
        for lifted in [None, *switches]:
            branch = _branch(offer, chosen, lifted)
            if branch is not None:
                branches.append(branch)
    return branches


def _column_owners(found: Any, candidates: dict[str, list[str]]) -> list[str]:
    """The object parameters, with a candidate each, whose frame's columns a column argument names."""
    owners = {rule.owner(found.first_frame) for rule in found.rules.values() if isinstance(rule, Column)}
    return sorted(o for o in owners if o in candidates and candidates[o])


def _frame_choices(offer: _Offer) -> list[dict[str, str]]:
    """One branch per combination of the owners' frames (owner → frame); past :data:`MAX_FRAME_BRANCHES`
    combinations a single branch choosing none, whose column arguments take any candidate frame's columns."""
    choices = list(itertools.product(*(offer.candidates[o] for o in offer.owners)))
    if len(choices) > MAX_FRAME_BRANCHES:
        return [{}]
    return [dict(zip(offer.owners, choice)) for choice in choices]


def _fitting(offer: _Offer, chosen: dict[str, str], lifted: tuple[str, Any] | None) -> dict[str, list[str]]:
    """Per object parameter, the candidates (an owner's chosen frame alone) it may bind in the branch where
    ``lifted`` holds: a frame of one part (Bound.part) only where its rows fit the switches' values."""
    found = offer.found
    switched = {**found.defaults, **({lifted[0]: lifted[1]} if lifted is not None else {})}
    return {p: [n for n in ([chosen[p]] if p in chosen else offer.candidates[p])
                if found.bound[p].takes(offer.objects[n], switched)] for p in offer.tool.object_params}


def _branch(offer: _Offer, chosen: dict[str, str], lifted: tuple[str, Any] | None) -> dict[str, Any] | None:
    """The call schema with the frames ``chosen`` and the switch value ``lifted`` (None: no rule lifted);
    None when an input the branch needs has nothing that fits, or no value an argument needs exists."""
    tool, found = offer.tool, offer.found
    fitting = _fitting(offer, chosen, lifted)
    if any(not fitting[p] for p in (*offer.required, *chosen)):
        return None
    frames = {o: [f for n in fitting[o] if isinstance(f := offer.objects[n], pd.DataFrame)] for o in offer.owners}
    state = State(frames, offer.files, found.first_frame, offer.widest)
    bindings = {p: ({"const": chosen[p]} if p in chosen else {"enum": fitting[p]})
                for p in tool.object_params if fitting[p]}
    kwargs = _kwargs_schema(tool, found, state, lifted)
    if kwargs is None:
        return None
    return _call_object(tool, bindings, offer.required, kwargs, lifted)


def _call_object(tool: Tool, bindings: dict[str, Any], required_bindings: list[str], kwargs: dict[str, Any],
                 lifted: tuple[str, Any] | None) -> dict[str, Any]:
    """The paper-format call ``{"tool_name", "tool_args": {"bindings", "func_kwargs", "output"}}``; the output
    name only where the tool writes one (required where it must)."""
    args: dict[str, Any] = {
        "bindings": {"type": "object", "properties": bindings, "required": required_bindings,
                     "additionalProperties": False},
        "func_kwargs": kwargs}
    required = ["bindings", "func_kwargs"]
    if tool.kind != "get":
        args["output"] = _output_schema(tool, parts=tool.parts_unless is None or lifted != tool.parts_unless)
        if tool.kind in ("set", "get-set"):
            required.append("output")
    return {"type": "object", "properties": {
        "tool_name": {"const": tool.name},
        "tool_args": {"type": "object", "properties": args, "required": required, "additionalProperties": False}},
        "required": ["tool_name", "tool_args"], "additionalProperties": False}


def _switches(tool: Tool, found: Any) -> list[tuple[str, Any]]:
    """(argument, value) pairs that change what a call may be: a value lifting a rule (no key columns for a
    cross join), or one with which the tool returns one object instead of its parts."""
    lifting = [rule.unless for rule in found.rules.values() if getattr(rule, "unless", None)]
    parts = [bound.part.unless for bound in found.bound.values() if bound.part is not None and bound.part.unless]
    return lifting + parts + ([tool.parts_unless] if tool.parts_unless is not None else [])


def _kwargs_schema(tool: Tool, found: Any, state: State, lifted: tuple[str, Any] | None) -> dict[str, Any] | None:
    """The ``func_kwargs`` schema in ``state``; ``lifted``: (switch, value) for the branch where that argument
    has the value that lifts the rules naming it (in the other branches it takes its other values)."""
    switch_values: dict[str, Any] = {}
    if lifted is not None:
        switch_values[lifted[0]] = {"const": lifted[1]}
    props: dict[str, Any] = {}
    required = []
    for param in tool.value_params:
        rule = found.rules.get(param)
        base = found.base[param]
        if param in switch_values:
            prop: dict[str, Any] | None = switch_values[param]
        elif rule is None or (lifted is not None and getattr(rule, "unless", None) == lifted):
            prop = base
        else:
            prop = rule_grammar(rule, base, state)
        if prop is None:
            if param in found.required:
                return None   # nothing this argument may be exists (no readable file of its kind)
            continue
        props[param] = _bounded_arrays(dict(prop))
        if param in found.required or param in switch_values:
            required.append(param)
    for switch, value in _switches(tool, found):   # the other switches take their other values
        if (switch, value) != lifted and switch in props and switch not in switch_values:
            other = _except(props[switch], found.rules.get(switch), value)
            if other is not None:
                props[switch] = other
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def call_schema(tools: Iterable[Tool], pad: Any, files: list[str]) -> dict[str, Any] | None:
    """The JSON schema of one call to one of ``tools`` in the state ``pad`` (a Scratchpad) with readable
    ``files``; None when no tool can be called (the caller then sends its unconstrained request)."""
    objects = {name: pad.get(name) for name in pad.names()}
    widest = max((obj.shape[1] for obj in objects.values() if isinstance(obj, pd.DataFrame)), default=0)
    branches = [b for tool in tools for b in _tool_branches(tool, objects, files, widest)]
    if not branches:
        return None
    return {"anyOf": branches}


def arguments_by_tool(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tool name -> the schema of its arguments object (branches of one tool joined by ``anyOf``)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for branch in schema.get("anyOf", []):
        props = branch["properties"]
        grouped.setdefault(props["tool_name"]["const"], []).append(props["tool_args"])
    return {name: parts[0] if len(parts) == 1 else {"anyOf": parts} for name, parts in grouped.items()}
