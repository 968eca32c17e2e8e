"""Restricted evaluator for model-written pandas expressions, conditions and lambdas.

The model writes strings such as ``"np.log1p(RoomService + FoodCourt)"``,
``"Age > 30 and HomePlanet == 'Earth'"`` or ``"lambda x: x.split('/')[0]"``.
They are parsed with :mod:`ast` and interpreted by a whitelist walker in this
module: Python's ``eval``/``exec`` never see model text.

What an expression may reach:

* literals, arithmetic, comparisons, ``and``/``or``/``not`` (element-wise on
  Series), ternaries, subscripts, slices, f-strings with constant format specs;
* names of dataframe columns (bare, ``df['col']`` or ```col with space```),
  lambda arguments, ``df`` itself, a few builtins (:data:`SAFE_BUILTINS`) and
  whitelisted members of ``np``, ``pd`` and ``math`` (proxies, not modules);
* attributes and method calls on values, except names starting with ``_`` and
  a denylist of methods that write files, run code from strings, mutate
  their object in place or reach interpreter internals.

Size guards stop resource bombs (``'a' * 10**9``, ``10**10**10``, deep lambda
recursion) before they allocate. Anything rejected raises
:class:`UnsafeExpressionError`, whose message names what was rejected.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import difflib
import math
import re
import string
import types
from collections import ChainMap
from collections.abc import Callable, Mapping, Iterator
from typing import Any

import numpy as np
import pandas as pd

from .registry import ToolInputError

__all__ = [
    "UnsafeExpressionError", "evaluate_expression", "evaluate_condition", "compile_lambda",
    "MAX_EXPRESSION_CHARS", "SAFE_BUILTINS",
]

MAX_EXPRESSION_CHARS = 2_000
MAX_INT_BITS = 4_096            # largest integer an expression may build (~1,230 digits)
MAX_SEQUENCE_LEN = 1_000_000    # largest str/list/tuple built by + or *
MAX_ELEMENT_REPEAT = 1_000      # largest repeat of a Series/array of strings
MAX_SIZE_ARGUMENT = 100_000     # largest int argument of padding/repeating methods
MAX_FORMAT_WIDTH = 1_000        # largest width/precision in a format spec
MAX_LAMBDA_DEPTH = 20           # nested lambda calls (stops self-application bombs)


class UnsafeExpressionError(ToolInputError):
    """A model-written expression tried something outside the safe subset."""


# ----------------------------------------------------------------- whitelists
class _Namespace:
    """A module stand-in exposing only whitelisted members (``np.save`` simply isn't there)."""

    def __init__(self, label: str, members: Mapping[str, Any]):
        self.label = label
        self.members = dict(members)

    def lookup(self, name: str) -> Any:
        if name in self.members:
            return self.members[name]
        close = difflib.get_close_matches(name, self.members, n=3)
        hint = f" Did you mean: {', '.join(f'{self.label}.{c}' for c in close)}?" if close else ""
        raise UnsafeExpressionError(
            f"{self.label}.{name} is not allowed in expressions; allowed {self.label} members: "
            f"{', '.join(sorted(self.members))}.{hint}")

    def __repr__(self) -> str:
        return f"<safe namespace {self.label}>"


_NUMPY_NAMES = (
    "abs absolute sign clip floor ceil round rint trunc fix where select isnan isinf isfinite "
    "log log1p log2 log10 exp expm1 sqrt cbrt square power mod fmod floor_divide divide add subtract "
    "multiply maximum minimum fmax fmin sin cos tan arcsin arccos arctan arctan2 sinh cosh tanh hypot "
    "mean median std var sum prod min max nanmean nanmedian nanstd nanvar nansum nanmin nanmax "
    "percentile nanpercentile quantile nanquantile cumsum cumprod argmax argmin digitize isin "
    "logical_and logical_or logical_not logical_xor "
    "int8 int16 int32 int64 uint8 float32 float64 bool_ number integer floating"
).split()
_NUMPY_CONSTANTS = {"nan": np.nan, "inf": np.inf, "pi": np.pi, "e": np.e, "NaN": np.nan}
NUMPY = _Namespace("np", {**{n: getattr(np, n) for n in _NUMPY_NAMES}, **_NUMPY_CONSTANTS})

PANDAS = _Namespace("pd", {
    "isna": pd.isna, "isnull": pd.isna, "notna": pd.notna, "notnull": pd.notna,
    "to_datetime": pd.to_datetime, "to_numeric": pd.to_numeric, "to_timedelta": pd.to_timedelta,
    "cut": pd.cut, "qcut": pd.qcut, "NA": pd.NA, "NaT": pd.NaT,
    "Timestamp": pd.Timestamp, "Timedelta": pd.Timedelta,
})

MATH = _Namespace("math", {n: getattr(math, n) for n in (
    "sqrt log log1p log2 log10 exp floor ceil fabs isnan isinf isfinite pi e inf nan trunc").split()})

# Types isinstance() may test against (no user classes, nothing with side effects).
_ISINSTANCE_TYPES = (str, int, float, bool, list, tuple, dict, set, type(None),
                     np.number, np.integer, np.floating, np.bool_)


def _safe_isinstance(value: Any, kinds: Any) -> bool:
    """``isinstance`` restricted to builtin scalar/container types."""
    wanted = kinds if isinstance(kinds, tuple) else (kinds,)
    bad = [k for k in wanted if k not in _ISINSTANCE_TYPES]
    if bad:
        raise UnsafeExpressionError(
            f"isinstance() may only test builtin types (str, int, float, bool, list, tuple, dict, set); got {bad!r}")
    return isinstance(value, wanted)


SAFE_BUILTINS: dict[str, Any] = {
    "abs": abs, "min": min, "max": max, "round": round, "len": len, "sum": sum, "any": any, "all": all,
    "sorted": sorted, "str": str, "int": int, "float": float, "bool": bool, "list": list, "tuple": tuple,
    "dict": dict, "set": set, "isinstance": _safe_isinstance,
}

# Names the model may not use even as a function (clear message instead of "unknown name").
_DENIED_NAMES = {
    "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "hasattr", "globals", "locals",
    "vars", "dir", "type", "object", "input", "breakpoint", "help", "exit", "quit", "memoryview",
    "classmethod", "staticmethod", "property", "super", "__import__", "__builtins__", "os", "sys",
    "subprocess", "importlib", "pickle", "builtins", "range", "iter", "next", "format", "print",
}

# Attributes never reachable on any value, with the reason shown to the model.
_DENIED_ATTRIBUTES: dict[str, str] = {
    **{n: "runs code given as a string" for n in ("eval", "query", "pipe", "exec", "compile")},
    **{n: "writes files" for n in ("tofile", "dump", "dumps", "save", "savetxt", "savez", "savefig",
                                   "write", "writelines", "mkdir", "unlink", "rename_file")},
    **{n: "reaches the interpreter or the operating system" for n in (
        "mro", "system", "popen", "open", "spawn", "fork", "kill", "environ", "modules", "ctypes",
        "import_module", "builtins", "globals", "locals", "loader", "spec", "getattr", "setattr")},
    **{n: "draws plots (which can write files)" for n in ("plot", "hist", "boxplot", "style")},
    **{n: "mutates its object in place (tools must not change their inputs)" for n in (
        "pop", "insert", "update", "popitem", "setdefault", "fill", "put", "itemset", "setfield",
        "setflags", "resize", "sort", "append", "extend", "remove", "clear", "reverse", "set_flags")},
    "format_map": "can read attributes through its template",
}
# Frame/generator/code internals (f_globals, gi_frame, tb_frame, co_code, ...).
_DENIED_ATTRIBUTE_PREFIXES = ("f_", "gi_", "ag_", "cr_", "tb_", "co_", "func_", "im_", "read_")
# to_* methods that only convert in memory; every other to_* writes somewhere.
_ALLOWED_TO_METHODS = {"to_numpy", "to_list", "to_frame", "to_dict", "to_period", "to_timestamp",
                       "to_pydatetime", "to_series", "to_flat_index", "to_datetime", "to_numeric",
                       "to_timedelta", "to_tuples", "to_julian_date", "to_datetime64", "to_timedelta64"}
# Methods that resolve string arguments to attributes by name ("agg('sum')").
_STRING_DISPATCH_METHODS = {"apply", "agg", "aggregate", "transform", "map", "applymap", "resample"}
_SAFE_DISPATCH_STRINGS = set(
    ("sum mean median min max std var sem count nunique size first last prod any all cumsum cumprod "
     "cummax cummin rank abs idxmax idxmin skew kurt mode quantile ignore").split())
# Methods whose integer arguments size their output ("x".ljust(10**9)).
_SIZED_METHODS = {"repeat", "pad", "center", "ljust", "rjust", "zfill", "expandtabs", "tile", "sample",
                  "head", "tail", "nlargest", "nsmallest", "rolling", "ewm", "shift", "wrap"}

_DANGEROUS_CALLABLES = {id(f) for f in (builtins.eval, builtins.exec, builtins.compile, builtins.open,
                                        builtins.getattr, builtins.setattr, builtins.__import__,
                                        builtins.globals, builtins.locals, builtins.vars)}

_ALLOWED_NODES = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.Attribute, ast.Subscript, ast.Slice,
    ast.Tuple, ast.List, ast.Dict, ast.Set, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
    ast.Call, ast.keyword, ast.Lambda, ast.arguments, ast.arg, ast.JoinedStr, ast.FormattedValue,
    ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
)
_NODE_NAMES = {
    ast.ListComp: "list comprehensions", ast.SetComp: "set comprehensions", ast.DictComp: "dict comprehensions",
    ast.GeneratorExp: "generator expressions", ast.NamedExpr: "the walrus operator (:=)",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Starred: "star-unpacking (*args)",
    ast.MatMult: "the @ operator",
}


