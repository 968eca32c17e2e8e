"""Tool registry: the four scratchpad decorators, tool calls, JSON schemas and the executor.

A tool is a plain Python function. One decorator says how it meets the scratchpad:

====================  =========================================  ===========================
decorator             reads objects (bindings)                   stores its result
====================  =========================================  ===========================
make_get_tool         yes                                        no (result shown as text)
make_set_tool         no                                         under ``output``
make_get_and_set_tool yes                                        under ``output``
make_override_tool    yes                                        over the first binding
====================  =========================================  ===========================

Object parameters (given by name in ``bindings``) are inferred from annotations:
anything that is not a JSON value (str, int, float, bool, list, dict, None) is an
object. A parameter named ``ctx`` receives the :class:`ToolContext` and is hidden
from the model.

The executor never raises: a failing call returns ``Error: ...`` plus the tool's
docstring so the model can correct itself.
"""
from __future__ import annotations

import difflib
import inspect
import json
import re
import string
import time
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin

from mltb_core.plugins import claim, origin_of
from mltb_core.bench.documents import JSONShapeError, loads_bounded
from mltb_core.toolkit.textsafety import MAX_JSON_CHARS, MAX_JSON_DEPTH, check_json_value
from mltb_core.toolkit.scratchpad import MissingObjectError, ObjectNameError, Scratchpad, check_object_name, describe_object

__all__ = [
    "TOOL_ROLES", "Tool", "ToolCall", "ToolCallError", "ToolContext", "ToolResult", "ToolReturn",
    "ToolRegistry", "REGISTRY", "make_get_tool", "make_set_tool", "make_get_and_set_tool",
    "make_override_tool", "execute", "ToolInputError", "doc_from", "TOOLSETS", "DEFAULT_TOOLSET", "PAPER", "check_toolset",
    "UnknownToolsetError",
]

# What a tool does, as tags on its declaration (its ``roles``): the paper's five workflow stages, which masking
# matches against a stage's tags (stages/specs.py: Subtask.tags; not the ten reward stages), and "fits_model",
# the one home of "this tool fits a model" (masking, the planners and the synthetic policy read
# ``Tool.fits_model``, never a name prefix).
TOOL_ROLES: dict[str, str] = {
    "loading": "reads, combines or splits data",
    "cleaning": "fills or drops missing values",
    "features": "encodes or derives features",
    "modeling": "used while fitting models",
    "evaluation": "evaluates or applies a fitted model",
    "fits_model": "fits or tunes a model: its output is a fitted estimator",
    "tuning": "searches a model's hyperparameters by cross-validation (and fits it)",
}
_ACTION_ROLES = ("fits_model", "tuning")   # what a tool does, beside the workflow stages it serves
KINDS = ("get", "set", "get-set", "override")

# Toolsets a run can offer the model. "paper" is the paper's Table 9 plus get_dataframe_summary and the
# tune_* tools its trajectories call; "extended" is every registered tool (it adds helpers the paper's
# agents did not have, such as create_submission, which attaches the ids and formats the file).
# A tool joins "paper" by declaring ``toolsets=PAPER``; every tool is in "extended".
TOOLSETS = ("paper", "extended")
DEFAULT_TOOLSET = "paper"
PAPER = ("paper",)


class ToolInputError(ValueError):
    """A tool rejected a model-written input (unsafe expression, path outside the sandbox...)."""


class ToolCallError(ValueError):
    """A tool call that cannot even be dispatched (unknown tool, malformed arguments)."""


class UnknownToolsetError(ValueError):
    """A toolset name that is not one of :data:`TOOLSETS`."""


def check_toolset(name: str) -> str:
    if name not in TOOLSETS:
        raise UnknownToolsetError(f"unknown toolset {name!r}; valid toolsets: {', '.join(TOOLSETS)}")
    return name


def doc_from(template: str | None, **fields: Any) -> Callable[[Callable], Callable]:
    """Decorator: the function's docstring is ``template`` (None: the function's own docstring) with
    ``$field``s filled in (``$tool_name``: the function's name). For tools that differ in a few words, or share
    a parameter's description: one text to keep right, and the model reads the same words for each. ``$``
    placeholders leave the braces of JSON examples alone. A field of several lines is indented like the line
    of its placeholder (a shared parameter entry fits any docstring)."""
    def apply(func: Callable) -> Callable:
        text = (func.__doc__ or "") if template is None else template
        values = dict(fields, tool_name=func.__name__)
        lines = []
        for line in text.split("\n"):
            indent = "\n" + line[:len(line) - len(line.lstrip())]
            lines.append(string.Template(line).substitute({k: str(v).replace("\n", indent) for k, v in values.items()}))
        func.__doc__ = "\n".join(lines)
        return func
    return apply


