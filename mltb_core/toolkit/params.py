"""What each tool parameter accepts, declared once (scikit-learn's ``_parameter_constraints``, in mltb's idiom).

A tool's signature declares a parameter with ``typing.Annotated``: ``y_train: Annotated[pd.Series, TARGET]``,
``columns: Annotated[str | list[str] | None, Column(many=True)]``, ``window: Annotated[int, Range(int, 1)]``.
From that one declaration come

- the runtime input check: :func:`check_arguments`, which the executor (``registry._bind``) runs on every
  call before the tool body, with the messages of :mod:`~mltb_core.toolkit.validation`;
- the state-aware call grammar: which scratchpad objects a binding may name (:meth:`Bound.accepts`) and
  which values a plain argument may take in a state (:meth:`Rule.grammar`: the bound frame's columns,
  the readable files, the allowed words, a bounded name), built by :mod:`~mltb_core.toolkit.constraints`;
- the JSON schema's types (the annotation's base type, ``registry._json_schema``);
- the parameter's doc line, which the model reads (:func:`document`, :func:`parameter_docs`): what the
  declaration takes (a DataFrame, a column of ``df``, one of some words, a bounded name or list, a default),
  followed by the docstring's own explanation, in the signature's order. A docstring's ``Parameters`` entry
  names the parameter and explains it; the kind is never written by hand, so a declaration change cannot
  leave the doc stale.

A parameter without a marker gets one from its annotation (:func:`declarations`): ``pd.DataFrame`` is
:data:`FRAME`, ``pd.Series`` :data:`SERIES`; a plain value has no rule beyond its JSON type. So the grammar
offers exactly what the check lets through: what it refuses is refused by the tool, and the other way.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mltb_core.environment import Range
from mltb_core.toolkit.registry import Tool, ToolInputError
from mltb_core.toolkit.scratchpad import MAX_OBJECT_NAME_CHARS, OBJECT_NAME_PATTERN
from mltb_core.toolkit.validation import (TRACKING_COLUMN, is_numeric_dtype, other_rows, require_columns, wrong_rows)

__all__ = ["Kind", "Bound", "Rule", "Column", "ColumnKind", "NUMBER", "INTEGER", "NewName", "OneOf", "ReadFile", "WriteFile", "Range",
           "Part", "FRAME", "PART_FRAME", "frame_of", "SERIES", "TARGET", "TABLE", "PREDICTIONS", "CONVERTIBLE", "ESTIMATOR",
           "MAX_NAME_CHARS", "MAX_LIST_ITEMS", "OBJECT_NAME", "NEW_NAME", "NEW_NAME_PATTERN", "new_name_refusal", "MAX_ENUM_COLUMNS", "declarations", "check_arguments",
           "name_schema", "State", "Declarations", "rule_grammar", "parameter_kind", "parameter_docs", "document"]

# Bounds every name and list argument has, in the grammar and in the check alike (a tiny model otherwise
# rambles in a string or repeats a list until the reply's token limit). Lists of columns and of new column
# names are bounded by the frames' width instead (a wide frame's 200 features are normalized in one call).
MAX_NAME_CHARS = MAX_OBJECT_NAME_CHARS
MAX_LIST_ITEMS = 64


def name_schema(pattern_head: str, tail: str) -> dict[str, Any]:
    """A string of at most :data:`MAX_NAME_CHARS` characters: one ``pattern_head`` then ``tail`` ones."""
    return {"type": "string", "pattern": f"^{pattern_head}{tail}{{0,{MAX_NAME_CHARS - 1}}}$"}


# The scratchpad's name rule as a grammar (scratchpad.OBJECT_NAME_PATTERN, bounded like the check).
_HEAD, _TAIL = "[A-Za-z_]", "[A-Za-z0-9_]"
assert OBJECT_NAME_PATTERN == f"{_HEAD}{_TAIL}*", "the grammar's name rule must follow scratchpad's"
OBJECT_NAME: dict[str, Any] = name_schema(_HEAD, _TAIL)
# A new column's name, one declaration that the grammar and NewName.check both derive from: 1 to
# MAX_NAME_CHARS characters, the first not whitespace (str.isspace's), none a control character, quote,
# backslash or lone surrogate (a pattern's grammar writes characters as they are, and JSON needs those
# escaped), and not the tracking column. Regular-expression syntax that Python's re and llama.cpp's pattern
# converter read alike: character classes, groups, alternation, {m,n}; no lookahead, so "not the tracking
# column" is spelled out: every name of another length, or of its length that differs from it somewhere.
_NAME_CHAR_OUT = r'\x00-\x1f"\\\ud800-\udfff'
_SPACE_OUT = r"\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"   # str.isspace's, beyond \x1f


def _class_without(out: str, char: str = "") -> str:
    return f"[^{out}{re.escape(char)}]"


def _new_name_pattern(reserved: str, max_chars: int) -> str:
    first, rest = _class_without(_NAME_CHAR_OUT + _SPACE_OUT), _class_without(_NAME_CHAR_OUT)
    k = len(reserved)
    # of the reserved name's length, differing from it first at position j
    same_length = ""
    for j in reversed(range(k)):
        differ = (_class_without(_NAME_CHAR_OUT + (_SPACE_OUT if j == 0 else ""), reserved[j])
                  + (f"{rest}{{{k - 1 - j}}}" if j < k - 1 else ""))
        same_length = differ if j == k - 1 else f"{differ}|{re.escape(reserved[j])}({same_length})"
    return f"^({first}{rest}{{0,{k - 2}}}|{same_length}|{first}{rest}{{{k},{max_chars - 1}}})$"


# The most column names a call schema lists for one column parameter: a wider frame's columns are offered as
# text as long as its names, which the check then holds to the frame (santander's 200 features are listed).
MAX_ENUM_COLUMNS = 256

NEW_NAME_PATTERN = _new_name_pattern(TRACKING_COLUMN, MAX_NAME_CHARS)
_NEW_NAME_RE = re.compile(NEW_NAME_PATTERN)
NEW_NAME: dict[str, Any] = {"type": "string", "pattern": NEW_NAME_PATTERN}


def new_name_refusal(name: Any, param: str) -> str | None:
    """Why ``name`` is not a new column's name (None: it is): :data:`NEW_NAME_PATTERN` decides, the words
    say which of its conditions failed."""
    if isinstance(name, str) and len(name) <= MAX_NAME_CHARS and _NEW_NAME_RE.fullmatch(name):
        return None
    if not isinstance(name, str) or not name.strip():
        return f"'{param}' must be a non-empty column name, got {str(repr(name))[:80]}"
    if len(name) > MAX_NAME_CHARS:
        return f"'{param}' is {len(name)} characters long; a column name has at most {MAX_NAME_CHARS}"
    if name == TRACKING_COLUMN:
        # rewriting the flags would move test rows into the train part, and every later check with them
        return (f"'{param}' {TRACKING_COLUMN!r} is the train/test tracking column, written by "
                "concatenate_train_test and read by split_combined_into_train_test; choose another name")
    if name[0].isspace():
        return f"'{param}' {name[:80]!r} starts with whitespace; a column name starts with another character"
    return (f"'{param}' {name[:80]!r} holds a quote, a backslash or a control character; a column name "
            "has none")


# --------------------------------------------------------------- object parameters (bindings)
@dataclass(frozen=True)
class Kind:
    """One kind of scratchpad object: how it is named to the model and how it is recognised."""

    words: str                      # "a DataFrame": the check's message
    test: Callable[[Any], bool]
    noun: str                       # "DataFrame": the parameter's doc line
    hint: str = ""                  # appended to a refusal (what to bind instead)


_FRAME = Kind("a DataFrame", lambda o: isinstance(o, pd.DataFrame), "DataFrame")
_SERIES = Kind("a Series", lambda o: isinstance(o, pd.Series), "Series")
_ONE_COLUMN = Kind("a one-column DataFrame", lambda o: isinstance(o, pd.DataFrame) and o.shape[1] == 1,
                   "1-column DataFrame")
_VECTOR = Kind("a 1-D array", lambda o: isinstance(o, np.ndarray) and o.ndim == 1, "1-D array")
_ARRAY = Kind("an array", lambda o: isinstance(o, np.ndarray) and o.ndim in (1, 2), "array")
_MODEL = Kind("a fitted model with a predict() method", lambda o: callable(getattr(o, "predict", None)),
              "fitted model", " (bind the estimator, e.g. the output of a fit_* or tune_* tool)")


@dataclass(frozen=True)
class Part:
    """Which rows a bound frame must hold: ``rows`` ("train" or "test"), or ``other`` when the argument
    ``unless[0]`` has the value ``unless[1]``. Rows a tool marked, or the tracking column's flags, decide
    (:func:`validation.rows_held`); a frame whose rows are unknown is taken either way. ``advice``: what to
    bind instead, said after the rows a refused frame holds (default: :func:`validation.wrong_rows`'s, for
    a frame converted to features). ``combined``: whether a frame with the tracking column (combined, or a
    slice of a combined frame) may be bound."""

    rows: str
    unless: tuple[str, Any] | None = None
    other: str | None = None
    advice: str | None = None
    combined: bool = True

    def wanted(self, args: Mapping[str, Any]) -> str:
        if self.unless is not None and self.other is not None and self.unless[0] in args:
            return self.other if args[self.unless[0]] == self.unless[1] else self.rows
        return self.rows

    def refusal(self, obj: Any, param: str, args: Mapping[str, Any]) -> str | None:
        """Why ``obj`` cannot be bound here (the message starts "'param' holds"); None when it can."""
        if not self.combined and TRACKING_COLUMN in getattr(obj, "columns", ()):
            return (f"'{param}' holds a '{TRACKING_COLUMN}' column: it is combined already, or a slice of a "
                    f"combined frame; {self.advice or 'bind a frame from before combining'}")
        if self.advice is None:
            return wrong_rows(obj, self.wanted(args), param)
        held = other_rows(obj, self.wanted(args), param)
        return None if held is None else f"{held}: {self.advice}"


@dataclass(frozen=True)
class Bound:
    """An object parameter (named in ``bindings``): the kinds of object it takes (and, for a frame of one
    part, its rows)."""

    kinds: tuple[Kind, ...]
    part: Part | None = None

    def accepts(self, obj: Any) -> bool:
        return any(kind.test(obj) for kind in self.kinds)

    def takes(self, obj: Any, args: Mapping[str, Any]) -> bool:
        """Whether a call with ``args`` may bind ``obj`` here: its kind, and its rows for a part."""
        return self.accepts(obj) and (self.part is None or self.part.refusal(obj, "", args) is None)

    def check(self, value: Any, param: str, args: Mapping[str, Any], tool: str) -> None:
        if self.accepts(value):
            refused = self.part.refusal(value, param, args) if self.part is not None else None
            if refused:
                raise ToolInputError(refused)
            return
        wanted = " or ".join(kind.words for kind in self.kinds)
        got = type(value).__name__ + (f" with shape {value.shape}" if hasattr(value, "shape") else "")
        hints = "".join(dict.fromkeys(kind.hint for kind in self.kinds))
        raise ToolInputError(f"'{param}' must be {wanted}, got {got}{hints}")

    @property
    def doc(self) -> str:
        kinds = _either([kind.noun for kind in self.kinds])
        if self.part is None:
            return kinds
        part = self.part
        if part.unless is None:
            return f"{kinds} of {part.rows} rows" + ("" if part.combined else ", not combined")
        return f"{kinds} of {part.rows} rows ({part.other} rows if {part.unless[0]}={_shown(part.unless[1])})"


FRAME = Bound((_FRAME,))
SERIES = Bound((_SERIES,))
TARGET = Bound((_SERIES, _ONE_COLUMN, _VECTOR))      # validation.as_target
TABLE = Bound((_FRAME, _SERIES))                     # what becomes a frame as it is (save, concatenate)
PREDICTIONS = Bound((_SERIES, _FRAME, _ARRAY))       # predict_target's outputs and their averages
CONVERTIBLE = Bound((_FRAME, _SERIES, _ARRAY))       # convert_to_dataframe
ESTIMATOR = Bound((_MODEL,))
# convert_dataframe_to_features_target's frame: the train part, or the test part when is_train is false
# (converting the wrong part silently gave features of the wrong rows, issue 33)
PART_FRAME = Bound((_FRAME,), Part("train", ("is_train", False), "test"))


def frame_of(rows: str, advice: str, combined: bool = True) -> Bound:
    """A frame of ``rows`` ("train" or "test") only (and, unless ``combined``, without the tracking column);
    ``advice`` says what to bind instead."""
    return Bound((_FRAME,), Part(rows, advice=advice, combined=combined))


# --------------------------------------------------------------- plain parameters (func_kwargs)
@dataclass(frozen=True)
class State:
    """What a plain argument's grammar may depend on: the frames bound (or offered) and the readable files."""

    frames: Mapping[str, list[pd.DataFrame]]     # object parameter -> the frames it may be bound to
    files: list[str]
    first_frame: str | None                       # the tool's first DataFrame binding
    widest: int = 0                               # most columns of any frame on the scratchpad