# ------------------------------------------------------------------- parsing
def _parse(source: Any, what: str) -> ast.Expression:
    if not isinstance(source, str):
        raise ToolInputError(f"{what} must be a string, got {type(source).__name__}: {source!r}")
    if len(source) > MAX_EXPRESSION_CHARS:
        raise UnsafeExpressionError(
            f"unsafe {what} rejected: it is {len(source)} characters long; the limit is {MAX_EXPRESSION_CHARS}")
    if "\x00" in source:
        raise UnsafeExpressionError(f"unsafe {what} rejected: it contains a NUL byte")
    text = _replace_backticks(source.strip())
    if not text:
        raise ToolInputError(f"{what} is empty")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise _syntax_error(text, what, exc) from None
    try:
        _validate(tree, source)
    except UnsafeExpressionError as exc:
        raise _rejected(exc, what, source) from None
    return tree


def _syntax_error(text: str, what: str, exc: SyntaxError) -> ToolInputError:
    """Explain why ``text`` is not an expression; imports and statements are refused outright."""
    try:
        statements = ast.parse(text, mode="exec")
    except SyntaxError:
        return ToolInputError(f"{what} {_clip(text)!r} is not valid Python: {exc.msg}")
    nodes = list(ast.walk(statements))
    if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in nodes):
        return UnsafeExpressionError(f"unsafe {what} rejected: import statements are not allowed (in {_clip(text)!r})")
    kinds = sorted({type(n).__name__ for n in statements.body})
    return UnsafeExpressionError(
        f"unsafe {what} rejected: statements ({', '.join(kinds)}) are not allowed, only a single expression "
        f"(in {_clip(text)!r})")


