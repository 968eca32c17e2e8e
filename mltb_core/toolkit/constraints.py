"""State-aware constrained calls: the JSON schema of the next tool call, built from what exists.

Per node, :func:`call_schema` turns the offered tools, the node's scratchpad and the readable files
into one JSON schema of a paper-format call ``{"tool_name", "tool_args": {"bindings", "func_kwargs",
"output"}}``, an ``anyOf`` with one branch per tool (and per choice of the frame its column arguments
refer to):

- ``tool_name`` is one offered tool whose required object inputs exist;
- each object binding names an existing object of the kind the parameter is annotated with
  (a DataFrame where a DataFrame is expected, a Series where a Series is, a fitted model where the
  parameter is a model: see :func:`object_accepts`);
- column arguments (:data:`COLUMN_PARAMS`) are restricted to the columns of the frame they refer to;
- a ``filepath`` read by a tool that takes no objects (``read_data``, ``load_model``) is one of the
  readable files of a kind that tool opens (:data:`READ_SUFFIXES`), and the tool is not offered
  when there is none; other values keep the type their signature gives (numbers, booleans, enums).

Only what exists goes in: no task knowledge (the target is in a schema only as a column of a bound
frame). llama.cpp turns the schema into a grammar; OpenAI servers get the per-tool argument schemas
(:func:`arguments_by_tool`) as function parameters.
"""
from __future__ import annotations

import inspect
import itertools
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from mltb_core.toolkit.registry import Tool, _json_schema
from mltb_core.toolkit.scratchpad import OBJECT_NAME_PATTERN, Scratchpad
from mltb_core.toolkit.tools.evaluation import PICKLE_SUFFIXES
from mltb_core.toolkit.tools.loading import _READERS

__all__ = ["call_schema", "arguments_by_tool", "object_accepts", "readable_files", "COLUMN_PARAMS",
           "OBJECT_NAME", "MAX_FRAME_BRANCHES", "MAX_FILES"]

# The scratchpad's name rule as a grammar: without it a tiny model rambles inside a string until max_tokens.
OBJECT_NAME: dict[str, Any] = {"type": "string", "pattern": f"^{OBJECT_NAME_PATTERN}$"}

# Value parameters naming existing columns -> the binding whose frame holds them (None: the tool's
# first DataFrame binding). New names (``name``, ``new_name``...) are free: they do not exist yet.
COLUMN_PARAMS: dict[str, str | None] = {
    "column": None, "columns": None, "source_column": None, "source_columns": None, "target_column": None,
    "group_column": None, "agg_column": None, "condition_column": None, "datetime_column": None,
    "start_column": None, "end_column": None, "old_name": None, "left_on": "left_df", "right_on": "right_df",
}
# One branch per choice of the bound frame(s) up to this many; past it the columns of every candidate frame.
MAX_FRAME_BRANCHES = 8
MAX_FILES = 50          # readable files offered (the data directory holds a handful)
# The file kinds each file-reading tool opens (its own checks): a CSV is never offered to load_model.
READ_SUFFIXES: dict[str, tuple[str, ...]] = {
    "read_data": tuple(s for s in _READERS if s != ".gz") + (".csv.gz", ".tsv.gz"),
    "load_model": PICKLE_SUFFIXES,
}
_MODEL_PARAMS = ("model",)  # untyped (Any) parameters that take a fitted estimator


def object_accepts(tool: Tool, param: str) -> Callable[[Any], bool]:
    """Whether an object may be bound to ``tool``'s object parameter ``param`` (from its annotation)."""
    annotation = typing.get_type_hints(tool.func).get(param, Any)
    if isinstance(annotation, type) and annotation not in (object, Any):
        return lambda obj: isinstance(obj, annotation)
    if param in _MODEL_PARAMS:  # typed Any in the toolkit: a model is what has predict()
        return lambda obj: callable(getattr(obj, "predict", None))
    return lambda obj: True


def readable_files(*roots: Path | None) -> list[str]:
    """Names of the files directly inside ``roots`` (in the order given), as the read tools resolve them."""
    names: dict[str, None] = {}
    for root in roots:
        if root is None or not Path(root).is_dir():
            continue
        for path in sorted(Path(root).iterdir()):
            if path.is_file() and not path.name.startswith("."):
                names.setdefault(path.name, None)
    return list(names)[:MAX_FILES]


# llama-cpp-python's grammar converter needs an item schema for every array (an empty one fails).
_SCALAR: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}