class ToolReturn(NamedTuple):
    """What a tool function may return to add a note for the model (e.g. a CV score)."""

    value: Any
    note: str = ""


@dataclass
class ToolContext:
    """Per-trial facts a tool may need; injected as the ``ctx`` parameter."""

    sandbox: Path
    data_dir: Path | None = None
    task: Any = None  # mltb_core.bench.tasks.Task, for the submission tool
    threads: int = 1
    seed: int = 0
    written_files: set[Path] = field(default_factory=set)
    # SHA-256 of every model save_model wrote: load_model unpickles only such bytes.
    model_hashes: set[str] = field(default_factory=set)
    # Per-call wall-time limit in seconds (None: no limit); enforced by the executor.
    time_limit: float | None = None

    def __post_init__(self) -> None:
        self.sandbox = Path(self.sandbox).resolve()
        if self.data_dir is not None:
            self.data_dir = Path(self.data_dir).resolve()


@dataclass
class ToolCall:
    """One call in the paper's format: name, object bindings, plain kwargs, output name(s)."""

    tool_name: str
    bindings: dict[str, str] = field(default_factory=dict)
    func_kwargs: dict[str, Any] = field(default_factory=dict)
    output: str | list[str] | None = None

    @classmethod
    def from_dict(cls, data: Any) -> ToolCall:
        """Parse ``{"tool_name": ..., "tool_args": {"bindings", "func_kwargs", "output"}}``."""
        if isinstance(data, str):
            try:
                data = loads_bounded(data, MAX_JSON_DEPTH, MAX_JSON_CHARS)
            except JSONShapeError as exc:
                raise ToolCallError(f"tool call refused: {exc}") from None
            except ValueError as exc:
                raise ToolCallError(f"tool call is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ToolCallError(f"a tool call must be a JSON object, got {type(data).__name__}")
        name = data.get("tool_name", data.get("name"))
        if not isinstance(name, str) or not name:
            raise ToolCallError("tool call has no 'tool_name'")
        args = data.get("tool_args", data.get("arguments", {}))
        return cls.from_arguments(name, args)

    @classmethod
    def from_arguments(cls, name: str, args: Any) -> ToolCall:
        """Parse the arguments object of a function call (OpenAI style, maybe a JSON string)."""
        if isinstance(args, str):
            try:
                args = loads_bounded(args, MAX_JSON_DEPTH, MAX_JSON_CHARS) if args.strip() else {}
            except JSONShapeError as exc:
                raise ToolCallError(f"arguments of {name!r} refused: {exc}") from None
            except ValueError as exc:
                raise ToolCallError(f"arguments of {name!r} are not valid JSON: {exc}") from None
        if args is None:
            args = {}
        try:   # parsed elsewhere (a backend's own JSON): the same bounds
            check_json_value(args)
        except JSONShapeError as exc:
            raise ToolCallError(f"arguments of {name!r}: {exc}") from None
        if not isinstance(args, dict):
            raise ToolCallError(f"arguments of {name!r} must be an object, got {type(args).__name__}")
        bindings = args.get("bindings") or {}
        kwargs = args.get("func_kwargs") or {}
        output = args.get("output")
        if not isinstance(bindings, dict) or not all(isinstance(v, str) for v in bindings.values()):
            raise ToolCallError(f"'bindings' of {name!r} must map parameter names to object names (strings)")
        if not isinstance(kwargs, dict):
            raise ToolCallError(f"'func_kwargs' of {name!r} must be an object")
        if output is not None and not isinstance(output, str) and not (
            isinstance(output, list) and all(isinstance(o, str) for o in output)
        ):
            raise ToolCallError(f"'output' of {name!r} must be a name or a list of names")
        return cls(name, dict(bindings), dict(kwargs), output)

    def to_dict(self) -> dict[str, Any]:
        args: dict[str, Any] = {"bindings": dict(self.bindings), "func_kwargs": dict(self.func_kwargs)}
        if self.output is not None:
            args["output"] = self.output
        return {"tool_name": self.tool_name, "tool_args": args}

    def key(self) -> str:
        """A canonical string, equal for equal calls (used to deduplicate candidates)."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)


@dataclass
class ToolResult:
    ok: bool
    message: str
    written: list[str] = field(default_factory=list)
    value: Any = None
    seconds: float = 0.0


# ------------------------------------------------------------------- type helpers
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_schema(annotation: Any) -> dict[str, Any] | None:
    """JSON schema of a plain-value annotation, or None when it is an object type."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation is type(None):
        return {"type": "null"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    origin = get_origin(annotation)
    if origin in (list, tuple, set, Iterable, typing.Sequence) or annotation in (list, tuple):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        items = _json_schema(args[0]) if args else {}
        return None if items is None else {"type": "array", "items": items}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if origin is Literal:
        return {"enum": list(get_args(annotation))}
    if origin in (Union, types.UnionType):
        parts = [_json_schema(a) for a in get_args(annotation)]
        if any(p is None for p in parts):
            return None
        parts = [p for p in parts if p != {"type": "null"}]
        return parts[0] if len(parts) == 1 else {"anyOf": parts}
    return None


def _without_sections(doc: str, names: tuple[str, ...]) -> str:
    """A numpy-style docstring minus some sections (parameters already live in the JSON schema)."""
    out: list[str] = []
    lines = doc.splitlines()
    skipping = False
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and re.fullmatch(r"\s*-{3,}\s*", lines[i + 1]):  # a section header
            skipping = line.strip() in names
        if not skipping:
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


# ------------------------------------------------------------------------- tools
@dataclass
class Tool:
    name: str
    func: Callable[..., Any]
    kind: str
    roles: tuple[str, ...]
    object_params: tuple[str, ...]
    value_params: tuple[str, ...]
    wants_ctx: bool
    output_parts: tuple[str, ...] = ()  # names of the parts when the tool returns a tuple
    toolsets: tuple[str, ...] = ("extended",)
    # (argument, value) with which the tool returns one object instead of its parts: the grammar then offers one
    # output name, the JSON schema says so, and a list of names is refused with that reason
    parts_unless: tuple[str, Any] | None = None

    def returns_parts(self, kwargs: dict[str, Any]) -> bool:
        """Whether a call with these keyword arguments returns the tool's parts (a tuple)."""
        if not self.output_parts:
            return False
        if self.parts_unless is None:
            return True
        from mltb_core.toolkit.params import declarations  # local: params builds on this module

        switch, value = self.parts_unless
        return kwargs.get(switch, declarations(self).defaults[switch]) != value

    @property
    def fits_model(self) -> bool:
        """Whether the tool fits a model (declared: the ``fits_model`` role)."""
        return "fits_model" in self.roles

    @property
    def tunes(self) -> bool:
        """Whether the tool searches hyperparameters (the ``tuning`` role)."""
        return "tuning" in self.roles

    @property
    def workflow_roles(self) -> tuple[str, ...]:
        """The paper's workflow stages among the tool's roles (how specific to a stage the tool is)."""
        return tuple(r for r in self.roles if r not in _ACTION_ROLES)

    @property
    def doc(self) -> str:
        """The docstring, its ``Parameters`` section written from the parameters' declarations (params.document)."""
        from mltb_core.toolkit.params import document  # local: params builds on this module

        return document(self, inspect.cleandoc(self.func.__doc__ or ""))

    @property
    def summary(self) -> str:
        return self.doc.split("\n\n")[0].replace("\n", " ").strip()

    @property
    def signature(self) -> str:
        params = [p for p in inspect.signature(self.func).parameters.values() if p.name != "ctx"]
        return f"{self.name}({', '.join(str(p).split(':')[0] + _default_repr(p) for p in params)})"

    def schema(self) -> dict[str, Any]:
        """OpenAI function-calling schema in the paper's bindings/func_kwargs/output shape."""
        from mltb_core.toolkit.params import parameter_docs  # local: params builds on this module

        sig = inspect.signature(self.func)
        hints = typing.get_type_hints(self.func)
        pdocs = {n: f"({kind}) {why}".strip() for n, (kind, why) in parameter_docs(self).items()}
        bind_props = {n: {"type": "string", "description": f"name of a scratchpad object: {pdocs[n]}"}
                      for n in self.object_params}
        kw_props: dict[str, Any] = {}
        kw_required = []
        for n in self.value_params:
            p = sig.parameters[n]
            prop = dict(_json_schema(hints.get(n, p.annotation)) or {})
            prop["description"] = pdocs[n]
            if p.default is not inspect.Parameter.empty:
                try:
                    json.dumps(p.default)
                    prop["default"] = p.default
                except TypeError:
                    pass
            else:
                kw_required.append(n)
            kw_props[n] = prop
        required_bindings = [
            n for n in self.object_params if sig.parameters[n].default is inspect.Parameter.empty
        ]
        props: dict[str, Any] = {
            "bindings": {"type": "object", "properties": bind_props, "required": required_bindings},
            "func_kwargs": {"type": "object", "properties": kw_props, "required": kw_required},
        }
        required = ["bindings", "func_kwargs"]
        if self.kind != "get":
            desc = {
                "set": "name to store the result under",
                "get-set": "name to store the result under",
                "override": "name to store the result under (defaults to the input object's name)",
            }[self.kind]
            if self.output_parts:
                desc += f"; this tool returns {len(self.output_parts)} objects ({', '.join(self.output_parts)}): give a list of {len(self.output_parts)} names, or one name to get '<name>_{self.output_parts[0]}' etc."
                if self.parts_unless is not None:
                    desc += f" With {self.parts_unless[0]}={json.dumps(self.parts_unless[1])} it returns one object: give one name."
            props["output"] = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                               "description": desc}
            if self.kind in ("set", "get-set"):
                required.append("output")
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": _without_sections(self.doc, ("Parameters", "Returns"))[:1500],
                "parameters": {"type": "object", "properties": props, "required": required},
            },
        }

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "roles": list(self.roles),
                "toolsets": list(self.toolsets), "signature": self.signature, "summary": self.summary}