class Rule:
    """A plain parameter's rule: its check and its grammar in a state."""

    def check(self, value: Any, param: str, args: Mapping[str, Any], tool: str) -> None:
        raise NotImplementedError

    def grammar(self, base: dict[str, Any], state: State) -> dict[str, Any] | None:
        """The schema of the argument in ``state`` (``base``: from its annotation); None: nothing is allowed."""
        return base

    def doc(self, first_frame: str | None) -> str:
        """What the rule takes, in a few words for the doc line ('': the annotation's JSON type says it)."""
        return ""

    # the argument that, when it has this value, lifts the rule (e.g. no key columns for a cross join)
    unless: tuple[str, Any] | None = None


def _strings_to(schema: dict[str, Any], leaf: dict[str, Any], max_items: int) -> dict[str, Any]:
    """``schema`` with every string leaf replaced by ``leaf`` and every array bounded to ``max_items``."""
    if schema == {}:
        return {"anyOf": [leaf, {"type": "array", "items": leaf, "maxItems": max_items}]}
    if schema.get("type") == "string":
        return {**{k: v for k, v in schema.items() if k != "type"}, **leaf}
    out = dict(schema)
    if isinstance(schema.get("items"), dict):
        out["items"] = _strings_to(schema["items"], leaf, max_items)
        out["maxItems"] = max_items
    if "anyOf" in schema:
        out["anyOf"] = [_strings_to(part, leaf, max_items) for part in schema["anyOf"]]
    return out


