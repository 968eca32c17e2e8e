"""mltb's expression language: model-written expressions, conditions and lambdas, without name dispatch.

The model writes strings such as ``"np.log1p(RoomService + FoodCourt)"``, ``"Age > 30 and HomePlanet ==
'Earth'"`` or ``"lambda x: x.split('/')[0] if isinstance(x, str) else None"``. Python's :mod:`ast` only
*parses* them; the tree is then compiled into mltb's own small language (closures written in this
module) and evaluated by mltb code over the frame's columns.

Why a language and not an allow-list over real pandas objects (the design before issue 20): pandas turns
strings back into calls in too many places (``agg(x='__setattr__')``, sets/arrays/Index of method names,
``groupby().agg(..., x='_op_via_apply')`` reaching ``DataFrame.eval``). Here no model text ever reaches
pandas or numpy as a name: a call names a function in :data:`FUNCTIONS`, a table of functions mltb
implements over numpy/pandas values with typed, checked arguments; there is no attribute access on data
objects, no method call by name, and functions are never values. Dotted spellings models write
(``np.log1p(x)``, ``x.fillna(0)``, ``x.str.lower()``, ``x.dt.year``, ``x.split('/')[0]``) are static
*aliases* of table functions, resolved here at compile time from the shape of the text, never an
attribute lookup on a value.

Grammar, function table and error examples: ``docs/expressions.md`` (its table is generated from
:func:`function_reference`). The text the tools' documentation shows is :data:`EXPRESSION_DOC`.
"""
from __future__ import annotations

import ast
import difflib
import math
import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mltb_core.toolkit.registry import ToolInputError
from mltb_core.toolkit.validation import DTYPE_NAMES, TRACKING_COLUMN, close_matches, resolve_dtype

__all__ = [
    "ExpressionError", "ExpressionRejected", "Expression", "Lambda", "FUNCTIONS", "EXPRESSION_DOC",
    "compile_expression", "compile_lambda", "evaluate_expression", "evaluate_condition", "function_reference",
    "documents_expressions",
    "MAX_EXPRESSION_CHARS", "MAX_ERROR_CHARS", "MAX_TEXT_VALUE_CHARS", "MAX_TOTAL_TEXT_CHARS",
]

MAX_EXPRESSION_CHARS = 2_000     # longest expression accepted
MAX_ERROR_CHARS = 2_000          # longest error message handed back to the model
MAX_NODES = 500                  # syntax nodes in one expression
MAX_DEPTH = 150                  # nesting of operators/calls (a + b + c ... nests once per term)
MAX_STRING_LITERAL = 1_000       # characters in one string literal
MAX_LIST_LITERAL = 1_000         # items in one literal list (x in [...])
MAX_INT_BITS = 64                # integer literals and integer results of scalar arithmetic
MAX_TEXT_VALUE_CHARS = 10_000    # a text value built by repeat/replace/concatenation
MAX_TOTAL_TEXT_CHARS = 20_000_000  # all text values a repeat/replace may build in one call
_SOURCE_SHOWN = 200              # characters of the source quoted in an error
# The file name ast.parse is given. On some syntax errors CPython tries to open it to quote the line (an audit
# 'open' event); only the message (exc.msg) is used, never that text.
PARSE_FILENAME = "<mltb expression>"


# ------------------------------------------------------------------ errors
def _cap(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    if len(text) <= limit:
        return text
    keep = limit - 40
    return f"{text[:keep]} ... [{len(text) - keep} characters cut]"


class ExpressionError(ToolInputError):
    """A model-written expression is invalid or failed; the message (capped) goes back to the model."""

    def __init__(self, message: str):
        super().__init__(_cap(str(message)))


class ExpressionRejected(ExpressionError):
    """The text uses a construct that is not part of mltb's expression language."""


def _clip(source: str) -> str:
    return source if len(source) <= _SOURCE_SHOWN else source[:_SOURCE_SHOWN] + "..."


# ------------------------------------------------------------------ values
def _is_vector(value: Any) -> bool:
    return isinstance(value, pd.Series)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bool, np.generic, pd.Timestamp, pd.Timedelta))


def _is_text_series(value: Any) -> bool:
    return _is_vector(value) and (pd.api.types.is_object_dtype(value.dtype) or pd.api.types.is_string_dtype(value.dtype)
                                  or isinstance(value.dtype, pd.CategoricalDtype))


def _mask(value: Any) -> Any:
    """Element-wise truth: missing counts as False."""
    if _is_vector(value):
        if pd.api.types.is_bool_dtype(value.dtype) and not value.hasnans:
            return value.astype(bool)
        return value.where(value.notna(), False).astype(bool)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(value)


def _numeric(value: Any, fname: str) -> Any:
    """Numbers only: numpy would call a method *named* like the ufunc on each object element."""
    if _is_vector(value):
        if pd.api.types.is_bool_dtype(value.dtype):
            return value.astype(float)
        if pd.api.types.is_numeric_dtype(value.dtype):
            return value
        try:
            return pd.to_numeric(value.astype(object), errors="raise").astype(float)
        except (ValueError, TypeError):
            raise ExpressionError(f"{fname}() needs numbers, got a column of dtype {value.dtype} with text "
                                  "(convert first with to_numeric(x) or astype(x, 'float'))") from None
    if value is None:
        return np.nan
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value
    raise ExpressionError(f"{fname}() needs a number, got {type(value).__name__} {_clip(repr(value))}")


def _text(value: Any, fname: str) -> Any:
    if _is_vector(value):
        if not _is_text_series(value):
            raise ExpressionError(f"{fname}() needs text, got a column of dtype {value.dtype} "
                                  "(convert first with str(x))")
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return value
    raise ExpressionError(f"{fname}() needs text, got {type(value).__name__} {_clip(repr(value))}")


def _datetimes(value: Any, fname: str) -> pd.Series:
    if not _is_vector(value):
        raise ExpressionError(f"{fname}() needs a column, got {type(value).__name__}")
    if pd.api.types.is_datetime64_any_dtype(value.dtype):
        return value
    if _is_text_series(value):
        return pd.to_datetime(value, errors="coerce", format="mixed")
    raise ExpressionError(f"{fname}() needs dates (or text that parses as dates), got dtype {value.dtype}")


def _timedeltas(value: Any, fname: str) -> pd.Series:
    if _is_vector(value) and pd.api.types.is_timedelta64_dtype(value.dtype):
        return value
    got = value.dtype if _is_vector(value) else type(value).__name__
    raise ExpressionError(f"{fname}() needs time differences (a difference of two date columns), got {got}")


def _same_rows(a: Any, b: Any) -> tuple[Any, Any]:
    """Two Series from one frame share its index; anything else is matched by position, never aligned
    (alignment of duplicated labels is an outer product)."""
    if _is_vector(a) and _is_vector(b) and a.index is not b.index and not a.index.equals(b.index):
        if len(a) != len(b):
            raise ExpressionError(f"cannot combine {len(a)} values with {len(b)} values")
        b = pd.Series(b.to_numpy(), index=a.index, name=b.name)
    return a, b


def _text_lengths(value: Any) -> tuple[int, int]:
    """(longest text, number of text values) in a scalar or Series."""
    if isinstance(value, str):
        return len(value), 1
    if _is_vector(value) and (pd.api.types.is_object_dtype(value.dtype) or pd.api.types.is_string_dtype(value.dtype)):
        lengths = [len(v) for v in value.tolist() if isinstance(v, str)]
        return (max(lengths), len(lengths)) if lengths else (0, 0)
    return 0, 0