def _default_repr(p: inspect.Parameter) -> str:
    return "" if p.default is inspect.Parameter.empty else f"={p.default!r}"


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._origins: dict[str, str] = {}     # where each tool's function is defined, for clash errors
        self.toolset: str | None = None        # set on a registry made by :meth:`for_toolset`
        self._outside: set[str] = set()        # tools of the full registry left out of this toolset

    def for_toolset(self, toolset: str) -> ToolRegistry:
        """The tools of ``toolset`` only; calls to the others fail with an error naming the toolset."""
        check_toolset(toolset)
        sub = ToolRegistry()
        sub.toolset = toolset
        for tool in self._tools.values():
            if toolset in tool.toolsets:
                sub.add(tool)
            else:
                sub._outside.add(tool.name)
        return sub

    def add(self, tool: Tool, overrides: bool = False) -> Tool:
        """Register ``tool``; a name another function already holds is refused (``plugins.claim``)
        unless ``overrides``."""
        return claim(self._tools, "tool", tool.name, tool, origin=origin_of(tool.func), overrides=overrides,
                     origins=self._origins, hint="pass overrides=True to the decorator to replace it deliberately")

    @contextmanager
    def scoped(self) -> Iterator[ToolRegistry]:
        """``with REGISTRY.scoped(): ...``: tools added inside the block (a test's, a plug-in being tried)
        are gone at its end, and a tool they replaced is back."""
        tools, origins = dict(self._tools), dict(self._origins)
        try:
            yield self
        finally:
            self._tools.clear()
            self._tools.update(tools)
            self._origins.clear()
            self._origins.update(origins)

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            if name in self._outside:
                raise ToolCallError(f"tool {name!r} is not in this run's {self.toolset!r} toolset; use the tools "
                                    f"offered to you") from None
            close = difflib.get_close_matches(str(name).lower(), list(self._tools), n=5, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ToolCallError(f"unknown tool {name!r}.{hint}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def fits_model(self, name: str) -> bool:
        """Whether ``name`` is a registered tool that fits a model (an unknown name fits nothing)."""
        return name in self._tools and self._tools[name].fits_model

    def names(self) -> list[str]:
        return list(self._tools)



REGISTRY = ToolRegistry()


def tool_modules(registry: ToolRegistry) -> list[tuple[str, str]]:
    """(module name, file) of every module outside mltb_core that defines a tool of ``registry``: a fresh
    process (the tool worker) imports them to have the same tools as the process that planned the call."""
    import sys

    found = set()
    for tool in registry:
        name = getattr(tool.func, "__module__", "") or ""
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if name.startswith("mltb_core.") or not file:
            continue
        found.add((name, file))
    return sorted(found)


def _make_decorator(kind: str):
    def decorator(func: Callable | None = None, *, roles: Iterable[str] = (), objects: Iterable[str] | None = None,
                  output_parts: Iterable[str] = (), parts_unless: tuple[str, Any] | None = None,
                  name: str | None = None, toolsets: Iterable[str] = (),
                  registry: ToolRegistry | None = None, overrides: bool = False, stages: Iterable[str] = ()):
        legacy = tuple(stages)
        if legacy:   # the name before 0.2: still read, with a warning, so a plugin's tools keep registering
            warnings.warn("the tool decorators' stages= is now roles= (a tool that fits a model also declares "
                          "'fits_model', and a tuning one 'tuning')", DeprecationWarning, stacklevel=2)

        def wrap(fn: Callable) -> Callable:
            declared = tuple(roles) + legacy
            if legacy:   # before roles=, a fit_/tune_ name was what made a tool "fit a model": it still does
                tool_name = name or fn.__name__
                declared += ("fits_model",) * tool_name.startswith(("fit_", "tune_"))
                declared += ("tuning",) * tool_name.startswith("tune_")
            tool = build_tool(fn, kind, roles=declared, objects=objects, output_parts=output_parts,
                              parts_unless=parts_unless, name=name, toolsets=toolsets)
            (registry if registry is not None else REGISTRY).add(tool, overrides=overrides)
            fn.tool = tool  # type: ignore[attr-defined]
            return fn

        return wrap(func) if func is not None else wrap

    decorator.__name__ = f"make_{kind.replace('-', '_and_')}_tool"
    decorator.__doc__ = f"Register a function as a {kind!r} tool (see module docstring)."
    return decorator


def build_tool(fn: Callable, kind: str, *, roles: Iterable[str] = (), objects: Iterable[str] | None = None,
               output_parts: Iterable[str] = (), parts_unless: tuple[str, Any] | None = None,
               name: str | None = None, toolsets: Iterable[str] = ()) -> Tool:
    if kind not in KINDS:
        raise ValueError(f"unknown tool kind {kind!r}; expected one of {KINDS}")
    roles = tuple(dict.fromkeys(roles))   # once each: the count of workflow roles ranks a tool in masking
    bad = [r for r in roles if r not in TOOL_ROLES]
    if bad:
        raise ValueError(f"tool {fn.__name__}: unknown role(s) {bad}; expected some of {list(TOOL_ROLES)}")
    if "tuning" in roles and "fits_model" not in roles:
        raise ValueError(f"tool {fn.__name__}: the 'tuning' role needs 'fits_model' (a tuning tool fits the model "
                         "it tunes)")
    bad = [t for t in toolsets if t not in TOOLSETS]
    if bad:
        raise ValueError(f"tool {fn.__name__}: unknown toolset(s) {bad}; expected some of {TOOLSETS}")
    member_of = tuple(t for t in TOOLSETS if t in set(toolsets) | {"extended"})
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    params = [p for p in sig.parameters.values() if p.name != "ctx" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if objects is None:
        objects = [p.name for p in params if _json_schema(hints.get(p.name, p.annotation)) is None]
    object_params = tuple(objects)
    value_params = tuple(p.name for p in params if p.name not in object_params)
    if kind == "set" and object_params:
        raise ValueError(f"set tool {fn.__name__} cannot read objects {object_params}")
    if kind in ("get", "get-set", "override") and not object_params:
        raise ValueError(f"{kind} tool {fn.__name__} must read at least one object")
    if parts_unless is not None and (not output_parts or parts_unless[0] not in value_params
                                     or hints.get(parts_unless[0]) is not bool):
        # the grammar splits a call on a bool switch only (its other value is the one left)
        raise ValueError(f"tool {fn.__name__}: parts_unless names {parts_unless[0]!r}, which must be a bool value "
                         "parameter of a tool with output parts")
    return Tool(name or fn.__name__, fn, kind, roles, object_params, value_params,
                "ctx" in sig.parameters, tuple(output_parts), member_of, parts_unless)


make_get_tool = _make_decorator("get")
make_set_tool = _make_decorator("set")
make_get_and_set_tool = _make_decorator("get-set")
make_override_tool = _make_decorator("override")


# ---------------------------------------------------------------------- executor
PREVIEW_ROWS = 5


def execute(call: ToolCall | dict, pad: Scratchpad, ctx: ToolContext, registry: ToolRegistry | None = None,
            allowed: Iterable[str] | None = None) -> ToolResult:
    """Run one tool call against ``pad``; never raises (errors come back as text) except on a real Ctrl-C.

    ``allowed`` restricts the call to a subset of tools (tool masking).
    """
    reg = registry if registry is not None else REGISTRY
    start = time.perf_counter()
    tool: Tool | None = None
    try:
        if not isinstance(call, ToolCall):
            call = ToolCall.from_dict(call)
        tool = reg.get(call.tool_name)
        if allowed is not None and tool.name not in set(allowed):
            raise ToolCallError(f"tool {tool.name!r} is not available at this stage")
        kwargs = _bind(tool, call, pad, ctx)
        for name in _output_names(tool, call, kwargs):   # before the work: a bad name would waste it
            check_object_name(name)
        value = _run_with_limit(tool, kwargs, ctx)
        note = ""
        if isinstance(value, ToolReturn):
            value, note = value.value, value.note
        _carry_rows(tool, kwargs, value)
        written = _store(tool, call, pad, value)
        message = _success_message(tool, value, note, written)
        return ToolResult(True, message, written, value, time.perf_counter() - start)
    except KeyboardInterrupt:
        raise  # a real Ctrl-C (one caused by our own alarm already came back as ToolTimeout)
    except BaseException as exc:  # noqa: BLE001 - the model must see every failure as text, SystemExit too
        return ToolResult(False, _without_locations(error_message(exc, tool), ctx), [], None,
                          time.perf_counter() - start)


def _carry_rows(tool: Tool, kwargs: dict[str, Any], value: Any) -> None:
    """A frame or Series a one-input tool derives from a frame of known rows, with as many rows and no mark
    of its own, holds those rows: mark it (pandas drops ``attrs`` where a frame is built anew, as in
    ``get_dummies``, and the train/test checks would lose track of the rows). A tool of several inputs (a
    join, a concatenation) is left to pandas, which keeps a mark only where the inputs agree: equal lengths
    there are a coincidence, not the same rows."""
    from mltb_core.toolkit.validation import mark_rows, rows_of

    first = kwargs.get(tool.object_params[0]) if len(tool.object_params) == 1 else None
    rows = rows_of(first)
    if (rows is not None and first is not None and value is not first and hasattr(value, "attrs")
            and rows_of(value) is None and getattr(value, "ndim", 0) in (1, 2) and len(value) == len(first)):
        mark_rows(value, rows)


def _without_locations(message: str, ctx: ToolContext) -> str:
    """Library errors quote absolute paths (``[Errno 13] Permission denied: '/.../sandboxes/x/m.pkl'``):
    show them relative to the sandbox / data dir; the machine's layout is no business of the model."""
    for root, shown in ((ctx.data_dir, "data/"), (ctx.sandbox, "")):
        if root is not None:
            message = message.replace(str(root) + "/", shown).replace(str(root), shown.rstrip("/") or ".")
    return message


def error_message(exc: BaseException, tool: Tool | None) -> str:
    text = str(exc) if isinstance(exc, (ToolCallError, ToolInputError, MissingObjectError, ObjectNameError)) else f"{type(exc).__name__}: {exc}"
    msg = f"Error: {text}\nPlease fix your mistakes."
    if tool is not None:
        msg += f"\nTool documentation for {tool.signature}:\n{tool.doc}"
    return msg


def _bind(tool: Tool, call: ToolCall, pad: Scratchpad, ctx: ToolContext) -> dict[str, Any]:
    unknown_b = sorted(set(call.bindings) - set(tool.object_params))
    if unknown_b:
        where = " (it is a plain value: put it in func_kwargs)" if set(unknown_b) & set(tool.value_params) else ""
        raise ToolCallError(f"{tool.name} has no object parameter(s) {unknown_b}{where}; "
                            f"object parameters: {list(tool.object_params)}")
    unknown_k = sorted(set(call.func_kwargs) - set(tool.value_params))
    if unknown_k:
        where = " (it is an object: pass its scratchpad name in bindings)" if set(unknown_k) & set(tool.object_params) else ""
        raise ToolCallError(f"{tool.name} has no plain parameter(s) {unknown_k}{where}; "
                            f"plain parameters: {list(tool.value_params)}")
    sig = inspect.signature(tool.func)
    missing = [n for n in tool.object_params
               if n not in call.bindings and sig.parameters[n].default is inspect.Parameter.empty]
    missing += [n for n in tool.value_params
                if n not in call.func_kwargs and sig.parameters[n].default is inspect.Parameter.empty]
    if missing:
        raise ToolCallError(f"{tool.name} is missing required argument(s) {missing}")
    kwargs = {param: pad.get(obj_name) for param, obj_name in call.bindings.items()}
    kwargs.update(call.func_kwargs)
    from mltb_core.toolkit.params import check_arguments  # local: params builds on this module

    check_arguments(tool, kwargs)   # each parameter's declaration, the one the call grammar is built from
    if tool.wants_ctx:
        kwargs["ctx"] = ctx
    return kwargs


def _run_with_limit(tool: Tool, kwargs: dict[str, Any], ctx: ToolContext) -> Any:
    """Run the tool under its wall-time limit, within the trial's memory budget (see limits.py).

    A MemoryError inside the call comes back as ``limits.ToolOutOfMemory`` ("<tool> ran out of
    memory ..."), which :func:`execute` turns into an ``Error:`` for the model like any other
    failure: the trial goes on and the solver process is not OOM-killed.
    """
    from mltb_core.toolkit.limits import call_with_limits  # local: keeps import graph simple

    return call_with_limits(tool.func, kwargs, ctx.time_limit, label=tool.name)


def _output_names(tool: Tool, call: ToolCall, kwargs: dict[str, Any]) -> list[str]:
    """The names a call asks its result to be stored under (the scratchpad checks each again on write)."""
    if tool.kind == "get" or not call.output:
        return []
    parts = tool.returns_parts(kwargs)
    if isinstance(call.output, list):
        if len(call.output) > 1 and tool.parts_unless is not None and not parts:
            switch, value = tool.parts_unless
            raise ToolCallError(f"{tool.name} with {switch}={json.dumps(value)} returns one object: give one "
                                f"'output' name, not {len(call.output)}")
        return list(call.output)
    return [call.output] + ([f"{call.output}_{suffix}" for suffix in tool.output_parts] if parts else [])


def _store(tool: Tool, call: ToolCall, pad: Scratchpad, value: Any) -> list[str]:
    if tool.kind == "get":
        return []
    output = call.output
    if tool.kind == "override" and not output:
        output = call.bindings.get(tool.object_params[0])
    if not output:
        raise ToolCallError(f"{tool.name} stores its result: give an 'output' name")
    if isinstance(output, list):
        if len(output) == 1:
            output = output[0]
        elif isinstance(value, tuple) and len(value) == len(output):
            for name, part in zip(output, value):
                pad.set(name, part)
            return list(output)
        else:
            n = len(value) if isinstance(value, tuple) else 1
            raise ToolCallError(f"{tool.name} returned {n} object(s) but 'output' lists {len(output)} names")
    written = [output]
    pad.set(output, value)
    if isinstance(value, tuple) and tool.output_parts and len(value) == len(tool.output_parts):
        for suffix, part in zip(tool.output_parts, value):
            pad.set(f"{output}_{suffix}", part)
            written.append(f"{output}_{suffix}")
    return written


def _success_message(tool: Tool, value: Any, note: str, written: list[str]) -> str:
    parts = [f"Applied {tool.name}."]
    if note:
        parts.append(note)
    if tool.kind == "get":
        parts.append(_render_value(value))
    if written:
        stored = ", ".join(f"{n}" for n in written)
        parts.append(f"Stored on the scratchpad: {stored} ({describe_object(value)}).")
    return "\n".join(p for p in parts if p)


def _render_value(value: Any, max_chars: int = 3000) -> str:
    try:
        import pandas as pd

        if isinstance(value, (pd.DataFrame, pd.Series)):
            text = value.to_string(max_rows=40, max_cols=30)
        else:
            text = value if isinstance(value, str) else repr(value)
    except Exception:  # noqa: BLE001
        text = repr(value)
    return text if len(text) <= max_chars else text[:max_chars] + f"\n... [truncated, {len(text)} chars]"