@dataclass(frozen=True)
class ColumnKind:
    """Which columns a :class:`Column` takes by dtype, and the refusal naming the others (``bad``: "c (dtype)")."""

    test: Callable[[Any], bool]
    refusal: Callable[[list[str], str, str], str]     # (bad, tool, hint) -> message
    word: str = ""                                    # "numeric": the doc line's "numeric column of df"


NUMBER = ColumnKind(is_numeric_dtype, lambda bad, tool, hint: f"{tool} needs numeric columns; {', '.join(bad)} are "
                    "not numeric" + (f" ({hint})" if hint else ""), "numeric")
INTEGER = ColumnKind(pd.api.types.is_integer_dtype, lambda bad, tool, hint: f"not integer column(s): {', '.join(bad)}",
                     "integer")


@dataclass(frozen=True)
class Column(Rule):
    """Existing column name(s) of the frame bound to ``of`` (None: the tool's first DataFrame binding);
    ``many``: a name or a list of names; ``dtype``: only columns of that kind (``hint``: what to use for the
    others); ``not_tracking``: the tracking column is refused, it must not be ``not_tracking`` (a verb)."""

    of: str | None = None
    many: bool = False
    dtype: ColumnKind | None = None
    hint: str = ""
    not_tracking: str = ""
    unless: tuple[str, Any] | None = None

    def owner(self, first_frame: str | None) -> str | None:
        return self.of if self.of is not None else first_frame

    def check(self, value: Any, param: str, args: Mapping[str, Any], tool: str) -> None:
        frame = args.get(self.owner(_first_frame_of(args)) or "")
        if value is None or not isinstance(frame, pd.DataFrame):
            return   # optional and not given, or the binding's own check has refused it
        if not self.many and not isinstance(value, str | int | float):
            raise ToolInputError(f"'{param}' must be one column name, got {type(value).__name__}")
        names = require_columns(frame, value, param)
        if self.not_tracking and TRACKING_COLUMN in names:
            raise ToolInputError(f"{TRACKING_COLUMN!r} is the train/test tracking column and must not be "
                                 f"{self.not_tracking}")
        if self.dtype is not None:
            bad = [f"{c} ({frame[c].dtype})" for c in names if not self.dtype.test(frame[c].dtype)]
            if bad:
                raise ToolInputError(self.dtype.refusal(bad, tool, self.hint))

    def doc(self, first_frame: str | None) -> str:
        word = f"{self.dtype.word} " if self.dtype is not None and self.dtype.word else ""
        text = f"{word}column{'(s)' if self.many else ''} of {self.owner(first_frame)}"
        if self.not_tracking:
            text += f", not {TRACKING_COLUMN}"
        if self.unless is not None:
            text += f", or any name if {self.unless[0]}={_shown(self.unless[1])}"
        return text

    def columns(self, frame: pd.DataFrame) -> list[str]:
        names = [(str(c), dtype) for c, dtype in frame.dtypes.items()
                 if not (self.not_tracking and c == TRACKING_COLUMN)]
        return [c for c, dtype in names if self.dtype is None or self.dtype.test(dtype)]

    def grammar(self, base: dict[str, Any], state: State) -> dict[str, Any] | None:
        frames = state.frames.get(self.owner(state.first_frame) or "", [])
        names = sorted({c for frame in frames for c in self.columns(frame)}) if len(frames) > 1 else \
            (self.columns(frames[0]) if frames else [])
        if not frames:
            return base   # bound to no frame: the check has nothing to hold it to
        if not names:
            return None
        if len(names) > MAX_ENUM_COLUMNS:
            # the schema grew by every column of every column parameter (12.8 MB after nine self-joins): past
            # the bound a name is any short text, and the tool's check names the unknown ones
            lengths = [len(n) for n in names]
            return _strings_to(base, {"type": "string", "minLength": min(lengths), "maxLength": max(lengths)},
                               len(names))
        # a longer list repeats a name, which the check refuses: the frame's width bounds it, not MAX_LIST_ITEMS
        return _strings_to(base, {"enum": names}, len(names))