def _rejected(exc: UnsafeExpressionError, what: str, source: str) -> UnsafeExpressionError:
    """Prefix a rejection with what was being evaluated, once."""
    text = str(exc)
    if text.startswith("unsafe "):
        return exc
    return UnsafeExpressionError(f"unsafe {what} rejected: {text} (in {_clip(source)!r})")


@contextlib.contextmanager
def _readable_errors(what: str, source: str, failure: str) -> Iterator[None]:
    """Turn anything an evaluation raises into a rejection or a ToolInputError the model can read."""
    try:
        yield
    except UnsafeExpressionError as exc:
        raise _rejected(exc, what, source) from None
    except ToolInputError:
        raise
    except RecursionError:
        raise UnsafeExpressionError(f"{what} {source!r} nests too deeply") from None
    except Exception as exc:  # noqa: BLE001 - pandas/numpy errors become a readable message
        raise ToolInputError(f"{failure}: {type(exc).__name__}: {exc}") from None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _replace_backticks(text: str) -> str:
    """Rewrite pandas-style ```col name``` into ``df['col name']`` (outside string literals)."""
    if "`" not in text:
        return text
    out, i, quote = [], 0, None
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise ToolInputError(f"unbalanced backtick in {text!r}")
            out.append(f"df[{text[i + 1:end]!r}]")
            i = end
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _validate(tree: ast.AST, source: str) -> None:
    """Static checks: node types, underscore names, lambda shapes, f-string specs."""
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES) or isinstance(node, ast.MatMult):
            label = _NODE_NAMES.get(type(node), type(node).__name__)
            raise UnsafeExpressionError(f"{label} not allowed in expression {source!r}")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise UnsafeExpressionError(f"name {node.id!r} is not allowed (dunder names are blocked)")
        if isinstance(node, ast.Attribute):
            _check_attribute_name(node.attr)
        if isinstance(node, ast.Lambda):
            _check_lambda_args(node.args)
        if isinstance(node, ast.keyword) and node.arg is None:
            raise UnsafeExpressionError("**kwargs unpacking is not allowed in expressions")
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = node.format_spec
            if not all(isinstance(v, ast.Constant) for v in spec.values):
                raise UnsafeExpressionError("f-string format specs must be constant (no nested {...})")
            _check_format_spec("".join(str(v.value) for v in spec.values))