def _check_text_growth(longest: int, count: int, factor: float, what: str) -> None:
    if longest * factor > MAX_TEXT_VALUE_CHARS or longest * factor * count > MAX_TOTAL_TEXT_CHARS:
        raise ExpressionError(f"{what} would build text values of up to {int(longest * factor):,} characters "
                              f"(limits: {MAX_TEXT_VALUE_CHARS:,} per value, {MAX_TOTAL_TEXT_CHARS:,} in all)")


def _check_int(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise ExpressionError(f"integer result too large (limit {MAX_INT_BITS} bits)")
    return value


def _int_pow(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b) and b > 0 and abs(int(a)) > 1 and int(b) * abs(int(a)).bit_length() > MAX_INT_BITS + 1:
        raise ExpressionError(f"{a} ** {b} is too large (integer limit {MAX_INT_BITS} bits); write a float, e.g. {a}.0 ** {b}")
    return _check_int(operator.pow(a, b))


def _mul(a: Any, b: Any) -> Any:
    for text, count in ((a, b), (b, a)):
        longest, n = _text_lengths(text)
        if n and (_is_int(count) or (_is_vector(count) and pd.api.types.is_integer_dtype(count.dtype))):
            times = int(count) if _is_int(count) else int(count.max()) if len(count) else 0
            _check_text_growth(longest, n, max(times, 0), "repeating text")
    return _check_int(a * b)


def _add(a: Any, b: Any) -> Any:
    (la, na), (lb, nb) = _text_lengths(a), _text_lengths(b)
    if (na or nb) and la + lb > MAX_TEXT_VALUE_CHARS:
        raise ExpressionError(f"joining text would build values of {la + lb:,} characters (limit {MAX_TEXT_VALUE_CHARS:,})")
    return _check_int(a + b)


def _mod(a: Any, b: Any) -> Any:
    if _text_lengths(a)[1]:   # 'text' % value is printf formatting ('%999999999s' builds a gigabyte)
        raise ExpressionRejected("% on text (printf-style formatting) is not part of mltb's expression language; "
                                 "% is the remainder of numbers")
    return _check_int(a % b)


def _arith(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: _check_int(op(a, b))


_BINARY: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", _add), ast.Sub: ("-", _arith(operator.sub)), ast.Mult: ("*", _mul),
    ast.Div: ("/", operator.truediv), ast.FloorDiv: ("//", _arith(operator.floordiv)), ast.Mod: ("%", _mod),
    ast.Pow: ("**", _int_pow), ast.BitAnd: ("&", operator.and_), ast.BitOr: ("|", operator.or_),
    ast.BitXor: ("^", operator.xor),
}
_COMPARE: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Eq: ("==", operator.eq), ast.NotEq: ("!=", operator.ne), ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le), ast.Gt: (">", operator.gt), ast.GtE: (">=", operator.ge),
}