def _first_frame_of(args: Mapping[str, Any]) -> str | None:
    return args.get(_FIRST_FRAME_KEY)


_FIRST_FRAME_KEY = "\x00first_frame"   # set by check_arguments: which binding a Column() without ``of`` means


@dataclass(frozen=True)
class NewName(Rule):
    """The name of a new (or replaced) column: non-blank text of at most :data:`MAX_NAME_CHARS` characters,
    or a list of such names when ``many``."""

    many: bool = False

    def check(self, value: Any, param: str, args: Mapping[str, Any], tool: str) -> None:
        for name in ([value] if isinstance(value, str) or not self.many else value):
            why = new_name_refusal(name, param)
            if why is not None:
                raise ToolInputError(why)

    def doc(self, first_frame: str | None) -> str:
        return f"new column name{'(s)' if self.many else ''}, ≤{MAX_NAME_CHARS} chars{' each' if self.many else ''}"

    def grammar(self, base: dict[str, Any], state: State) -> dict[str, Any]:
        # one name per column of some frame (rename_feature, convert_to_dataframe): the widest frame bounds it
        return _strings_to(base, NEW_NAME, max(MAX_LIST_ITEMS, state.widest))


@dataclass(frozen=True)
class OneOf(Rule):
    """One of a fixed set of words (or numbers): a table mltb looks the model's word up in."""

    values: tuple[Any, ...]
    many: bool = False     # a list of them

    def check(self, value: Any, param: str, args: Mapping[str, Any], tool: str) -> None:
        for item in (value if self.many and isinstance(value, list) else [value]):
            if isinstance(item, bool) is not isinstance(self.values[0], bool) or item not in self.values:
                shown = item if isinstance(item, (str, int, float, bool, type(None))) else type(item).__name__
                raise ToolInputError(f"'{param}' must be one of {list(self.values)}, got {str(repr(shown))[:100]}")

    def doc(self, first_frame: str | None) -> str:
        return f"{'list of' if self.many else 'one of'} {', '.join(map(_shown, self.values))}"

    def grammar(self, base: dict[str, Any], state: State) -> dict[str, Any]:
        if self.many:
            return _strings_to(base, {"enum": list(self.values)}, len(self.values))
        return {"enum": list(self.values)}