def _check_lambda_args(args: ast.arguments) -> None:
    if args.defaults or args.kw_defaults:
        raise UnsafeExpressionError("lambda default values are not allowed")
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise UnsafeExpressionError("lambdas may only take plain positional arguments (no *args/**kwargs)")
    for arg in args.args:
        if arg.arg.startswith("_"):
            raise UnsafeExpressionError(f"lambda argument {arg.arg!r} may not start with '_'")


def _check_attribute_name(name: str) -> None:
    if name.startswith("_"):
        raise UnsafeExpressionError(f"attribute {name!r} is not allowed (names starting with '_' are blocked)")
    if name in _DENIED_ATTRIBUTES:
        raise UnsafeExpressionError(f"attribute/method {name!r} is not allowed: it {_DENIED_ATTRIBUTES[name]}")
    if name.startswith("to_") and name not in _ALLOWED_TO_METHODS:
        raise UnsafeExpressionError(
            f"method {name!r} is not allowed: to_* writers can write files; allowed: "
            f"{', '.join(sorted(_ALLOWED_TO_METHODS))}")
    if name.startswith(_DENIED_ATTRIBUTE_PREFIXES):
        raise UnsafeExpressionError(f"attribute {name!r} is not allowed (interpreter internals / file readers)")


_FORMAT_NUMBER = re.compile(r"\d+")


def _check_format_spec(spec: str) -> None:
    if "{" in spec:
        raise UnsafeExpressionError("nested fields in format specs are not allowed")
    for number in _FORMAT_NUMBER.findall(spec):
        if int(number) > MAX_FORMAT_WIDTH:
            raise UnsafeExpressionError(f"format width/precision {number} exceeds {MAX_FORMAT_WIDTH}")