def _logical(op: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    if _is_vector(a) or _is_vector(b):
        a, b = _same_rows(a, b)
        ma, mb = _mask(a), _mask(b)
        return op(ma, mb)
    return op(_mask(a), _mask(b))


def _bitwise(op: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    """``&``/``|``/``^``: element-wise logic on truth values, integer bit operations on integers."""
    ints = all(_is_int(v) or (_is_vector(v) and pd.api.types.is_integer_dtype(v.dtype)) for v in (a, b))
    return op(*_same_rows(a, b)) if ints else _logical(op, a, b)


# ------------------------------------------------------------------ evaluation environment
@dataclass
class _Env:
    """What names resolve to: the bound frame's columns, or a lambda's one parameter."""

    frame: pd.DataFrame | None
    index: pd.Index
    param: str | None = None
    value: Any = None

    def column(self, name: Any, owner: str | None) -> pd.Series:
        frame = self.frame if owner in (None, "df") else (self.value if isinstance(self.value, pd.DataFrame) else None)
        if frame is None:
            if owner is None:
                raise ExpressionError(f"unknown name {name!r}: inside a lambda only its parameter {self.param!r} "
                                      "and constants are names")
            raise ExpressionError(f"{owner}[{name!r}]: {owner!r} is one value, not a row (the function was given "
                                  "one column; list several source columns to get a row)")
        if name in frame.columns and not isinstance(frame.columns.get_loc(name), (slice, np.ndarray)):
            return frame[name]
        if name in frame.columns:
            raise ExpressionError(f"column name {name!r} is not unique in the frame")
        close = close_matches(name, frame.columns)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ExpressionError(f"unknown column {name!r}.{hint}")


Node = Callable[[_Env], Any]


# ------------------------------------------------------------------ the function table
_REQUIRED = object()
_LITERAL_KINDS = ("text", "int", "dtype", "values")


@dataclass(frozen=True)
class Param:
    """One argument: ``value`` (any expression) or a literal kind checked at compile time:
    ``text`` (a string literal), ``int`` (an integer literal), ``dtype`` (a type name from the dtype
    table), ``values`` (a literal list of constants)."""

    name: str
    kind: str = "value"
    default: Any = _REQUIRED


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    impl: Callable[..., Any]
    doc: str
    group: str
    variadic: bool = False     # min/max: two or more values


FUNCTIONS: dict[str, Function] = {}


def _register(name: str, params: str, doc: str, group: str, variadic: bool = False) -> Callable:
    """``params`` like ``"x, lower=None:value, upper=None"``: name[=default][:kind]."""
    parsed = []
    for item in filter(None, (p.strip() for p in params.split(","))):
        spec, _, kind = item.partition(":")
        pname, eq, default = spec.partition("=")
        if (kind.strip() or "value") not in ("value", *_LITERAL_KINDS):
            raise ValueError(f"{name}: unknown argument kind {kind!r}")
        parsed.append(Param(pname.strip(), kind.strip() or "value",
                            ast.literal_eval(default) if eq else _REQUIRED))

    def add(impl: Callable) -> Callable:
        FUNCTIONS[name] = Function(name, tuple(parsed), impl, doc, group, variadic)
        return impl
    return add


def _unary_numeric(name: str, ufunc: np.ufunc, doc: str) -> None:
    _register(name, "x", doc, "math")(lambda x: ufunc(_numeric(x, name)))


for _name, _ufunc, _doc in (
        ("log", np.log, "natural logarithm"), ("log1p", np.log1p, "log(1 + x)"), ("log2", np.log2, "base-2 log"),
        ("log10", np.log10, "base-10 log"), ("exp", np.exp, "e ** x"), ("expm1", np.expm1, "exp(x) - 1"),
        ("sqrt", np.sqrt, "square root"), ("cbrt", np.cbrt, "cube root"), ("square", np.square, "x ** 2"),
        ("abs", np.abs, "absolute value"), ("sign", np.sign, "-1, 0 or 1"), ("floor", np.floor, "round down"),
        ("ceil", np.ceil, "round up"), ("trunc", np.trunc, "round toward zero"), ("sin", np.sin, "sine"),
        ("cos", np.cos, "cosine"), ("tan", np.tan, "tangent"), ("tanh", np.tanh, "hyperbolic tangent"),
        ("arctan", np.arctan, "arc tangent"), ("isfinite", np.isfinite, "not NaN and not infinite"),
        ("isinf", np.isinf, "infinite")):
    _unary_numeric(_name, _ufunc, _doc)


@_register("round", "x, ndigits=0:int", "round to ndigits decimals (-15..15)", "math")
def _round(x: Any, ndigits: int) -> Any:
    if not -15 <= ndigits <= 15:
        raise ExpressionError(f"round(): ndigits must be between -15 and 15, got {ndigits}")
    return np.round(_numeric(x, "round"), ndigits)


@_register("clip", "x, lower=None, upper=None", "limit values to [lower, upper] (None: no bound)", "math")
def _clip_values(x: Any, lower: Any, upper: Any) -> Any:
    x = _numeric(x, "clip")
    lower = None if lower is None else _numeric(lower, "clip")
    upper = None if upper is None else _numeric(upper, "clip")
    if _is_vector(x):
        x, lower = _same_rows(x, lower)
        x, upper = _same_rows(x, upper)
        return x.clip(lower=lower, upper=upper)
    return np.clip(x, -np.inf if lower is None else lower, np.inf if upper is None else upper)


@_register("power", "x, y", "x ** y", "math")
def _power(x: Any, y: Any) -> Any:
    return _int_pow(*_same_rows(_numeric(x, "power"), _numeric(y, "power")))


def _elementwise_extreme(name: str, fn: Callable) -> Callable:
    def impl(*values: Any) -> Any:
        if len(values) == 1:   # a reduction over one column
            value = _numeric(values[0], name)
            return _reduce(value, name)
        nums = [_numeric(v, name) for v in values]
        result = nums[0]
        for other in nums[1:]:
            result, other = _same_rows(result, other)
            result = fn(result, other)
        return result
    return impl


def _reduce(value: Any, name: str) -> Any:
    """A reduction chosen from mltb's own table (never a name looked up on the value)."""
    if not _is_vector(value):
        return value
    result = _REDUCTIONS[name](value)
    return None if pd.isna(result) else result.item() if isinstance(result, np.generic) else result


_REDUCTIONS: dict[str, Callable[[pd.Series], Any]] = {
    "mean": pd.Series.mean, "median": pd.Series.median, "sum": pd.Series.sum, "std": pd.Series.std,
    "var": pd.Series.var, "min": pd.Series.min, "max": pd.Series.max,
}

_register("maximum", "x, y", "element-wise larger of two values (NaN if either is NaN)", "math")(
    _elementwise_extreme("maximum", np.maximum))
_register("minimum", "x, y", "element-wise smaller of two values (NaN if either is NaN)", "math")(
    _elementwise_extreme("minimum", np.minimum))
_register("max", "x", "max(x): the column's largest value; max(a, b, ...): element-wise largest (missing ignored)",
          "math", variadic=True)(_elementwise_extreme("max", np.fmax))
_register("min", "x", "min(x): the column's smallest value; min(a, b, ...): element-wise smallest (missing ignored)",
          "math", variadic=True)(_elementwise_extreme("min", np.fmin))
for _name in ("mean", "median", "sum", "std", "var"):
    _register(_name, "x", f"the column's {_name} (missing values skipped)", "reductions")(
        (lambda n: lambda x: _reduce(_numeric(x, n), n))(_name))


# -- missing values and choices
@_register("isnull", "x", "True where the value is missing", "missing")
def _isnull(x: Any) -> Any:
    return x.isna() if _is_vector(x) else bool(pd.isna(x))


@_register("notnull", "x", "True where the value is present", "missing")
def _notnull(x: Any) -> Any:
    return x.notna() if _is_vector(x) else not pd.isna(x)


@_register("fillna", "x, value", "x with missing values replaced by value (a constant or another column)", "missing")
def _fillna(x: Any, value: Any) -> Any:
    if not _is_vector(x):
        return value if pd.isna(x) else x
    if not (_is_vector(value) or _is_scalar(value)):
        raise ExpressionError("fillna(): value must be a constant or a column")
    x, value = _same_rows(x, value)
    return x.where(x.notna(), value)


@_register("where", "condition, if_true, if_false", "if_true where condition holds, else if_false (per row)", "missing")
def _where(condition: Any, if_true: Any, if_false: Any) -> Any:
    mask = _mask(condition)
    if not _is_vector(mask):
        return if_true if mask else if_false
    mask, if_true = _same_rows(mask, if_true)
    mask, if_false = _same_rows(mask, if_false)
    pick = mask.to_numpy()
    native = [v.to_numpy() if _is_vector(v) else v for v in (if_true, if_false)]
    if all((isinstance(v, np.ndarray) and v.dtype.kind in "biuf")
           or (isinstance(v, (int, float, np.number)) and not isinstance(v, bool)) for v in native):
        return pd.Series(np.where(pick, native[0], native[1]), index=mask.index)   # numbers: no object detour

    def column(value: Any) -> np.ndarray:
        if _is_vector(value):
            return value.to_numpy(dtype=object)
        out = np.empty(len(pick), dtype=object)
        out[:] = [value] * len(pick)
        return out
    values = np.where(pick, column(if_true), column(if_false))
    result = pd.Series(values, index=mask.index, dtype=object)
    return result.where(result.notna(), np.nan).infer_objects()


@_register("between", "x, lower, upper", "lower <= x <= upper", "missing")
def _between(x: Any, lower: Any, upper: Any) -> Any:
    return _logical(operator.and_, _compare(operator.ge, x, lower), _compare(operator.le, x, upper))


@_register("isin", "x, values:values", "True where x is one of the listed constants (x in [...])", "missing")
def _isin(x: Any, values: list) -> Any:
    return x.isin(values) if _is_vector(x) else x in values


def _is_type_impl(kinds: tuple[type, ...]) -> Callable[[Any], Any]:
    """Python's isinstance on each value, except that a missing value (None/NaN/NaT) is of no type."""
    def one(v: Any) -> bool:
        return not pd.isna(v) and isinstance(v, kinds)

    def test(x: Any) -> Any:
        if _is_vector(x):
            return pd.Series([one(v) for v in x.tolist()], index=x.index, dtype=bool)
        return one(x.item() if isinstance(x, np.generic) else x)
    return test


_TYPE_TESTS = {"str": (str,), "int": (int,), "float": (float,), "bool": (bool,), "number": (int, float)}
for _name, _kinds in _TYPE_TESTS.items():
    _register(f"is_{_name}", "x", f"True where the value is a {_name}, missing values never (isinstance(x, {_name}) is an alias)",
              "types")(_is_type_impl(_kinds))


# -- casts
@_register("astype", "x, dtype:dtype", "cast to a type from the dtype table (int, float, str, bool, category, ...)",
           "types")
def _astype(x: Any, dtype: str) -> Any:
    if not _is_vector(x):
        x = pd.Series([x])
        return _astype(x, dtype).iloc[0]
    if dtype.startswith("datetime"):
        return pd.to_datetime(x, errors="coerce", format="mixed")
    if dtype.startswith(("int", "uint")) and x.isna().any():
        raise ExpressionError(f"cannot cast {int(x.isna().sum())} missing value(s) to {dtype}: fill them first "
                              "(fillna(x, 0)) or cast to 'float' or 'Int64'")
    if dtype == "str":
        return x.astype(object).where(x.isna(), x.astype(str)) if x.hasnans else x.astype(str)
    try:
        return x.astype(dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ExpressionError(f"cannot cast a column of dtype {x.dtype} to {dtype}: {_clip(str(exc))}") from None


@_register("to_numeric", "x", "parse as numbers; unparseable values become missing", "types")
def _to_numeric(x: Any) -> Any:
    return pd.to_numeric(x, errors="coerce") if _is_vector(x) else pd.to_numeric(pd.Series([x]), errors="coerce").iloc[0]


@_register("to_datetime", "x, format=None:text", "parse as dates (format: a strftime pattern, e.g. '%Y-%m-%d')", "dates")
def _to_datetime(x: Any, format: str | None) -> Any:
    if not _is_vector(x):
        raise ExpressionError("to_datetime() needs a column")
    return pd.to_datetime(x, errors="coerce", format=format or "mixed")


_DT_FIELDS = {
    "year": "year", "month": "month", "day": "day", "hour": "hour", "minute": "minute", "second": "second",
    "dayofweek": "day_of_week", "dayofyear": "day_of_year", "quarter": "quarter",
}
for _name, _field in _DT_FIELDS.items():
    _register(f"dt_{_name}", "x", f"the {_name} of a date (text is parsed as with to_datetime)", "dates")(
        (lambda n, f: lambda x: _dt_field(_datetimes(x, f"dt_{n}"), f))(_name, _field))


def _dt_field(stamps: pd.Series, field_name: str) -> pd.Series:
    # field_name comes from _DT_FIELDS (mltb's table), never from the model.
    return _DT_ACCESSORS[field_name](stamps.dt)


_DT_ACCESSORS: dict[str, Callable[[Any], pd.Series]] = {
    "year": lambda d: d.year, "month": lambda d: d.month, "day": lambda d: d.day, "hour": lambda d: d.hour,
    "minute": lambda d: d.minute, "second": lambda d: d.second, "day_of_week": lambda d: d.day_of_week,
    "day_of_year": lambda d: d.day_of_year, "quarter": lambda d: d.quarter,
}

_register("dt_days", "x", "whole days of a time difference", "dates")(lambda x: _timedeltas(x, "dt_days").dt.days)
_register("dt_total_seconds", "x", "seconds of a time difference", "dates")(
    lambda x: _timedeltas(x, "dt_total_seconds").dt.total_seconds())


# -- text
def _text_op(name: str, series_fn: Callable[[pd.Series], Any], scalar_fn: Callable[[str], Any]) -> Callable:
    def impl(x: Any, *args: Any) -> Any:
        x = _text(x, name)
        if _is_vector(x):
            return series_fn(x, *args)
        return None if x is None else scalar_fn(x, *args)
    return impl


_register("str_len", "x", "number of characters (len(x) is an alias)", "text")(
    _text_op("str_len", lambda s: s.str.len(), len))
_register("str_lower", "x", "lower case", "text")(_text_op("str_lower", lambda s: s.str.lower(), str.lower))
_register("str_upper", "x", "upper case", "text")(_text_op("str_upper", lambda s: s.str.upper(), str.upper))
_register("str_strip", "x", "without surrounding spaces", "text")(_text_op("str_strip", lambda s: s.str.strip(), str.strip))
_register("str_contains", "x, text:text", "True where x contains text (plain text, not a pattern; missing: False)",
          "text")(_text_op("str_contains", lambda s, t: s.str.contains(t, regex=False).fillna(False).astype(bool),
                           lambda v, t: t in v))
_register("str_startswith", "x, text:text", "True where x starts with text", "text")(
    _text_op("str_startswith", lambda s, t: s.str.startswith(t).fillna(False).astype(bool), str.startswith))
_register("str_endswith", "x, text:text", "True where x ends with text", "text")(
    _text_op("str_endswith", lambda s, t: s.str.endswith(t).fillna(False).astype(bool), str.endswith))


def _split_part(value: str, sep: str, index: int) -> Any:
    parts = value.split(sep)
    return parts[index] if -len(parts) <= index < len(parts) else None


@_register("str_split_part", "x, sep:text, index:int",
           "part number index (0 = first, -1 = last) of x split at sep; missing if there is no such part", "text")
def _str_split_part(x: Any, sep: str, index: int) -> Any:
    if not sep:
        raise ExpressionError("str_split_part(): sep must not be empty")
    return _text_op("str_split_part", lambda s, a, b: s.map(lambda v: _split_part(v, a, b) if isinstance(v, str) else None)
                    .astype(object), _split_part)(x, sep, index)


def _slice_text(value: str, start: int | None, stop: int | None) -> str:
    return value[start:stop]


@_register("str_slice", "x, start=None:int, stop=None:int", "characters start..stop-1 (x[start:stop] is an alias)", "text")
def _str_slice(x: Any, start: int | None, stop: int | None) -> Any:
    return _text_op("str_slice", lambda s, a, b: s.str.slice(a, b), _slice_text)(x, start, stop)


@_register("str_get", "x, index:int", "the character at index (x[index] is an alias); missing if too short", "text")
def _str_get(x: Any, index: int) -> Any:
    return _text_op("str_get", lambda s, i: s.str.get(i), lambda v, i: v[i] if -len(v) <= i < len(v) else None)(x, index)


@_register("str_replace", "x, old:text, new:text", "x with every old (plain text) replaced by new", "text")
def _str_replace(x: Any, old: str, new: str) -> Any:
    if not old:
        raise ExpressionError("str_replace(): old must not be empty")
    longest, count = _text_lengths(x)
    if len(new) > len(old):
        _check_text_growth(longest, count, len(new) / len(old), "str_replace()")
    return _text_op("str_replace", lambda s, a, b: s.str.replace(a, b, regex=False), str.replace)(x, old, new)


# ------------------------------------------------------------------ aliases (resolved at compile time)
_MODULES = ("np", "numpy", "math", "pd", "pandas")
# module.member -> table function (same name unless listed)
_MODULE_FUNCTIONS: dict[str, dict[str, str]] = {
    "np": {**{n: n for n in ("log log1p log2 log10 exp expm1 sqrt cbrt square abs sign floor ceil trunc sin cos tan "
                             "tanh arctan isfinite isinf round clip where maximum minimum power mean median sum std "
                             "var min max").split()},
           "absolute": "abs", "around": "round", "fmax": "max", "fmin": "min", "isnan": "isnull", "nanmean": "mean",
           "nanmedian": "median", "nansum": "sum", "nanstd": "std", "nanmax": "max", "nanmin": "min", "amax": "max",
           "amin": "min", "isin": "isin"},
    "math": {**{n: n for n in "log log1p log2 log10 exp expm1 sqrt floor ceil trunc sin cos tan tanh".split()},
             "fabs": "abs", "isnan": "isnull", "isinf": "isinf", "isfinite": "isfinite"},
    "pd": {"isna": "isnull", "isnull": "isnull", "notna": "notnull", "notnull": "notnull",
           "to_datetime": "to_datetime", "to_numeric": "to_numeric"},
}
_MODULE_FUNCTIONS["numpy"], _MODULE_FUNCTIONS["pandas"] = _MODULE_FUNCTIONS["np"], _MODULE_FUNCTIONS["pd"]
_CONSTANTS: dict[str, Any] = {"nan": np.nan, "NaN": np.nan, "inf": np.inf, "pi": np.pi}
_MODULE_CONSTANTS: dict[str, dict[str, Any]] = {
    "np": {"nan": np.nan, "NaN": np.nan, "inf": np.inf, "pi": np.pi, "e": np.e},
    "math": {"nan": np.nan, "inf": np.inf, "pi": np.pi, "e": np.e},
    "pd": {"NA": None, "NaT": None},
}
_MODULE_CONSTANTS["numpy"], _MODULE_CONSTANTS["pandas"] = _MODULE_CONSTANTS["np"], _MODULE_CONSTANTS["pd"]
# Python builtins models write -> table function
_BUILTIN_FUNCTIONS = {"abs": "abs", "round": "round", "min": "min", "max": "max", "len": "str_len",
                      "sum": "sum"}
_CAST_BUILTINS = {"str": "str", "int": "int", "float": "float", "bool": "bool"}
# value.method(...) -> table function with value as the first argument
_METHODS = {
    "fillna": "fillna", "isna": "isnull", "isnull": "isnull", "notna": "notnull", "notnull": "notnull",
    "astype": "astype", "clip": "clip", "round": "round", "abs": "abs", "isin": "isin", "between": "between",
    "mean": "mean", "median": "median", "sum": "sum", "std": "std", "var": "var", "min": "min", "max": "max",
    "lower": "str_lower", "upper": "str_upper", "strip": "str_strip", "startswith": "str_startswith",
    "endswith": "str_endswith", "replace": "str_replace",
}
# value.str.method(...) -> table function
_STR_METHODS = {"len": "str_len", "lower": "str_lower", "upper": "str_upper", "strip": "str_strip",
                "contains": "str_contains", "startswith": "str_startswith", "endswith": "str_endswith",
                "replace": "str_replace", "slice": "str_slice", "get": "str_get"}
_DT_METHODS = {"total_seconds": "dt_total_seconds"}
_DT_ATTRIBUTE_ALIASES = {**{k: f"dt_{k}" for k in _DT_FIELDS}, "day_of_week": "dt_dayofweek", "weekday": "dt_dayofweek",
                         "day_of_year": "dt_dayofyear", "days": "dt_days"}

_CONSTRUCT_NAMES = {
    ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension", ast.DictComp: "a dict comprehension",
    ast.GeneratorExp: "a generator expression", ast.NamedExpr: "the walrus operator (:=)", ast.Await: "await",
    ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Starred: "star-unpacking (*x)", ast.Dict: "a dict literal",
    ast.Set: "a set literal", ast.JoinedStr: "an f-string", ast.Lambda: "a lambda inside an expression",
    ast.Slice: "a slice outside x[start:stop]", ast.List: "a list outside `x in [...]`/isin(x, [...])",
    ast.Tuple: "a tuple outside `x in (...)`/isinstance(x, (...))",
}
_OPERATOR_NAMES = {ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.Is: "is", ast.IsNot: "is not"}

ALLOWED_FORMS = (
    "numbers, 'text', True/False/None, nan/inf/pi; column names (df['odd name'] or `odd name` for names that "
    "are not identifiers); + - * / // % **; == != < <= > >= (chained too); and/or/not, &, |, ~ (per row); "
    "a if condition else b; x in [constants]; calls to these functions (np./math./pd. spellings and x.method() "
    "forms of them are accepted): " + ", ".join(sorted(FUNCTIONS)))


def _reject(what: str) -> ExpressionRejected:
    return ExpressionRejected(f"{what} is not part of mltb's expression language. Allowed: {ALLOWED_FORMS}")


# ------------------------------------------------------------------ compiler
@dataclass
class _Compiler:
    source: str
    param: str | None = None           # a lambda's parameter name
    depth: int = 0

    def compile(self, node: ast.AST) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionRejected(f"expression nests deeper than {MAX_DEPTH} levels")
        try:
            handler = _HANDLERS.get(type(node))
            if handler is None:
                raise _reject(_CONSTRUCT_NAMES.get(type(node), f"the construct {type(node).__name__}"))
            return handler(self, node)
        finally:
            self.depth -= 1

    # -- leaves
    def _Constant(self, node: ast.Constant) -> Node:
        value = _literal(node)
        return lambda env: value

    def _Name(self, node: ast.Name) -> Node:
        name = node.id
        _check_identifier(name)
        if name == self.param:
            return lambda env: _param_value(env)
        if name in _MODULES:
            raise _reject(f"the module name {name!r} on its own")
        if name == "df":
            raise ExpressionRejected("'df' on its own is not a value: write df['column'] for one column")

        def resolve(env: _Env) -> Any:
            if env.frame is not None and name in env.frame.columns:
                return env.column(name, None)
            if name in _CONSTANTS:
                return _CONSTANTS[name]
            if name in FUNCTIONS or name in _BUILTIN_FUNCTIONS or name in _CAST_BUILTINS:
                raise ExpressionRejected(f"{name!r} is a function: call it, e.g. {name}(x); functions are not values")
            return env.column(name, None)
        return resolve

    # -- operators
    def _BinOp(self, node: ast.BinOp) -> Node:
        if type(node.op) not in _BINARY:
            raise _reject(f"the operator {_OPERATOR_NAMES.get(type(node.op), type(node.op).__name__)}")
        symbol, fn = _BINARY[type(node.op)]
        left, right = self.compile(node.left), self.compile(node.right)
        if symbol in ("&", "|", "^"):
            bit = {"&": operator.and_, "|": operator.or_, "^": operator.xor}[symbol]
            return lambda env: _bitwise(bit, left(env), right(env))
        return lambda env: _apply_binary(symbol, fn, left(env), right(env))

    def _UnaryOp(self, node: ast.UnaryOp) -> Node:
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            value = _literal(node.operand)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return lambda env: -value
        operand = self.compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda env: _not(operand(env))
        if isinstance(node.op, ast.Invert):
            return lambda env: _invert(operand(env))
        if isinstance(node.op, ast.USub):
            return lambda env: _negate(operand(env))
        return lambda env: _numeric(operand(env), "unary +")

    def _BoolOp(self, node: ast.BoolOp) -> Node:
        parts = [self.compile(v) for v in node.values]
        op = operator.and_ if isinstance(node.op, ast.And) else operator.or_

        def combine(env: _Env) -> Any:
            result = parts[0](env)
            for part in parts[1:]:
                result = _logical(op, result, part(env))
            return _mask(result)
        return combine

    def _Compare(self, node: ast.Compare) -> Node:
        operands = [self.compile(node.left)]
        steps: list[Callable[[Any, Any], Any]] = []
        for op, comparator in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                values = _literal_values(comparator, "the right side of `in`")
                negate = isinstance(op, ast.NotIn)
                steps.append(lambda a, _b, values=values, negate=negate: _in(a, values, negate))
                operands.append(lambda env: None)
            elif isinstance(op, (ast.Is, ast.IsNot)):
                if not (isinstance(comparator, ast.Constant) and comparator.value is None):
                    raise _reject("`is` with anything but None")
                test = _isnull if isinstance(op, ast.Is) else _notnull
                steps.append(lambda a, _b, test=test: test(a))
                operands.append(lambda env: None)
            elif type(op) in _COMPARE:
                steps.append(lambda a, b, fn=_COMPARE[type(op)][1]: _compare(fn, a, b))  # noqa: B008  (binds this op's fn)
                operands.append(self.compile(comparator))
            else:
                raise _reject(f"the comparison {type(op).__name__}")

        def compare(env: _Env) -> Any:
            left = operands[0](env)
            results = []
            for step, right_node in zip(steps, operands[1:]):
                right = right_node(env)
                results.append(step(left, right))
                left = right
            result = results[0]
            for more in results[1:]:   # a < b < c is (a < b) and (b < c), per row
                result = _logical(operator.and_, result, more)
            return result
        return compare

    def _IfExp(self, node: ast.IfExp) -> Node:
        test, body, orelse = self.compile(node.test), self.compile(node.body), self.compile(node.orelse)
        return lambda env: _where(test(env), body(env), orelse(env))

    # -- column references, string indexing
    def _Subscript(self, node: ast.Subscript) -> Node:
        key = node.slice
        owner = node.value
        # df['col'] / row['col']
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            if isinstance(owner, ast.Name) and owner.id in ("df", self.param):
                name, who = _literal(key), owner.id
                return lambda env: env.column(name, who)
            raise _reject("x['key'] on anything but df (or a lambda's row)")
        # x.split(sep)[i] and x.str.split(sep).str[i]
        split = _split_call(owner)
        if split is not None and isinstance(key, (ast.Constant, ast.UnaryOp)):
            receiver, sep_node = split
            return self._call_function("str_split_part", [receiver, sep_node, key], [], "split(...)[i]")
        receiver = owner.value if _is_accessor(owner, "str") else owner
        if _split_call(receiver) is not None:
            raise _reject("the list made by split() (index it: x.split('/')[0])")
        if isinstance(key, ast.Slice):
            if key.step is not None:
                raise _reject("a slice with a step")
            args = [receiver, key.lower or ast.Constant(None), key.upper or ast.Constant(None)]
            return self._call_function("str_slice", args, [], "x[start:stop]")
        return self._call_function("str_get", [receiver, key], [], "x[i]")

    def _Attribute(self, node: ast.Attribute) -> Node:
        _check_identifier(node.attr)
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in _MODULES:
            constants = _MODULE_CONSTANTS[owner.id]
            if node.attr in constants:
                value = constants[node.attr]
                return lambda env: value
            if node.attr in _MODULE_FUNCTIONS[owner.id]:
                raise ExpressionRejected(f"{owner.id}.{node.attr} is a function: call it; functions are not values")
            raise _unknown_member(f"{owner.id}.{node.attr}", {**_MODULE_FUNCTIONS[owner.id], **constants})
        if isinstance(owner, ast.Name) and owner.id in ("df", self.param) and node.attr not in ("str", "dt"):
            name, who = node.attr, owner.id
            return lambda env: env.column(name, who)
        if _is_accessor(owner, "dt") and node.attr in _DT_ATTRIBUTE_ALIASES:
            return self._call_function(_DT_ATTRIBUTE_ALIASES[node.attr], [owner.value], [], f".dt.{node.attr}")
        raise _reject(f"the attribute .{node.attr} (attribute access on values; the accepted dotted forms are "
                      "np./math./pd. functions, x.dt.<part>, and the methods listed in the documentation)")

    # -- calls
    def _Call(self, node: ast.Call) -> Node:
        func = node.func
        for keyword in node.keywords:
            if keyword.arg is None:
                raise _reject("**keyword unpacking")
            _check_identifier(keyword.arg)
        args, keywords = list(node.args), [(k.arg, k.value) for k in node.keywords]
        if isinstance(func, ast.Name):
            name = func.id
            _check_identifier(name)
            if name == "isinstance":
                return self._isinstance(args, keywords)
            if name in _CAST_BUILTINS:
                if len(args) != 1 or keywords:
                    raise ExpressionError(f"{name}() takes one value here (a cast), e.g. {name}(x)")
                return self._call_function("astype", [args[0], ast.Constant(name)], [], f"{name}(x)")
            if name in FUNCTIONS:
                return self._call_function(name, args, keywords, name)
            if name in _BUILTIN_FUNCTIONS:
                return self._call_function(_BUILTIN_FUNCTIONS[name], args, keywords, name)
            raise _unknown_member(name, FUNCTIONS)
        if isinstance(func, ast.Attribute):
            _check_identifier(func.attr)
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id in _MODULES:
                table = _MODULE_FUNCTIONS[owner.id]
                if func.attr not in table:
                    raise _unknown_member(f"{owner.id}.{func.attr}", [f"{owner.id}.{k}" for k in table])
                return self._call_function(table[func.attr], args, keywords, f"{owner.id}.{func.attr}")
            if _is_accessor(owner, "str"):
                return self._method(func.attr, owner.value, args, keywords, _STR_METHODS, ".str.")
            if _is_accessor(owner, "dt"):
                return self._method(func.attr, owner.value, args, keywords, _DT_METHODS, ".dt.")
            if func.attr == "split":
                raise _reject("split() without an index (write x.split('/')[0] or str_split_part(x, '/', 0))")
            return self._method(func.attr, owner, args, keywords, _METHODS, ".")
        raise _reject("calling the result of an expression (only functions from the table can be called)")

    def _method(self, name: str, receiver: ast.AST, args: list, keywords: list, table: dict[str, str], dot: str) -> Node:
        if name not in table:
            raise _unknown_member(f"x{dot}{name}()", {f"x{dot}{k}": v for k, v in table.items()})
        return self._call_function(table[name], [receiver, *args], keywords, f"x{dot}{name}()")

    def _isinstance(self, args: list, keywords: list) -> Node:
        if len(args) != 2 or keywords:
            raise ExpressionError("isinstance() takes a value and a type: isinstance(x, str)")
        kinds = args[1].elts if isinstance(args[1], ast.Tuple) else [args[1]]
        names = {k.id for k in kinds if isinstance(k, ast.Name)}
        if len(names) != len(kinds) or not names <= set(_TYPE_TESTS):
            raise _reject("isinstance() with anything but str, int, float, bool (or a tuple of them)")
        chosen = "number" if names in ({"int", "float"}, {"float", "int"}) else names.pop() if len(names) == 1 else None
        if chosen is None:
            raise _reject("isinstance() with that tuple of types (use is_str/is_int/is_float/is_number)")
        return self._call_function(f"is_{chosen}", [args[0]], [], "isinstance")

    def _call_function(self, name: str, args: list, keywords: list, spelled: str) -> Node:
        fn = FUNCTIONS[name]
        usage = f"{spelled}: {name}({', '.join(p.name for p in fn.params)}{', ...' if fn.variadic else ''})"
        if fn.variadic:
            if keywords or not args:
                raise ExpressionError(f"{usage} takes one or more values, no keywords")
            nodes = [self.compile(a) for a in args]
            return lambda env: fn.impl(*[n(env) for n in nodes])
        if len(args) > len(fn.params):
            raise ExpressionError(f"{usage} takes at most {len(fn.params)} argument(s), got {len(args)}")
        given: dict[str, ast.AST] = {p.name: a for p, a in zip(fn.params, args)}
        names = [p.name for p in fn.params]
        for key, value in keywords:
            if key not in names:
                raise ExpressionError(f"{usage} has no argument {key!r}")
            if key in given:
                raise ExpressionError(f"{usage} got {key!r} twice")
            given[key] = value
        parts: list[Node] = []
        for param in fn.params:
            if param.name not in given:
                if param.default is _REQUIRED:
                    raise ExpressionError(f"{usage} is missing its argument {param.name!r}")
                default = param.default
                parts.append(lambda env, v=default: v)
            elif param.kind == "value":
                parts.append(self.compile(given[param.name]))
            else:
                value = _literal_argument(given[param.name], param, usage)
                parts.append(lambda env, v=value: v)
        return lambda env: fn.impl(*[p(env) for p in parts])


# The syntax the compiler accepts, node class -> handler (everything else is refused by name).
_HANDLERS: dict[type, Callable[[_Compiler, Any], Node]] = {
    ast.Constant: _Compiler._Constant, ast.Name: _Compiler._Name, ast.BinOp: _Compiler._BinOp,
    ast.UnaryOp: _Compiler._UnaryOp, ast.BoolOp: _Compiler._BoolOp, ast.Compare: _Compiler._Compare,
    ast.IfExp: _Compiler._IfExp, ast.Subscript: _Compiler._Subscript, ast.Attribute: _Compiler._Attribute,
    ast.Call: _Compiler._Call,
}


def _check_identifier(name: str) -> None:
    if name.startswith("_") and name != TRACKING_COLUMN:
        hint = "" if name.startswith("__") else f"; for a column with such a name write df['{name[:40]}']"
        raise ExpressionRejected(f"the name {name!r}: names starting with '_' are not part of mltb's expression "
                                 f"language{hint}")


def _literal(node: ast.Constant) -> Any:
    value = node.value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise ExpressionRejected(f"an integer literal of {value.bit_length()} bits (limit {MAX_INT_BITS})")
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING_LITERAL:
            raise ExpressionRejected(f"a string literal of {len(value)} characters (limit {MAX_STRING_LITERAL})")
        return value
    raise _reject(f"a {type(value).__name__} literal")


def _literal_values(node: ast.AST, where: str) -> list:
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        raise _reject(f"{where} other than a literal list of constants")
    if len(node.elts) > MAX_LIST_LITERAL:
        raise ExpressionRejected(f"a literal list of {len(node.elts)} items (limit {MAX_LIST_LITERAL})")
    out = []
    for item in node.elts:
        if isinstance(item, ast.UnaryOp) and isinstance(item.op, ast.USub) and isinstance(item.operand, ast.Constant):
            value = _literal(item.operand)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise _reject(f"-{type(value).__name__} in a literal list")
            out.append(-value)
        elif isinstance(item, ast.Constant):
            out.append(_literal(item))
        else:
            raise _reject(f"{where} with an item that is not a constant")
    return out


def _literal_argument(node: ast.AST, param: Param, usage: str) -> Any:
    if param.kind == "values":
        return _literal_values(node, f"{usage}: {param.name}")
    if param.kind == "dtype":
        word = node.id if isinstance(node, ast.Name) else (
            node.attr if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in _MODULES else node.value if isinstance(node, ast.Constant) else None)
        if not isinstance(word, str):
            raise ExpressionError(f"{usage}: {param.name} must be a type name, one of {sorted(DTYPE_NAMES)}")
        try:
            return resolve_dtype(word, param.name)
        except ToolInputError as exc:
            raise ExpressionError(f"{usage}: {exc}") from None
    value: Any
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and _is_int(node.operand.value):
        value = -node.operand.value
    elif isinstance(node, ast.Constant):
        value = _literal(node)
    else:
        raise ExpressionError(f"{usage}: {param.name} must be a literal {'string' if param.kind == 'text' else 'integer'}"
                              f" written in the expression, not a computed value")
    if value is None and param.default is None:
        return None
    if param.kind == "text" and not isinstance(value, str):
        raise ExpressionError(f"{usage}: {param.name} must be a string, got {value!r}")
    if param.kind == "int" and (not _is_int(value) or abs(value) > 1_000_000):
        raise ExpressionError(f"{usage}: {param.name} must be an integer (at most 1,000,000 in size), got {value!r}")
    return value


def _split_call(node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(receiver, separator) of ``x.split(sep)`` / ``x.str.split(sep)``, the ``.str`` of a split also accepted."""
    if _is_accessor(node, "str"):
        node = node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split":
        if len(node.args) != 1 or node.keywords:
            raise ExpressionError("split() takes exactly one separator here, e.g. x.split('/')[0]")
        owner = node.func.value
        return (owner.value if _is_accessor(owner, "str") else owner), node.args[0]
    return None


def _is_accessor(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == name


def _unknown_member(name: str, table: Any) -> ExpressionRejected:
    close = difflib.get_close_matches(name, list(table), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return ExpressionRejected(f"{name} is not a function of mltb's expression language.{hint} Functions: "
                              f"{', '.join(sorted(FUNCTIONS))}")


def _param_value(env: _Env) -> Any:
    if isinstance(env.value, pd.DataFrame):
        raise ExpressionError(f"{env.param!r} is a row: use one of its columns, {env.param}['column']")
    return env.value


# ------------------------------------------------------------------ runtime operators
def _apply_binary(symbol: str, fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    a, b = _same_rows(a, b)
    try:
        return fn(a, b)
    except ZeroDivisionError:
        raise ExpressionError(f"division by zero in {symbol}") from None


def _compare(fn: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    a, b = _same_rows(a, b)
    return fn(a, b)


def _in(a: Any, values: list, negate: bool) -> Any:
    found = _isin(a, values)
    if not negate:
        return found
    return ~found if _is_vector(found) else not found


def _not(value: Any) -> Any:
    mask = _mask(value)
    return ~mask if _is_vector(mask) else not mask


def _invert(value: Any) -> Any:
    if _is_vector(value) and pd.api.types.is_integer_dtype(value.dtype) or _is_int(value):
        return ~value
    return _not(value)


def _negate(value: Any) -> Any:
    if _is_vector(value) and pd.api.types.is_bool_dtype(value.dtype):
        raise ExpressionError("cannot negate True/False values with '-': use 'not' or '~'")
    return -_numeric(value, "unary -")


# ------------------------------------------------------------------ parsing
def _replace_backticks(text: str) -> str:
    """pandas-style ```odd name``` -> ``df['odd name']`` (outside string literals)."""
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
                raise ExpressionError(f"unbalanced backtick in {_clip(text)!r}")
            out.append(f"df[{text[i + 1:end]!r}]")
            i = end
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _ast_parse(text: str, mode: str) -> Any:
    with warnings.catch_warnings():   # "invalid decimal literal" and the like: the error says enough
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.parse(text, PARSE_FILENAME, mode=mode)


def _parse(source: Any, what: str) -> ast.Expression:
    if not isinstance(source, str):
        raise ExpressionError(f"the {what} must be a string, got {type(source).__name__}")
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ExpressionRejected(f"the {what} is {len(source):,} characters long (limit {MAX_EXPRESSION_CHARS:,})")
    text = _replace_backticks(source.strip().replace("\u2019", "'").replace("\u2018", "'"))
    if not text:
        raise ExpressionError(f"the {what} is empty")
    try:
        tree = _ast_parse(text, "eval")
    except SyntaxError as exc:
        try:
            _ast_parse(text, "exec")
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            raise ExpressionError(f"the {what} {_clip(text)!r} is not valid: {exc.msg}") from None
        raise _reject("a statement (import, assignment, ...); an expression is one formula") from None
    except (RecursionError, MemoryError):
        raise ExpressionRejected(f"the {what} nests too deeply") from None
    except ValueError as exc:   # e.g. a NUL byte
        raise ExpressionError(f"the {what} is not valid: {_clip(str(exc))}") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise ExpressionRejected(f"the {what} has {count} parts (limit {MAX_NODES})")
    return tree


# ------------------------------------------------------------------ public API
def _run(node: Node, env: _Env, source: str, what: str) -> Any:
    try:
        with np.errstate(all="ignore"):   # log(0) = -inf, overflow = inf: values, as in pandas
            result = node(env)
    except ExpressionError as exc:
        raise type(exc)(f"{what} {_clip(source)!r}: {exc}") from None
    except ToolInputError:
        raise
    except RecursionError:
        raise ExpressionRejected(f"{what} {_clip(source)!r} nests too deeply") from None
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - a numpy/pandas failure on the model's data: a readable message
        raise ExpressionError(f"could not evaluate {what} {_clip(source)!r}: {type(exc).__name__}: {_clip(str(exc))}") from None
    return _finished(result, source, what)


def _finished(result: Any, source: str, what: str) -> Any:
    """Only plain values leave: a Series, or a number/text/bool/None/timestamp."""
    if isinstance(result, np.generic):
        result = result.item()
    if _is_vector(result) or _is_scalar(result):
        return result
    raise ExpressionError(f"{what} {_clip(source)!r} gave a {type(result).__name__}, not a value")


@dataclass(frozen=True)
class Expression:
    """A compiled expression over a frame's columns."""

    source: str
    node: Node = field(repr=False)
    what: str = "expression"

    def evaluate(self, df: pd.DataFrame) -> Any:
        if not isinstance(df, pd.DataFrame):
            raise ExpressionError(f"expected a DataFrame, got {type(df).__name__}")
        return _run(self.node, _Env(df, df.index), self.source, self.what)


@dataclass(frozen=True)
class Lambda:
    """A compiled one-parameter function, evaluated vectorised: its parameter is a whole column (a Series)
    or, for a row function, a frame whose columns are read as ``row['col']``."""

    source: str
    param: str
    node: Node = field(repr=False)

    def apply(self, value: pd.Series | pd.DataFrame) -> Any:
        if not isinstance(value, (pd.Series, pd.DataFrame)):
            raise ExpressionError(f"a function is applied to a column or rows, got {type(value).__name__}")
        return _run(self.node, _Env(None, value.index, self.param, value), self.source, "function")


def compile_expression(source: Any, what: str = "expression") -> Expression:
    """Parse and compile; raises ExpressionRejected/ExpressionError naming the problem."""
    tree = _parse(source, what)
    try:
        node = _Compiler(source).compile(tree.body)
    except ExpressionError as exc:
        raise type(exc)(f"{what} {_clip(source)!r}: {exc}") from None
    except RecursionError:   # MAX_DEPTH keeps this rare; a caller deep in its own stack could still meet it
        raise ExpressionRejected(f"{what} {_clip(source)!r} nests too deeply") from None
    return Expression(source, node, what)


def compile_lambda(source: Any) -> Lambda:
    """``"lambda x: <expression of x>"`` (or a bare expression of ``x``) as a :class:`Lambda`."""
    tree = _parse(source, "function")
    body = tree.body
    param = "x"
    if isinstance(body, ast.Lambda):
        args = body.args
        if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults or len(args.args) != 1:
            raise ExpressionRejected(f"function {_clip(source)!r}: a lambda here takes exactly one parameter "
                                     "(the value, or the row): lambda x: ...")
        param = args.args[0].arg
        _check_identifier(param)
        body = body.body
    if param in _MODULES or param == "df":
        raise ExpressionRejected(f"function {_clip(source)!r}: {param!r} cannot be the parameter's name")
    try:
        node = _Compiler(source, param=param).compile(body)
    except ExpressionError as exc:
        raise type(exc)(f"function {_clip(source)!r}: {exc}") from None
    except RecursionError:
        raise ExpressionRejected(f"function {_clip(source)!r} nests too deeply") from None
    return Lambda(source, param, node)


def evaluate_expression(source: Any, df: pd.DataFrame) -> Any:
    """A Series aligned with ``df`` (or a scalar) computed from its columns."""
    return compile_expression(source).evaluate(df)


def evaluate_condition(source: Any, df: pd.DataFrame) -> pd.Series:
    """A bool Series aligned with ``df``; missing values count as False."""
    result = compile_expression(source, "condition").evaluate(df)
    if isinstance(result, (bool, np.bool_)):
        return pd.Series(bool(result), index=df.index)
    if not _is_vector(result):
        raise ExpressionError(f"condition {_clip(str(source))!r} must give True/False per row, got "
                              f"{type(result).__name__}")
    values = result.dropna()
    if not (pd.api.types.is_bool_dtype(result.dtype)
            or (result.dtype == object and all(isinstance(v, (bool, np.bool_)) for v in values.tolist()))):
        raise ExpressionError(f"condition {_clip(str(source))!r} must be True/False, got values of dtype "
                              f"{result.dtype} (compare with ==, <, >, isnull(x), str_contains(x, 'text'))")
    mask = _mask(result)
    return mask if mask.index.equals(df.index) else pd.Series(mask.to_numpy(), index=df.index)


def function_reference() -> str:
    """The function table and its aliases as Markdown (docs/expressions.md embeds this text verbatim; a test
    keeps the two equal)."""
    lines = ["| group | function | what it gives |", "|---|---|---|"]
    for f in FUNCTIONS.values():
        signature = f"{f.name}({', '.join(_param_text(p) for p in f.params)}{', ...' if f.variadic else ''})"
        lines.append(f"| {f.group} | `{signature}` | {f.doc.replace('|', '/')} |")
    aliases: dict[str, list[str]] = {}
    for module in ("np", "math", "pd"):
        for member, target in _MODULE_FUNCTIONS[module].items():
            aliases.setdefault(target, []).append(f"{module}.{member}(...)")
    for table, spelled in ((_METHODS, "x.{}(...)"), (_STR_METHODS, "x.str.{}(...)"), (_DT_METHODS, "x.dt.{}()"),
                           (_DT_ATTRIBUTE_ALIASES, "x.dt.{}"), (_BUILTIN_FUNCTIONS, "{}(...)")):
        for member, target in table.items():
            if spelled != "{}(...)" or member != target:   # abs(...) is the function itself, not an alias
                aliases.setdefault(target, []).append(spelled.format(member))
    lines += ["", "| function | also written as |", "|---|---|"]
    lines += [f"| `{name}` | {', '.join(f'`{a}`' for a in spellings)} |" for name, spellings in aliases.items()]
    lines += ["", "Also: `x.split(sep)[i]` and `x.str.split(sep).str[i]` → `str_split_part`; `x.str[i]`, `x[i]` → "
              "`str_get`; `x.str[a:b]`, `x[a:b]` → `str_slice`; `isinstance(x, T)` → `is_<T>` (T: str, int, float, "
              "bool, or (int, float) → `is_number`); `str(x)`, `int(x)`, `float(x)`, `bool(x)` → `astype`; "
              "`x is None` → `isnull`; `x in [...]` → `isin`; constants `nan`, `inf`, `pi`, `np.nan`, `np.e`, "
              "`math.pi`, `pd.NA` (missing).",
              "", "Type names for `astype` (and the cast tools): " + ", ".join(f"`{n}`" for n in DTYPE_NAMES) + "."]
    return "\n".join(lines)


def _param_text(param: Param) -> str:
    text = param.name if param.kind == "value" else f"{param.name}: {param.kind}"
    return text if param.default is _REQUIRED else f"{text}={param.default!r}"


# The text every expression-taking tool's documentation carries (the full language, with every function, is
# docs/expressions.md); kept short because tool descriptions go into every prompt.
EXPRESSION_DOC = (
    "Written in mltb's expression language, not Python: columns (df['odd name']), numbers, 'text', "
    "+ - * / ** == < and or not & | ~, a if c else b, x in [...], and functions such as log1p, where, fillna, "
    "isnull, clip, astype, str_contains, str_split_part, dt_year (np.log1p(x), x.fillna(0), x.str.lower(), "
    "x.split('/')[0] spellings work).")
_DOC_MARKER = "{expression_language}"


def documents_expressions(func: Callable) -> Callable:
    """Put :data:`EXPRESSION_DOC` where a tool's docstring says ``{expression_language}`` (defined once)."""
    if func.__doc__ is None or _DOC_MARKER not in func.__doc__:
        raise ValueError(f"{func.__name__}'s docstring has no {_DOC_MARKER} marker")
    func.__doc__ = func.__doc__.replace(_DOC_MARKER, EXPRESSION_DOC)
    return func