def _range_check(rule: Range, value: Any, param: str) -> None:
    if not rule.allows(value):
        raise ToolInputError(f"'{param}' must be {rule.describe()}, got {value!r}")


def _range_grammar(rule: Range) -> dict[str, Any]:
    if rule.kind is int and rule.low is not None and rule.high is not None and rule.high - rule.low < MAX_LIST_ITEMS:
        return {"enum": list(range(int(rule.low), int(rule.high) + 1))}
    schema: dict[str, Any] = {"type": "integer" if rule.kind is int else "number"}
    if rule.low is not None:
        schema["exclusiveMinimum" if rule.low_open else "minimum"] = rule.low
    if rule.high is not None:
        schema["maximum"] = rule.high
    return schema


@dataclass(frozen=True)
class ReadFile(Rule):
    """A file the tool opens: one of the readable files whose name ends with one of ``suffixes``."""

    suffixes: tuple[str, ...]

    def check(self, value: Any, param: str, args: Mapping[str, Any], tool: str) -> None:
        if not isinstance(value, str) or not value.lower().endswith(self.suffixes):
            raise ToolInputError(f"{tool} reads {', '.join(self.suffixes)} files; {value!r} is not one")

    def doc(self, first_frame: str | None) -> str:
        return f"{'/'.join(self.suffixes)} file to read"

    def grammar(self, base: dict[str, Any], state: State) -> dict[str, Any] | None:
        readable = [f for f in state.files if f.lower().endswith(self.suffixes)]
        return {"enum": readable} if readable else None