def _check_format_template(template: str) -> None:
    """``'{0.__class__}'.format(x)`` reads attributes: only plain/positional fields are allowed."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ToolInputError(f"invalid format string {template!r}: {exc}") from None
    for _, field, spec, _ in fields:
        if field and ("." in field or "[" in field):
            raise UnsafeExpressionError(
                f"format field {{{field}}} is not allowed: fields may not access attributes or items")
        if spec:
            _check_format_spec(spec)


_PERCENT_WIDTH = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_percent_template(template: str) -> None:
    for width, precision in _PERCENT_WIDTH.findall(template):
        for part in (width, precision):
            if part == "*" or (part and int(part) > MAX_FORMAT_WIDTH):
                raise UnsafeExpressionError(f"%-format width {part!r} is not allowed (limit {MAX_FORMAT_WIDTH})")


# ----------------------------------------------------------------- evaluator
def _is_vector(value: Any) -> bool:
    return isinstance(value, (pd.Series, pd.Index, pd.DataFrame, np.ndarray))


def _as_bool_vector(value: Any) -> Any:
    """Element-wise truth of a Series/array: NaN/NA count as False."""
    if isinstance(value, (pd.Series, pd.DataFrame)):
        if isinstance(value, pd.Series) and value.dtype == bool:
            return value
        return value.where(value.notna(), False).astype(bool)
    if isinstance(value, (np.ndarray, pd.Index)):
        return np.asarray(pd.Series(value).fillna(False).astype(bool))
    return bool(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _int_bits(value: Any) -> int:
    return abs(int(value)).bit_length()


def _is_text_vector(value: Any) -> bool:
    return _is_vector(value) and not isinstance(value, pd.DataFrame) and (
        value.dtype == object or pd.api.types.is_string_dtype(value.dtype))


def _guard_binop(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse operations whose result would be enormous, before computing them."""
    if isinstance(op, ast.Pow) and _is_int(left) and _is_int(right):
        if right > 0 and _int_bits(left) * int(right) > MAX_INT_BITS and abs(int(left)) > 1:
            raise UnsafeExpressionError(f"{left} ** {right} is too large (limit {MAX_INT_BITS} bits)")
    if isinstance(op, ast.LShift) and _is_int(left) and _is_int(right):
        if int(right) + _int_bits(left) > MAX_INT_BITS:
            raise UnsafeExpressionError(f"{left} << {right} is too large (limit {MAX_INT_BITS} bits)")
    if isinstance(op, ast.Mult):
        if _is_int(left) and _is_int(right) and _int_bits(left) + _int_bits(right) > MAX_INT_BITS:
            raise UnsafeExpressionError(f"integer product too large (limit {MAX_INT_BITS} bits)")
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and _is_int(count):
                if len(seq) * max(int(count), 0) > MAX_SEQUENCE_LEN:
                    raise UnsafeExpressionError(
                        f"repetition of a length-{len(seq)} {type(seq).__name__} {count} times is too large "
                        f"(limit {MAX_SEQUENCE_LEN} items)")
            if _is_text_vector(seq) and _is_int(count) and int(count) > MAX_ELEMENT_REPEAT:
                raise UnsafeExpressionError(f"repeating text values {count} times is not allowed "
                                            f"(limit {MAX_ELEMENT_REPEAT})")
    if isinstance(op, ast.Add) and isinstance(left, (str, bytes, list, tuple)) and isinstance(
            right, (str, bytes, list, tuple)) and len(left) + len(right) > MAX_SEQUENCE_LEN:
        raise UnsafeExpressionError(f"concatenation longer than {MAX_SEQUENCE_LEN} items is not allowed")
    if isinstance(op, ast.Mod) and isinstance(left, str):
        _check_percent_template(left)


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b, ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b,
    ast.BitXor: lambda a, b: a ^ b, ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
}


class _State:
    """Shared by an evaluation and every lambda it creates."""

    def __init__(self, source: str):
        self.source = source
        self.depth = 0