def _with_array_items(schema: Any) -> Any:
    """``schema`` with a scalar item schema on arrays that have none (JSON-schema equivalent enough)."""
    if isinstance(schema, list):
        return [_with_array_items(part) for part in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _with_array_items(v) if k not in ("enum", "const") else v for k, v in schema.items()}
    if out.get("type") == "array" and not out.get("items"):
        out["items"] = _SCALAR
    return out


def _restrict_strings(schema: dict[str, Any], values: list[str]) -> dict[str, Any]:
    """``schema`` with every string leaf turned into an enum of ``values`` (arrays keep their shape)."""
    if schema == {}:
        return {"anyOf": [{"enum": values}, {"type": "array", "items": {"enum": values}}]}
    if schema.get("type") == "string":
        return {**{k: v for k, v in schema.items() if k != "type"}, "enum": values}
    out = dict(schema)
    if isinstance(schema.get("items"), dict):
        out["items"] = _restrict_strings(schema["items"], values)
    if "anyOf" in schema:
        out["anyOf"] = [_restrict_strings(part, values) for part in schema["anyOf"]]
    return out


def _column_owner(tool: Tool, param: str, frame_params: list[str]) -> str | None:
    owner = COLUMN_PARAMS.get(param, "")
    if owner == "" or not frame_params:
        return None
    return owner if owner in frame_params else frame_params[0]


def _tool_branches(tool: Tool, pad: Scratchpad, files: list[str]) -> list[dict[str, Any]]:
    """The call schemas for ``tool`` in this state; [] when a required object input does not exist."""
    sig = inspect.signature(tool.func)
    hints = typing.get_type_hints(tool.func)
    objects = {name: pad.get(name) for name in pad.names()}
    candidates: dict[str, list[str]] = {}
    for param in tool.object_params:
        accepts = object_accepts(tool, param)
        candidates[param] = [name for name, obj in objects.items() if accepts(obj)]
    required_bindings = [p for p in tool.object_params if sig.parameters[p].default is inspect.Parameter.empty]
    if any(not candidates[p] for p in required_bindings):
        return []
    frame_params = [p for p in tool.object_params if hints.get(p) is pd.DataFrame and candidates[p]]
    owners = sorted({o for p in tool.value_params if (o := _column_owner(tool, p, frame_params)) is not None})
    choices = list(itertools.product(*(candidates[o] for o in owners)))
    if len(choices) > MAX_FRAME_BRANCHES:  # too many combinations: any candidate frame's columns
        choices = [None]
    branches = []
    for choice in choices:
        chosen = dict(zip(owners, choice)) if choice is not None else {}
        columns_of = {o: (list(map(str, objects[chosen[o]].columns)) if o in chosen else
                          sorted({str(c) for n in candidates[o] for c in objects[n].columns})) for o in owners}
        bindings = {p: ({"const": chosen[p]} if p in chosen else {"enum": candidates[p]})
                    for p in tool.object_params if candidates[p]}
        kwargs: dict[str, Any] = {}
        kw_required = []
        for param in tool.value_params:
            p = sig.parameters[param]
            prop = _with_array_items(dict(_json_schema(hints.get(param, p.annotation)) or {}))
            owner = _column_owner(tool, param, frame_params)
            if owner is not None and columns_of[owner]:
                prop = _restrict_strings(prop, columns_of[owner])
            elif param == "filepath" and not tool.object_params:
                readable = [f for f in files if f.lower().endswith(READ_SUFFIXES.get(tool.name, ("",)))]
                if not readable:
                    return []  # nothing this tool could open exists
                prop = {"enum": readable}
            kwargs[param] = prop
            if p.default is inspect.Parameter.empty:
                kw_required.append(param)
        args: dict[str, Any] = {
            "bindings": {"type": "object", "properties": bindings, "required": required_bindings,
                         "additionalProperties": False},
            "func_kwargs": {"type": "object", "properties": kwargs, "required": kw_required,
                            "additionalProperties": False}}
        required = ["bindings", "func_kwargs"]
        if tool.kind != "get":
            args["output"] = OBJECT_NAME
            if tool.kind in ("set", "get-set"):
                required.append("output")
        branches.append({"type": "object", "properties": {
            "tool_name": {"const": tool.name},
            "tool_args": {"type": "object", "properties": args, "required": required, "additionalProperties": False}},
            "required": ["tool_name", "tool_args"], "additionalProperties": False})
    return branches


def call_schema(tools: Iterable[Tool], pad: Scratchpad, files: list[str]) -> dict[str, Any] | None:
    """The JSON schema of one call to one of ``tools`` in the state ``pad`` with readable ``files``;
    None when no tool can be called (the caller then sends its unconstrained request)."""
    branches = [b for tool in tools for b in _tool_branches(tool, pad, files)]
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