@dataclass(frozen=True)
class WriteFile(Rule):
    """A file the tool writes in the sandbox: a name ending with one of ``suffixes`` (as written: the grader
    reads ``submission.csv``), at most :data:`MAX_NAME_CHARS` characters of letters, digits, ``_ . -`` and
    ``/`` (a subdirectory)."""

    suffixes: tuple[str, ...]

    @property
    def pattern(self) -> str:
        longest = max(map(len, self.suffixes))
        # a dot as a class: llama.cpp's grammar parser knows no "\." escape in a literal
        ends = "|".join(s.replace(".", "[.]") for s in self.suffixes)
        return f"^[A-Za-z0-9_./-]{{0,{MAX_NAME_CHARS - longest}}}({ends})$"

    def check(self, value: Any, param: str, args: Mapping[str, Any], tool: str) -> None:
        # where the path leads is the sandbox's to check (resolve_write), in the tool
        if not isinstance(value, str) or not value.endswith(self.suffixes):
            raise ToolInputError(f"{param} {value!r} must end with {' or '.join(self.suffixes)}")
        if not re.fullmatch(self.pattern[1:-1], value):
            raise ToolInputError(f"{param} {value!r} must be at most {MAX_NAME_CHARS} characters of letters, "
                                 "digits, '_', '.', '-' and '/'")

    def doc(self, first_frame: str | None) -> str:
        return f"{'/'.join(self.suffixes)} file to write, ≤{MAX_NAME_CHARS} chars"

    def grammar(self, base: dict[str, Any], state: State) -> dict[str, Any]:
        return {"type": "string", "pattern": self.pattern}


# --------------------------------------------------------------- a tool's declarations
@dataclass(frozen=True)
class Declarations:
    """Everything about a tool's parameters that depends on the tool alone (computed once per tool)."""

    bound: dict[str, Bound]                 # object parameter -> what it takes
    rules: dict[str, Any]                   # plain parameter -> its Rule or Range (none: its JSON type only)
    base: dict[str, dict[str, Any]]         # plain parameter -> JSON schema of its annotation
    required: tuple[str, ...]               # parameters without a default
    defaults: dict[str, Any] = field(default_factory=dict)
    first_frame: str | None = None          # the first binding that takes a DataFrame
    lists: tuple[str, ...] = ()             # plain parameters whose annotation allows a list


def _default_bound(annotation: Any) -> Bound:
    if annotation is pd.DataFrame:
        return FRAME
    if annotation is pd.Series:
        return SERIES
    return Bound((Kind("any object", lambda o: True, "any object"),))


_CACHE: dict[int, tuple[Tool, Declarations]] = {}