class _Evaluator:
    def __init__(self, names: Mapping[str, Any], state: _State):
        self.names = names
        self.state = state

    def eval(self, node: ast.AST) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:  # _validate already refused it; belt and braces
            raise UnsafeExpressionError(f"{type(node).__name__} not allowed")
        return method(node)

    # -- leaves ------------------------------------------------------------------
    def _Expression(self, node: ast.Expression) -> Any:
        return self.eval(node.body)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        name = node.id
        if name in self.names:
            return self.names[name]
        if name in _DENIED_NAMES:
            raise UnsafeExpressionError(f"name {name!r} is not allowed in expressions")
        if name.startswith("_"):
            raise UnsafeExpressionError(f"name {name!r} is not allowed (names starting with '_' are blocked "
                                        f"unless they are columns; use df['{name}'] for such a column)")
        known = [n for n in self.names if isinstance(n, str)]
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        columns = self.names.get("df")
        cols = f" Columns: {', '.join(map(str, columns.columns[:40]))}." if isinstance(columns, pd.DataFrame) else ""
        raise ToolInputError(f"unknown name {name!r} in expression {self.state.source!r}.{hint}{cols}")

    # -- containers ---------------------------------------------------------------
    def _Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.eval(e) for e in node.elts)

    def _List(self, node: ast.List) -> list:
        return [self.eval(e) for e in node.elts]

    def _Set(self, node: ast.Set) -> set:
        return {self.eval(e) for e in node.elts}

    def _Dict(self, node: ast.Dict) -> dict:
        return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values)}

    def _JoinedStr(self, node: ast.JoinedStr) -> str:
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
                continue
            item = self.eval(value.value)
            item = {-1: item, ord("s"): str(item), ord("r"): repr(item), ord("a"): ascii(item)}[value.conversion]
            spec = "".join(str(v.value) for v in value.format_spec.values) if value.format_spec else ""
            parts.append(format(item, spec))
        return "".join(parts)

    # -- operators ------------------------------------------------------------------
    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.eval(node.left), self.eval(node.right)
        _guard_binop(node.op, left, right)
        return _BINOPS[type(node.op)](left, right)

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        operand = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            return ~_as_bool_vector(operand) if _is_vector(operand) else not operand
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return +operand
        return ~operand

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        result = self.eval(node.values[0])
        for value_node in node.values[1:]:
            if _is_vector(result):
                other = self.eval(value_node)
                result = _as_bool_vector(result) & _as_bool_vector(other) if is_and else (
                    _as_bool_vector(result) | _as_bool_vector(other))
            elif bool(result) != is_and:  # python short-circuit on scalars
                return result
            else:
                result = self.eval(value_node)
        return result

    def _Compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        combined: Any = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            outcome = self._compare(op, left, right)
            if _is_vector(outcome) or _is_vector(combined):
                combined = _as_bool_vector(outcome) if combined is True else combined & _as_bool_vector(outcome)
            else:
                if not outcome:
                    return outcome
                combined = outcome
            left = right
        return combined

    @staticmethod
    def _compare(op: ast.cmpop, left: Any, right: Any) -> Any:
        vector = isinstance(left, (pd.Series, pd.Index))
        if isinstance(op, (ast.In, ast.NotIn)):
            if vector:
                values = list(right) if isinstance(right, (list, tuple, set, pd.Series, np.ndarray)) else [right]
                inside = left.isin(values)
            else:
                inside = left in right
            return ~inside if isinstance(op, ast.NotIn) and vector else (not inside if isinstance(op, ast.NotIn) else inside)
        if isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) and vector and right is None:
            # Models write `Cabin == None` / `Cabin is None` meaning "missing".
            return left.isna() if isinstance(op, (ast.Is, ast.Eq)) else left.notna()
        if isinstance(op, ast.Is):
            return left is right
        if isinstance(op, ast.IsNot):
            return left is not right
        return _CMPOPS[type(op)](left, right)

    def _IfExp(self, node: ast.IfExp) -> Any:
        test = self.eval(node.test)
        if _is_vector(test):
            mask = _as_bool_vector(test)
            return pd.Series(np.where(mask, self.eval(node.body), self.eval(node.orelse)),
                             index=getattr(mask, "index", None))
        return self.eval(node.body) if test else self.eval(node.orelse)

    # -- access -----------------------------------------------------------------------
    def _Attribute(self, node: ast.Attribute) -> Any:
        _check_attribute_name(node.attr)
        owner = self.eval(node.value)
        if isinstance(owner, _Namespace):
            return owner.lookup(node.attr)
        if owner is str and node.attr in ("format", "format_map"):
            raise UnsafeExpressionError("str.format must be called on a template string, e.g. '{}-{}'.format(a, b)")
        if isinstance(owner, str) and node.attr == "format":
            _check_format_template(owner)  # also when the bound method is passed on, e.g. to .map()
        try:
            value = getattr(owner, node.attr)
        except AttributeError:
            raise ToolInputError(f"{type(owner).__name__} object has no attribute {node.attr!r} "
                                 f"(in {self.state.source!r})") from None
        if isinstance(value, types.ModuleType) or id(value) in _DANGEROUS_CALLABLES:
            raise UnsafeExpressionError(f"attribute {node.attr!r} leads to a module or a dangerous function")
        return value

    def _Subscript(self, node: ast.Subscript) -> Any:
        owner = self.eval(node.value)
        key = self.eval(node.slice)
        if isinstance(owner, _Namespace):
            raise UnsafeExpressionError(f"{owner.label} cannot be subscripted")
        return owner[key]

    def _Slice(self, node: ast.Slice) -> slice:
        parts = (node.lower, node.upper, node.step)
        return slice(*(None if p is None else self.eval(p) for p in parts))

    # -- calls ----------------------------------------------------------------------
    def _Call(self, node: ast.Call) -> Any:
        func = self.eval(node.func)
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords}
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        _guard_call(func, name, args, kwargs)
        return func(*args, **kwargs)

    def _Lambda(self, node: ast.Lambda) -> Callable:
        return _make_lambda(node, self.names, self.state)


def _guard_call(func: Any, name: str, args: list, kwargs: dict) -> None:
    """Runtime checks that depend on the values passed."""
    if not callable(func):
        raise ToolInputError(f"{name or type(func).__name__!r} is not callable")
    if id(func) in _DANGEROUS_CALLABLES:
        raise UnsafeExpressionError(f"calling {name!r} is not allowed")
    if kwargs.get("inplace"):
        raise UnsafeExpressionError("inplace=True is not allowed: tools must not change their inputs")
    if kwargs.get("out") is not None:
        raise UnsafeExpressionError("out= is not allowed: it writes into an existing array")
    owner = getattr(func, "__self__", None)
    if name in ("format", "format_map") and isinstance(owner, str):
        _check_format_template(owner)
    if name in _STRING_DISPATCH_METHODS:
        for value in _flatten(list(args) + list(kwargs.values())):
            if isinstance(value, str) and value not in _SAFE_DISPATCH_STRINGS:
                raise UnsafeExpressionError(
                    f"{name}() with the string {value!r} is not allowed; pass a function or lambda, or one of "
                    f"{', '.join(sorted(_SAFE_DISPATCH_STRINGS))}")
    if name in _SIZED_METHODS:
        for value in list(args) + list(kwargs.values()):
            if _is_int(value) and abs(int(value)) > MAX_SIZE_ARGUMENT:
                raise UnsafeExpressionError(f"{name}({value}) is too large (limit {MAX_SIZE_ARGUMENT})")
    if name == "join" and isinstance(owner, str) and args and isinstance(args[0], (list, tuple)):
        if sum(len(str(a)) for a in args[0]) + len(owner) * len(args[0]) > MAX_SEQUENCE_LEN:
            raise UnsafeExpressionError("joined string too long")


def _flatten(values: list) -> list:
    out = []
    for value in values:
        if isinstance(value, (list, tuple)):
            out.extend(_flatten(list(value)))
        elif isinstance(value, dict):
            out.extend(_flatten(list(value.values())))
        else:
            out.append(value)
    return out


def _make_lambda(node: ast.Lambda, outer: Mapping[str, Any], state: _State) -> Callable:
    params = [a.arg for a in node.args.args]

    def safe_lambda(*args: Any) -> Any:
        if len(args) != len(params):
            raise ToolInputError(f"lambda takes {len(params)} argument(s) ({', '.join(params)}), got {len(args)}")
        if state.depth >= MAX_LAMBDA_DEPTH:
            raise UnsafeExpressionError(f"lambda calls nested deeper than {MAX_LAMBDA_DEPTH} levels")
        state.depth += 1
        try:
            return _Evaluator(ChainMap(dict(zip(params, args)), outer), state).eval(node.body)
        finally:
            state.depth -= 1

    safe_lambda.__name__ = safe_lambda.__qualname__ = "<lambda>"
    safe_lambda.source = state.source  # type: ignore[attr-defined]
    return safe_lambda


# ----------------------------------------------------------------- public API
def _base_names() -> dict[str, Any]:
    return {**SAFE_BUILTINS, "np": NUMPY, "numpy": NUMPY, "pd": PANDAS, "pandas": PANDAS, "math": MATH,
            "nan": np.nan, "inf": np.inf, "None": None, "True": True, "False": False}