def declarations(tool: Tool) -> Declarations:
    """The declarations of ``tool``'s parameters (cached per tool: only the state varies per node)."""
    cached = _CACHE.get(id(tool))
    if cached is not None and cached[0] is tool:
        return cached[1]
    from mltb_core.toolkit.registry import _json_schema

    sig = inspect.signature(tool.func)
    hints = typing.get_type_hints(tool.func, include_extras=True)
    bound: dict[str, Bound] = {}
    rules: dict[str, Any] = {}
    base: dict[str, dict[str, Any]] = {}
    lists: list[str] = []
    for name in (*tool.object_params, *tool.value_params):
        annotation = hints.get(name, Any)
        plain, marks = annotation, list[Any]()
        if typing.get_origin(annotation) is typing.Annotated:
            plain, *marks = typing.get_args(annotation)
        if name in tool.object_params:
            declared: Bound | None = next((m for m in marks if isinstance(m, Bound)), None)
            bound[name] = declared or _default_bound(plain)
            continue
        rule: Rule | Range | None = next((m for m in marks if isinstance(m, (Rule, Range))), None)
        if rule is not None:
            rules[name] = rule
        schema = _json_schema(plain) or {}
        base[name] = schema
        if "array" in str(schema):
            lists.append(name)
    first = next((p for p in tool.object_params if _FRAME in bound[p].kinds), None)
    params = sig.parameters
    required = tuple(n for n in (*tool.object_params, *tool.value_params)
                     if params[n].default is inspect.Parameter.empty)
    defaults = {n: params[n].default for n in (*tool.object_params, *tool.value_params)
                if params[n].default is not inspect.Parameter.empty}
    found = Declarations(bound, rules, base, required, defaults, first, tuple(lists))
    _CACHE[id(tool)] = (tool, found)
    return found


def check_arguments(tool: Tool, kwargs: Mapping[str, Any]) -> None:
    """Refuse a call whose arguments break their declarations (bool switches first: a part reads them; then
    objects: column rules read the frames)."""
    found = declarations(tool)
    args = {**found.defaults, **kwargs, _FIRST_FRAME_KEY: found.first_frame}
    for name in tool.value_params:
        # first: a switch decides what the bindings may be (Part); a truthy "false" would silently run the
        # other branch, and the grammar offers true and false only
        if name in kwargs and found.base[name] == {"type": "boolean"} and not isinstance(kwargs[name], bool):
            raise ToolInputError(f"'{name}' must be true or false, got {repr(kwargs[name])[:100]}")
    for name, kind in found.bound.items():
        if name in kwargs:
            kind.check(kwargs[name], name, args, tool.name)
    for name in tool.value_params:
        if name not in kwargs:
            continue
        value = kwargs[name]
        rule = found.rules.get(name)
        unless = getattr(rule, "unless", None)
        lifted = unless is not None and args.get(unless[0]) == unless[1]
        by_width = isinstance(rule, Column | NewName) and not lifted   # lists as long as a frame is wide
        if name in found.lists and not by_width and isinstance(value, list | tuple) and len(value) > MAX_LIST_ITEMS:
            raise ToolInputError(f"'{name}' lists {len(value)} items; at most {MAX_LIST_ITEMS} in one call "
                                 "(split the work over several calls)")
        if rule is None or lifted:
            continue
        if isinstance(rule, Range):
            _range_check(rule, value, name)
        else:
            rule.check(value, name, args, tool.name)


def rule_grammar(rule: Any, base: dict[str, Any], state: State) -> dict[str, Any] | None:
    """The grammar of a plain argument with ``rule`` (a Rule or a Range) in ``state``."""
    if isinstance(rule, Range):
        return _range_grammar(rule)
    return rule.grammar(base, state)