def _frame_names(df: pd.DataFrame) -> ChainMap:
    if not isinstance(df, pd.DataFrame):
        raise ToolInputError(f"expected a DataFrame, got {type(df).__name__}")
    # Columns resolve lazily (df[c] for a 100-column frame is cheap but needless).
    columns = _ColumnLookup(df)
    return ChainMap({"df": df}, columns, _base_names())


class _ColumnLookup(Mapping):
    """Bare identifier columns, looked up on demand."""

    def __init__(self, df: pd.DataFrame):
        self.df = df
        self.keys_ = [c for c in df.columns if isinstance(c, str) and c.isidentifier()]
        self.key_set = set(self.keys_)

    def __getitem__(self, key: str) -> Any:
        if key in self.key_set:
            return self.df[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self.key_set

    def __iter__(self):
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)


def _run(tree: ast.Expression, names: Mapping[str, Any], source: str) -> Any:
    with _readable_errors("expression", source, f"could not evaluate {source!r}"):
        return _Evaluator(names, _State(source)).eval(tree)


def evaluate_expression(expr: str, df: pd.DataFrame) -> Any:
    """Evaluate a pandas expression over ``df``'s columns; returns a Series or a scalar.

    Examples: ``"RoomService + FoodCourt"``, ``"np.log1p(Age)"``, ``"df['Age'] * 2"``,
    ``"Cabin.str.split('/').str[0]"``, ```Room Service` / 2``.
    """
    tree = _parse(expr, "expression")
    return _run(tree, _frame_names(df), expr)


def evaluate_condition(cond: str, df: pd.DataFrame) -> pd.Series:
    """Evaluate a boolean condition over ``df``; returns a bool Series aligned with ``df``.

    ``and``/``or``/``not`` work element-wise; missing values count as False.
    """
    tree = _parse(cond, "condition")
    result = _run(tree, _frame_names(df), cond)
    if isinstance(result, (bool, np.bool_)):
        return pd.Series(bool(result), index=df.index)
    if isinstance(result, (np.ndarray, pd.Index)):
        result = pd.Series(np.asarray(result), index=df.index) if len(result) == len(df) else result
    if not isinstance(result, pd.Series):
        raise ToolInputError(f"condition {cond!r} must give True/False per row, got {type(result).__name__}")
    if len(result) != len(df):
        raise ToolInputError(f"condition {cond!r} gave {len(result)} values for {len(df)} rows")
    values = result.dropna()
    if not (pd.api.types.is_bool_dtype(result.dtype)
            or (result.dtype == object and values.map(lambda v: isinstance(v, (bool, np.bool_))).all())):
        raise ToolInputError(f"condition {cond!r} must be boolean, got values of dtype {result.dtype} "
                             "(compare with ==, <, >, .isna(), .str.contains(...))")
    mask = result.where(result.notna(), False).astype(bool)
    if not mask.index.equals(df.index):
        mask = pd.Series(mask.to_numpy(), index=df.index)
    return mask


def compile_lambda(src: str) -> Callable[..., Any]:
    """Turn a lambda string (``"lambda x: x.split('/')[0]"``) into a safe callable.

    A bare expression is accepted as the body of ``lambda x: ...``. A callable
    passed in is returned unchanged only if it came from this module.
    """
    if callable(src) and getattr(src, "__name__", "") == "<lambda>" and hasattr(src, "source"):
        return src  # already compiled by us
    tree = _parse(src, "function")
    body = tree.body
    if not isinstance(body, ast.Lambda):
        body = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="x")], vararg=None,
                                             kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
                          body=body)
    state = _State(src)
    fn = _make_lambda(body, _base_names(), state)

    def call(*args: Any) -> Any:
        with _readable_errors("function", src, f"function {src!r} failed on {_short(args)}"):
            return fn(*args)

    call.__name__ = call.__qualname__ = "<lambda>"
    call.source = src  # type: ignore[attr-defined]
    return call


def _short(args: tuple) -> str:
    text = ", ".join(repr(a) for a in args)
    return text if len(text) <= 200 else text[:200] + "..."