# --------------------------------------------------------------- doc lines (what the model reads about a parameter)
_TYPE_WORDS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "object": "dict"}
_SECTION_RULE = re.compile(r"-{3,}")


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _either(words: list[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _type_doc(schema: dict[str, Any]) -> str:
    """A plain parameter's JSON type in Python's words ("str or list[str]")."""
    if "enum" in schema:
        return "one of " + ", ".join(map(_shown, schema["enum"]))
    if "anyOf" in schema:
        return _either([_type_doc(part) for part in schema["anyOf"]])
    if schema.get("type") == "array":
        items = schema.get("items") or {}
        return f"list[{_type_doc(items)}]" if items else "list"
    return _TYPE_WORDS.get(schema.get("type", ""), "any value")


def parameter_kind(tool: Tool, name: str) -> str:
    """What parameter ``name`` of ``tool`` takes, from its declaration: "DataFrame", "numeric column(s) of df",
    "one of mean, median", "integer from 2 to 20, folds", "new column name, ≤64 chars", "list[int], ≤64 items"."""
    found = declarations(tool)
    if name in found.bound:
        return found.bound[name].doc
    rule = found.rules.get(name)
    if isinstance(rule, Range):
        text = dataclasses.replace(rule, why="").describe().removeprefix("an ").removeprefix("a ")
        text += f", {rule.why}" if rule.why else ""
    else:
        text = (rule.doc(found.first_frame) if rule is not None else "") or _type_doc(found.base[name])
    if name in found.lists and not isinstance(rule, Column | NewName | OneOf):   # those are bounded otherwise
        text += f", ≤{MAX_LIST_ITEMS} items"
    return text


@dataclass(frozen=True)
class _Entry:
    names: list[str]        # "X_train, y_train" documents two parameters
    head: str               # the line as written
    body: list[str]         # the explanation, indented as written


def _parameters_section(lines: list[str]) -> tuple[int, int] | None:
    """(first line, end) of the entries of a cleaned docstring's ``Parameters`` section; None: no section."""
    heads = [i for i in range(len(lines) - 1) if lines[i].strip() and _SECTION_RULE.fullmatch(lines[i + 1].strip())]
    start = next((i for i in heads if lines[i].strip() == "Parameters"), None)
    if start is None:
        return None
    end = next((i for i in heads if i > start), len(lines))
    while end > start + 2 and not lines[end - 1].strip():
        end -= 1
    return start + 2, end


def _entries(lines: list[str]) -> list[_Entry]:
    entries: list[_Entry] = []
    for line in lines:
        if line and not line[0].isspace():
            entries.append(_Entry([n.strip() for n in line.split(":")[0].split(",")], line, []))
        elif entries:
            entries[-1].body.append(line)
    return entries


def parameter_docs(tool: Tool) -> dict[str, tuple[str, str]]:
    """Parameter -> (what it takes, the docstring's explanation on one line; '' when it gives none), for every
    parameter of ``tool`` (the function schema's descriptions)."""
    lines = inspect.cleandoc(tool.func.__doc__ or "").split("\n")
    section = _parameters_section(lines)
    explained = {name: " ".join(" ".join(entry.body).split())
                 for entry in (_entries(lines[slice(*section)]) if section else []) for name in entry.names}
    return {name: (parameter_kind(tool, name), explained.get(name, ""))
            for name in (*tool.object_params, *tool.value_params)}


def _head(tool: Tool, name: str) -> str:
    found = declarations(tool)
    text = parameter_kind(tool, name)
    if name in found.defaults:
        default = found.defaults[name]
        text += ", optional" if name in found.bound else f", default {json.dumps(default, default=repr)}"
    return text


def document(tool: Tool, doc: str) -> str:
    """``doc`` (the tool's cleaned docstring) with its ``Parameters`` section written from the declarations:
    each entry's line is ``name : <what it takes>, default <value>`` (whatever the docstring wrote after the
    name is dropped), the explanation below it is kept, and a parameter the docstring leaves out gets a line
    of its own. An entry naming no parameter is left as written (tests/test_params.py refuses one)."""
    params = [*tool.object_params, *tool.value_params]
    if not params:
        return doc
    lines = doc.split("\n")
    section = _parameters_section(lines)
    if section is None:   # a section of its own, after the description
        lines += ["", "Parameters", "----------"]
        section = (len(lines), len(lines))
    start, end = section
    entries = _entries(lines[start:end])
    documented = {name for entry in entries for name in entry.names}
    entries += [_Entry([name], name, []) for name in params if name not in documented]
    entries.sort(key=lambda entry: min(params.index(n) if n in params else len(params) for n in entry.names))
    out: list[str] = []
    for entry in entries:
        if not set(entry.names) <= set(params):
            out += [entry.head, *entry.body]
            continue
        heads = {name: _head(tool, name) for name in entry.names}
        if len(set(heads.values())) == 1:
            out += [f"{', '.join(entry.names)} : {heads[entry.names[0]]}", *entry.body]
        else:
            for name in entry.names:
                out += [f"{name} : {heads[name]}", *entry.body]
    return "\n".join(lines[:start] + out + lines[end:])
