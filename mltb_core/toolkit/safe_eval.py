"""Restricted evaluator for model-written pandas expressions, conditions and lambdas.

The model writes strings such as ``"np.log1p(RoomService + FoodCourt)"``,
``"Age > 30 and HomePlanet == 'Earth'"`` or ``"lambda x: x.split('/')[0]"``.
They are parsed with :mod:`ast` and interpreted by a walker in this module:
Python's ``eval``/``exec`` never see model text.

Threat model: the text is hostile. It must not run code, touch files, read
the grader's labels, change the frames it is given (under MCTS sibling
branches share them) or exhaust the machine.

The design allows, it does not forbid:

* **Calls by identity.** A call is either ``name(...)`` (a builtin from
  :data:`SAFE_BUILTINS` or a member of the ``np``/``pd``/``math`` stand-ins)
  or ``value.method(...)``. For a method the walker finds the function the
  value's *type* defines under that name (a static MRO lookup, no
  ``__getattr__``) and calls it only if that very object is in the
  allow-list (:data:`ALLOWED_MEMBERS`, resolved at import from the table
  ``_MEMBER_GROUPS`` of classes and names, e.g. ``Series.fillna``,
  ``StringMethods.split``, ``str.strip``). Anything else,
  including every I/O method (``to_csv``, ``read_*``), every in-place
  mutator (``isetitem``, ``update``, ``ndarray.partition``, ``ufunc.at``) and
  every string-dispatcher (``eval``, ``query``, ``pipe``), is simply absent.
* **Direct calls only.** Functions and methods are never values: not as
  arguments, list/dict items, lambda results or lambda parameters. Only a
  lambda *literal* may be passed, and only to a method that applies it
  (:data:`FUNCTION_TAKING_METHODS`); a lambda's parameters receive data, never
  callables. Data types (``str``, ``int``, ``np.float32``...) are values, so
  ``astype(int)`` and ``isinstance(x, str)`` work.
* **Arguments are checked too.** ``inplace=True``, ``copy=False``, ``out=``
  (also positionally, via the callee's signature) and ``engine=`` are refused;
  ``agg``/``aggregate``/``transform``/``apply`` take a lambda or one of the
  reduction names in :data:`DISPATCH_NAMES` (pandas resolves those strings to
  methods by name); ``map`` is not string-checked: pandas never resolves a
  string given to ``map``, it only calls it (a ``TypeError``).
* **No writable buffers.** ndarrays handed out by methods and attributes
  (``.values``, ``.to_numpy()``) are read-only views; ``.array`` is absent.

Size guards stop resource bombs (``'a' * 10**9``, ``10**10**10``, an outer
product of two columns) before they allocate. Anything rejected raises
:class:`UnsafeExpressionError`, whose message names the construct and what
is allowed instead.
"""
from __future__ import annotations

import ast
import contextlib
import datetime as _dt
import difflib
import inspect
import math
import re
import string
import types
import weakref
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
from pandas.core.arrays.categorical import CategoricalAccessor
from pandas.core.groupby import DataFrameGroupBy, SeriesGroupBy
from pandas.core.indexes.accessors import DatetimeProperties, TimedeltaProperties
from pandas.core.indexing import _AtIndexer, _iAtIndexer, _iLocIndexer, _LocIndexer
from pandas.core.strings.accessor import StringMethods
from pandas.core.window import Expanding, ExponentialMovingWindow, Rolling

from mltb_core.toolkit.registry import ToolInputError

__all__ = [
    "UnsafeExpressionError", "evaluate_expression", "evaluate_condition", "compile_lambda",
    "MAX_EXPRESSION_CHARS", "SAFE_BUILTINS", "ALLOWED_MEMBERS", "DISPATCH_NAMES", "FUNCTION_TAKING_METHODS",
]

MAX_EXPRESSION_CHARS = 2_000
MAX_INT_BITS = 4_096            # largest integer an expression may build (~1,230 digits)
MAX_SEQUENCE_LEN = 1_000_000    # largest str/list/tuple built by + or *
MAX_ELEMENT_REPEAT = 1_000      # largest repeat of a Series/array of strings
MAX_SIZE_ARGUMENT = 100_000     # largest int argument of padding/repeating methods
MAX_NEW_ELEMENTS = 20_000_000   # largest array a repeat or a broadcast may grow to
MAX_FORMAT_WIDTH = 1_000        # largest width/precision in a format spec
MAX_LAMBDA_DEPTH = 20           # nested lambda calls


class UnsafeExpressionError(ToolInputError):
    """A model-written expression tried something outside the safe subset."""


# ----------------------------------------------------------------- namespaces
class _Namespace:
    """A module stand-in exposing only allowed members (``np.save`` simply isn't there)."""

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


_NUMPY_FUNCTIONS = (
    "abs absolute sign clip floor ceil round rint trunc fix where select isnan isinf isfinite "
    "log log1p log2 log10 exp expm1 sqrt cbrt square power mod fmod floor_divide divide add subtract "
    "multiply maximum minimum fmax fmin sin cos tan arcsin arccos arctan arctan2 sinh cosh tanh hypot "
    "mean median std var sum prod min max nanmean nanmedian nanstd nanvar nansum nanmin nanmax "
    "percentile nanpercentile quantile nanquantile cumsum cumprod argmax argmin digitize isin "
    "logical_and logical_or logical_not logical_xor"
).split()
_NUMPY_TYPES = "int8 int16 int32 int64 uint8 float32 float64 bool_ number integer floating".split()
_NUMPY_CONSTANTS = {"nan": np.nan, "inf": np.inf, "pi": np.pi, "e": np.e, "NaN": np.nan}
NUMPY = _Namespace("np", {**{n: getattr(np, n) for n in _NUMPY_FUNCTIONS + _NUMPY_TYPES}, **_NUMPY_CONSTANTS})

PANDAS = _Namespace("pd", {
    "isna": pd.isna, "isnull": pd.isna, "notna": pd.notna, "notnull": pd.notna,
    "to_datetime": pd.to_datetime, "to_numeric": pd.to_numeric, "to_timedelta": pd.to_timedelta,
    "cut": pd.cut, "qcut": pd.qcut, "NA": pd.NA, "NaT": pd.NaT,
    "Timestamp": pd.Timestamp, "Timedelta": pd.Timedelta,
})

MATH = _Namespace("math", {n: getattr(math, n) for n in (
    "sqrt log log1p log2 log10 exp floor ceil fabs isnan isinf isfinite pi e inf nan trunc").split()})

# Types that are values (dtype designators for astype, isinstance targets); all other callables are not.
TYPE_VALUES = frozenset((str, int, float, bool, list, tuple, dict, set, type(None),
                         *(getattr(np, n) for n in _NUMPY_TYPES)))
# pandas indexers are technically callable (df.loc(axis=1)) but are needed as values: df.loc[...].
_INDEXER_TYPES = (_LocIndexer, _iLocIndexer, _AtIndexer, _iAtIndexer)


def _safe_isinstance(value: Any, kinds: Any) -> bool:
    """``isinstance`` restricted to builtin scalar/container types."""
    wanted = kinds if isinstance(kinds, tuple) else (kinds,)
    bad = [k for k in wanted if k not in TYPE_VALUES]
    if bad:
        raise UnsafeExpressionError(
            f"isinstance() may only test builtin types (str, int, float, bool, list, tuple, dict, set); got {bad!r}")
    return isinstance(value, wanted)


SAFE_BUILTINS: dict[str, Any] = {
    "abs": abs, "min": min, "max": max, "round": round, "len": len, "sum": sum, "any": any, "all": all,
    "sorted": sorted, "str": str, "int": int, "float": float, "bool": bool, "list": list, "tuple": tuple,
    "dict": dict, "set": set, "isinstance": _safe_isinstance,
}

# Every function a bare name or a namespace member may call, by identity.
_ALLOWED_FUNCTIONS: dict[int, Any] = {
    id(f): f for f in [*SAFE_BUILTINS.values(), *(v for ns in (NUMPY, PANDAS, MATH)
                                                   for v in ns.members.values() if callable(v))]}

# Names with a known reason to be absent (only to explain a refusal; the allow-list is what protects).
_DENIED_NAMES = {
    "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "hasattr", "globals", "locals",
    "vars", "dir", "type", "object", "input", "breakpoint", "help", "exit", "quit", "memoryview",
    "classmethod", "staticmethod", "property", "super", "__import__", "__builtins__", "os", "sys",
    "subprocess", "importlib", "pickle", "builtins", "range", "iter", "next", "format", "print", "map",
    "filter", "zip", "enumerate", "operator", "functools", "callable", "id", "hash", "repr", "chr", "ord",
}
_REFUSAL_REASONS: dict[str, str] = {
    **{n: "runs code given as a string" for n in ("eval", "query", "exec", "compile")},
    **{n: "calls a function given to it (write the expression directly instead)" for n in ("pipe",)},
    **{n: "draws plots (which can write files)" for n in ("plot", "hist", "boxplot", "style")},
    "array": "hands out the column's writable buffer (use .to_numpy(), which is read-only)",
    "format_map": "can read attributes through its template",
    **{n: "changes its object in place (tools must not change their inputs)" for n in (
        "pop", "insert", "update", "isetitem", "popitem", "setdefault", "fill", "put", "itemset", "setfield",
        "setflags", "resize", "sort", "partition", "append", "extend", "remove", "clear", "reverse",
        "set_flags", "at", "accumulate", "reduceat")},
}

# ----------------------------------------------------------------- allow-list
_FRAME_METHODS = (
    "abs add agg aggregate all any apply argmax argmin astype between bfill clip combine_first convert_dtypes "
    "copy corr count cov cummax cummin cumprod cumsum describe diff div divide drop drop_duplicates dropna "
    "duplicated eq equals explode factorize ffill fillna filter first_valid_index floordiv ge get groupby gt "
    "head idxmax idxmin infer_objects interpolate isin isna isnull item keys kurt kurtosis last_valid_index le "
    "lt map mask max mean median min mod mode mul multiply ne nlargest notna notnull nsmallest nunique "
    "pct_change pow prod product quantile radd rank rdiv rename repeat replace reset_index rfloordiv rmod "
    "rmul round rpow rsub rtruediv select_dtypes sem set_index shift skew sort_index sort_values squeeze std "
    "sub subtract sum tail to_dict to_frame to_list to_numpy tolist transform truediv unique value_counts var "
    "where rolling expanding ewm"
).split()
_FRAME_ATTRIBUTES = (
    "str dt cat loc iloc at iat index columns dtype dtypes shape size ndim empty name values T is_unique "
    "is_monotonic_increasing is_monotonic_decreasing hasnans nbytes"
).split()
_DATETIME_FIELDS = (
    "year month day hour minute second microsecond nanosecond dayofweek day_of_week weekday dayofyear "
    "day_of_year quarter is_month_start is_month_end is_quarter_start is_quarter_end is_year_start "
    "is_year_end is_leap_year days_in_month daysinmonth date time days seconds microseconds nanoseconds "
    "components"
).split()
_DATETIME_METHODS = "isocalendar normalize strftime floor ceil round month_name day_name total_seconds".split()
_INDEX_METHODS = (
    "tolist to_list to_numpy isin map astype unique nunique difference intersection union get_loc min max "
    "argmax argmin isna notna fillna dropna sort_values duplicated drop_duplicates to_series to_frame rename "
    "drop equals value_counts"
).split()
_INDEX_ATTRIBUTES = "str values dtype name size shape ndim empty is_unique has_duplicates".split()
_STRING_METHODS = (
    "capitalize casefold cat center contains count endswith extract extractall find findall fullmatch get "
    "index isalnum isalpha isdecimal isdigit islower isnumeric isspace istitle isupper join len ljust lower "
    "lstrip match normalize pad partition removeprefix removesuffix repeat replace rfind rindex rjust "
    "rpartition rsplit rstrip slice slice_replace split startswith strip swapcase title upper wrap zfill"
).split()
_GROUPBY_METHODS = (
    "mean sum median min max std var sem count size nunique first last transform agg aggregate apply "
    "cumcount cumsum cumprod cummax cummin rank shift diff pct_change ngroup ffill bfill head tail quantile "
    "prod any all idxmax idxmin value_counts describe"
).split()
_WINDOW_METHODS = "mean sum median min max std var count quantile skew kurt sem apply agg aggregate".split()
_NDARRAY_METHODS = (
    "sum mean std var min max argmax argmin astype round clip cumsum cumprod reshape ravel flatten copy "
    "tolist item any all nonzero prod"
).split()
_NDARRAY_ATTRIBUTES = "T shape size ndim dtype".split()
_STR_METHODS = (
    "capitalize casefold center count endswith expandtabs find format index isalnum isalpha isascii "
    "isdecimal isdigit isidentifier islower isnumeric isprintable isspace istitle isupper join ljust lower "
    "lstrip partition removeprefix removesuffix replace rfind rindex rjust rpartition rsplit rstrip split "
    "splitlines startswith strip swapcase title upper zfill"
).split()
_SCALAR_TIME_METHODS = ("weekday isoweekday date time strftime normalize floor ceil round month_name day_name "
                        "timestamp isocalendar total_seconds").split()


def _with_subclasses(*classes: type) -> list[type]:
    """A class and pandas'/numpy's own subclasses of it (RangeIndex, DatetimeIndex... override Index members).

    Subclasses from anywhere else (a user or third-party class) are left out: their overrides are other
    objects, so the identity check refuses them.
    """
    out: list[type] = []
    todo = list(classes)
    while todo:
        cls = todo.pop()
        if cls not in out and cls.__module__.split(".")[0] in ("pandas", "numpy"):
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return out


# (classes, method names, attribute names). Methods are call-only; attributes are values.
_MEMBER_GROUPS: list[tuple[list[type], list[str], list[str]]] = [
    (_with_subclasses(pd.Series, pd.DataFrame), _FRAME_METHODS, _FRAME_ATTRIBUTES),
    (_with_subclasses(pd.Index), _INDEX_METHODS + _DATETIME_METHODS, _INDEX_ATTRIBUTES + _DATETIME_FIELDS),
    ([StringMethods], _STRING_METHODS, []),
    ([DatetimeProperties, TimedeltaProperties], _DATETIME_METHODS + ["to_pydatetime"], _DATETIME_FIELDS),
    ([CategoricalAccessor], [], ["codes", "categories", "ordered"]),
    (_with_subclasses(SeriesGroupBy, DataFrameGroupBy), _GROUPBY_METHODS, []),
    (_with_subclasses(Rolling, Expanding, ExponentialMovingWindow), _WINDOW_METHODS, []),
    ([np.ndarray], _NDARRAY_METHODS, _NDARRAY_ATTRIBUTES),
    (_with_subclasses(np.generic), ["item", "round", "astype", "is_integer", "tolist"], ["real", "imag", "dtype"]),
    ([np.dtype, *np.dtype.__subclasses__()], [], ["name", "kind"]),
    ([str, np.str_], _STR_METHODS, []),
    ([int, float, bool], ["is_integer", "bit_length"], ["real", "imag"]),
    ([list, tuple], ["count", "index"], []),
    ([dict], ["get", "keys", "values", "items"], []),
    ([pd.Timestamp, _dt.datetime, _dt.date, _dt.time, pd.Timedelta, _dt.timedelta],
     _SCALAR_TIME_METHODS, _DATETIME_FIELDS),
    ([re.Match], ["group", "groups", "start", "end"], []),
]


def _static_member(cls: type, name: str) -> Any:
    """What ``cls`` defines under ``name``, found in the class dicts only (no __getattr__, no instance)."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


_MISSING = object()
_METHOD, _ATTRIBUTE = "method", "attribute"


def _build_allowed_members() -> dict[int, tuple[Any, str]]:
    allowed: dict[int, tuple[Any, str]] = {}
    for classes, methods, attributes in _MEMBER_GROUPS:
        for cls in classes:
            for names, kind in ((methods, _METHOD), (attributes, _ATTRIBUTE)):
                for name in names:
                    raw = _static_member(cls, name)
                    if raw is not _MISSING:  # not every subclass/version has every member
                        allowed[id(raw)] = (raw, kind)
    return allowed


# id(the object a class defines) -> (that object, kept alive so the id stays unique; method/attribute)
ALLOWED_MEMBERS: dict[int, tuple[Any, str]] = _build_allowed_members()

# Methods that resolve a string argument to a method by name (pandas' agg('sum') is getattr(obj, 'sum')):
# only these names may be given to them as strings.
_DISPATCH_METHODS = {"agg", "aggregate", "transform", "apply"}
DISPATCH_NAMES = frozenset(
    ("sum mean median min max std var sem count nunique size first last prod any all cumsum cumprod "
     "cummax cummin cumcount rank abs idxmax idxmin skew kurt mode quantile diff pct_change shift ffill "
     "bfill ngroup").split())
# Methods/functions that apply a function given to them; a lambda literal may be passed only to these.
FUNCTION_TAKING_METHODS = frozenset(("apply map agg aggregate transform where mask sort_values sort_index "
                                     "groupby replace sorted min max").split())
# Keyword arguments refused everywhere: (predicate on the value, reason).
_REFUSED_ARGUMENTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "inplace": (bool, "inplace=True is not allowed: tools must not change their inputs; use the returned value"),
    "copy": (lambda v: v is not None and not v,
             "copy=False is not allowed: the result would share memory with the input; leave copy out"),
    "out": (lambda v: v is not None, "out= is not allowed: it writes into an existing array; use the return value"),
    "engine": (lambda v: True, "engine= is not allowed (numba/python engines compile or run code)"),
    "engine_kwargs": (lambda v: True, "engine_kwargs= is not allowed"),
}
# Methods whose integer arguments size their output ("x".ljust(10**9)).
_SIZED_METHODS = {"repeat", "pad", "center", "ljust", "rjust", "zfill", "expandtabs", "head", "tail",
                  "nlargest", "nsmallest", "rolling", "ewm", "shift", "wrap", "cut", "qcut"}
_SIZE_CHECKED_METHODS = _SIZED_METHODS | {"join", "replace"}

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


def _validate(tree: ast.Expression, source: str) -> None:
    """Static checks: node types, underscore names, where lambdas may stand, f-string specs."""
    placed_lambdas = {id(tree.body)}  # a whole lambda (compile_lambda's input)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            placed_lambdas.update(id(a) for a in [node.func, *node.args, *(k.value for k in node.keywords)])
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES) or isinstance(node, ast.MatMult):
            label = _NODE_NAMES.get(type(node), type(node).__name__)
            raise UnsafeExpressionError(f"{label} not allowed in expression {source!r}")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise UnsafeExpressionError(f"name {node.id!r} is not allowed (dunder names are blocked)")
        if isinstance(node, ast.Attribute):
            _check_attribute_name(node.attr)
        if isinstance(node, ast.Lambda):
            if id(node) not in placed_lambdas:
                raise UnsafeExpressionError(
                    "a lambda may only be passed directly as an argument (e.g. Cabin.map(lambda x: x[0])), "
                    "not stored in a list/dict/tuple, returned or chosen by an if-expression")
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
                if _deep_len(seq) * max(int(count), 0) > MAX_SEQUENCE_LEN:
                    raise UnsafeExpressionError(
                        f"repetition of a length-{len(seq)} {type(seq).__name__} {count} times is too large "
                        f"(limit {MAX_SEQUENCE_LEN} items, nested items included)")
            if _is_text_vector(seq) and _is_int(count) and int(count) > MAX_ELEMENT_REPEAT:
                raise UnsafeExpressionError(f"repeating text values {count} times is not allowed "
                                            f"(limit {MAX_ELEMENT_REPEAT})")
    if isinstance(op, ast.Add) and isinstance(left, (str, bytes, list, tuple)) and isinstance(
            right, (str, bytes, list, tuple)) and _deep_len(left) + _deep_len(right) > MAX_SEQUENCE_LEN:
        raise UnsafeExpressionError(f"concatenation longer than {MAX_SEQUENCE_LEN} items is not allowed")
    if isinstance(op, ast.Mod) and isinstance(left, str):
        _check_percent_template(left)
    _check_broadcast([left, right])


def _check_broadcast(values: list) -> None:
    """An outer product of two columns (a[:, None] * a) would allocate rows**2 elements: refuse it."""
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    if len(arrays) < 2:
        return
    try:
        grown = math.prod(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        return  # numpy reports the shape mismatch itself
    if grown > max(MAX_NEW_ELEMENTS, *(a.size for a in arrays)):
        raise UnsafeExpressionError(f"broadcasting shapes {', '.join(str(a.shape) for a in arrays)} would build "
                                    f"{grown} elements (limit {MAX_NEW_ELEMENTS})")


def _deep_len(value: Any, seen: dict[int, int] | None = None) -> int:
    """Items in a str/list/tuple counting nested ones ([[0] * 10**6] * 10**6 is 10**12, not 10**6)."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if not isinstance(value, (list, tuple)):
        return 1
    seen = {} if seen is None else seen
    if id(value) not in seen:
        seen[id(value)] = 0  # a cycle cannot be built without mutation; counted once regardless
        seen[id(value)] = len(value) + sum(_deep_len(v, seen) for v in value if isinstance(v, (str, bytes, list, tuple)))
    return seen[id(value)]


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
        value = self._lookup(node.id)
        if _is_function_value(value):
            raise UnsafeExpressionError(_function_as_value(node.id))
        return value

    def _lookup(self, name: str) -> Any:
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
        return _member(self.eval(node.value), node.attr, calling=False)[0]

    def _Subscript(self, node: ast.Subscript) -> Any:
        owner = self.eval(node.value)
        key = self.eval(node.slice)
        if isinstance(owner, _Namespace):
            raise UnsafeExpressionError(f"{owner.label} cannot be subscripted")
        value = owner[key]
        if _is_function_value(value):
            raise UnsafeExpressionError("an item that is a function cannot be used as a value; "
                                        "call functions directly by name, e.g. np.log1p(x)")
        return value

    def _Slice(self, node: ast.Slice) -> slice:
        parts = (node.lower, node.upper, node.step)
        return slice(*(None if p is None else self.eval(p) for p in parts))

    # -- calls ----------------------------------------------------------------------
    def _Call(self, node: ast.Call) -> Any:
        target = node.func
        owner: Any = None
        if isinstance(target, ast.Attribute):
            _check_attribute_name(target.attr)
            name = target.attr
            owner = self._call_owner(target.value, name)
            func, raw = _member(owner, name, calling=True)
        elif isinstance(target, ast.Name):
            name = target.id
            func = raw = self._lookup(name)
            if id(func) not in _ALLOWED_FUNCTIONS:
                raise _not_callable(name, func)
        elif isinstance(target, ast.Lambda):
            name, func = "<lambda>", self._Lambda(target)
            raw = func
        else:
            raise UnsafeExpressionError(
                "only functions and methods named directly can be called, e.g. np.log1p(Age) or "
                "Cabin.str.split('/'); calling the result of another expression (a subscript, a call, "
                "an if-expression) is not allowed")
        args = [self._argument(a) for a in node.args]
        kwargs = {k.arg: self._argument(k.value) for k in node.keywords}
        _guard_call(func, raw, name, owner, args, kwargs)
        result = func(*args, **kwargs)
        if _is_function_value(result):
            raise UnsafeExpressionError(f"{name}() returned a function; functions cannot be used as values")
        return result if owner is None or isinstance(owner, _Namespace) else _read_only(result)

    def _call_owner(self, node: ast.AST, method: str) -> Any:
        """The value a method is called on; names ``np.add.at`` as such when the owner is a function."""
        if not isinstance(node, ast.Attribute):
            return self.eval(node)
        _check_attribute_name(node.attr)
        base = self.eval(node.value)
        if isinstance(base, _Namespace) and _is_function_value(base.lookup(node.attr)):
            label = f"{base.label}.{node.attr}"
            raise UnsafeExpressionError(f"{label}.{method} is not allowed{_refusal_reason(method)}; functions have "
                                        f"no usable attributes: call {label}(...) directly")
        return _member(base, node.attr, calling=False)[0]

    def _argument(self, node: ast.AST) -> Any:
        """An argument value; a lambda literal is the one callable an argument may be."""
        return self._Lambda(node) if isinstance(node, ast.Lambda) else self.eval(node)

    def _Lambda(self, node: ast.Lambda) -> Callable:
        return _make_lambda(node, self.names, self.state)


def _owner_label(owner: Any) -> str:
    return owner.__name__ if isinstance(owner, type) else type(owner).__name__


def _is_function_value(value: Any) -> bool:
    """Functions, methods and classes other than data types may not travel as values."""
    if not callable(value):
        return False
    if isinstance(value, type):
        return value not in TYPE_VALUES
    return not isinstance(value, _INDEXER_TYPES)


def _function_as_value(label: str, call: str = "") -> str:
    return (f"{label} is a function or method: call it directly ({call or label + '(x)'}) instead of passing it "
            f"as a value; to give a function to apply/map, write a lambda, e.g. .map(lambda v: ...)")


def _not_callable(name: str, value: Any) -> ToolInputError:
    if callable(value):
        return UnsafeExpressionError(f"{name!r} cannot be called here: only builtins ({', '.join(SAFE_BUILTINS)}), "
                                     "np./pd./math. functions and allowed methods can be called")
    return ToolInputError(f"{name!r} is a {type(value).__name__}, not a function; it cannot be called")


def _read_only(value: Any) -> Any:
    """ndarrays from methods/attributes (.values, .to_numpy()) may share the frame's memory: hand out read-only."""
    if isinstance(value, np.ndarray) and value.flags.writeable:
        value = value.view()
        value.flags.writeable = False
    return value


_found_members: dict[tuple[type, str], Any] = {}


def _class_member(cls: type, name: str) -> Any:
    key = (cls, name)
    raw = _found_members.get(key, _MISSING)
    if raw is _MISSING:
        raw = _static_member(cls, name)
        if raw is not _MISSING:  # cache hits only: misses are model-chosen names, unbounded
            _found_members[key] = raw
    return raw


def _member(owner: Any, name: str, calling: bool) -> tuple[Any, Any]:
    """``owner.name`` if the allow-list has the member ``type(owner)`` defines: (value, raw member)."""
    if isinstance(owner, _Namespace):
        value = owner.lookup(name)
        if calling:
            if id(value) not in _ALLOWED_FUNCTIONS:
                raise _not_callable(f"{owner.label}.{name}", value)
        elif _is_function_value(value):
            raise UnsafeExpressionError(_function_as_value(f"{owner.label}.{name}", f"{owner.label}.{name}(x)"))
        return value, value
    if isinstance(owner, type):
        raise UnsafeExpressionError(
            f"{owner.__name__}.{name} is not allowed: attributes of classes are not reachable; call methods on "
            f"values instead (e.g. 'a-b'.split('-'))")
    raw = _class_member(type(owner), name)
    if raw is _MISSING:
        column = _column_attribute(owner, name)
        if column is not _MISSING:
            return column, column
        raise ToolInputError(f"{_owner_label(owner)} object has no attribute {name!r}.{_allowed_hint(owner, name)}")
    entry = ALLOWED_MEMBERS.get(id(raw))
    if entry is None or entry[0] is not raw:
        raise UnsafeExpressionError(f"{_owner_label(owner)}.{name} is not allowed in expressions"
                                    f"{_refusal_reason(name)}.{_allowed_hint(owner, name)}")
    if calling and entry[1] == _ATTRIBUTE:
        raise ToolInputError(f"{_owner_label(owner)}.{name} is an attribute, not a method: "
                             "write it without parentheses")
    if not calling and entry[1] == _METHOD:
        raise UnsafeExpressionError(_function_as_value(f"{_owner_label(owner)}.{name}", f".{name}(...)"))
    instance_dict = getattr(owner, "__dict__", None)
    if isinstance(instance_dict, dict) and name in instance_dict:  # would shadow the allowed class member
        raise UnsafeExpressionError(f"{_owner_label(owner)}.{name} is not allowed here: it is set on the object itself")
    value = getattr(owner, name)
    return (value if calling else _read_only(value)), raw


def _column_attribute(owner: Any, name: str) -> Any:
    """pandas' attribute-style access to a column (df.Age) or a row's field (row.Age)."""
    if isinstance(owner, pd.DataFrame) and name in owner.columns:
        return owner[name]
    if isinstance(owner, pd.Series) and owner.index.dtype == object and name in owner.index:
        return owner[name]
    return _MISSING


def _refusal_reason(name: str) -> str:
    if name in _REFUSAL_REASONS:
        return f": it {_REFUSAL_REASONS[name]}"
    if name.startswith("to_"):
        return ": to_* writers can write files (allowed converters: to_numpy, to_list, to_dict, to_frame)"
    if name.startswith("read_"):
        return ": it reads files"
    return " (only an allow-list of reading/computing methods is)"


def _allowed_hint(owner: Any, name: str) -> str:
    """Close allowed names for this type (only computed when refusing, so cost doesn't matter)."""
    cls = type(owner)
    names = {n for _, methods, attributes in _MEMBER_GROUPS for n in (*methods, *attributes)}
    allowed = sorted(n for n in names if id(_static_member(cls, n)) in ALLOWED_MEMBERS)
    close = difflib.get_close_matches(name, allowed, n=4, cutoff=0.75)
    return f" Allowed {cls.__name__} members close to it: {', '.join(close)}." if close else ""


# ---------------------------------------------------------------- call guards
_risky_signatures: dict[int, inspect.Signature | None] = {}


def _signature_with_refused_parameters(func: Any, raw: Any) -> inspect.Signature | None:
    """The callee's signature if it has a parameter in _REFUSED_ARGUMENTS (so positional use can be caught)."""
    found = _risky_signatures.get(id(raw), _MISSING)
    if found is not _MISSING:
        return found
    if _is_safe_lambda(raw):
        return None  # our lambdas take plain positional data; not cached (they are short-lived)
    try:
        signature: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and not set(signature.parameters) & set(_REFUSED_ARGUMENTS):
        signature = None
    _risky_signatures[id(raw)] = signature  # raw is an allowed member/function: a bounded, long-lived set
    return signature


def _guard_call(func: Any, raw: Any, name: str, owner: Any, args: list, kwargs: dict) -> None:
    """Checks on the arguments of an allowed callee (ordered so the common case stays cheap per row)."""
    if not callable(func):
        raise ToolInputError(f"{name!r} is a {type(func).__name__}, not a function; it cannot be called")
    for key, value in kwargs.items():
        _check_refused_argument(key, value)
    if isinstance(func, np.ufunc):
        if len(args) > func.nin:
            raise UnsafeExpressionError(
                f"np.{func.__name__} takes {func.nin} input(s); a further positional argument is out=, which "
                f"writes into an existing array: use the return value")
    else:
        signature = _signature_with_refused_parameters(func, raw)
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                pass  # the call itself reports the bad arguments
            else:
                for key, value in bound.arguments.items():
                    if key not in kwargs:
                        _check_refused_argument(key, value)
    if name not in FUNCTION_TAKING_METHODS:
        for value in (*args, *kwargs.values()):
            if _is_safe_lambda(value):
                raise UnsafeExpressionError(
                    f"a lambda cannot be passed to {name}(); lambdas may only be given to "
                    f"{', '.join(sorted(FUNCTION_TAKING_METHODS))}")
    if name in _DISPATCH_METHODS and owner is not None and not isinstance(owner, _Namespace):
        _check_dispatch_strings(name, args, kwargs)
    if name in _SIZE_CHECKED_METHODS:
        _check_sizes(name, owner, args, kwargs)
    if (owner is None or isinstance(owner, _Namespace)) and len(args) + len(kwargs) > 1:
        _check_broadcast([*args, *kwargs.values()])
    if func is sum and len(args) > 1 and not isinstance(args[1], (int, float, np.number)):
        raise UnsafeExpressionError("sum() may only add numbers (a list/str start value builds quadratic copies)")
    if name == "format" and isinstance(owner, str):
        _check_format_template(owner)


def _check_refused_argument(key: str, value: Any) -> None:
    rule = _REFUSED_ARGUMENTS.get(key)
    if rule is not None and rule[0](value):
        raise UnsafeExpressionError(rule[1])


def _check_dispatch_strings(name: str, args: list, kwargs: dict) -> None:
    """agg('sum') is getattr(obj, 'sum'): only reduction names, never 'eval', 'to_csv', ..."""
    target = args[0] if args else kwargs.get("func", kwargs.get("arg"))
    # Named aggregation: agg(total=('Spa', 'sum')); the second item is a method name.
    named = [v[1] for v in kwargs.values() if isinstance(v, tuple) and len(v) == 2]
    for value in _flatten([target, *named]):
        if isinstance(value, str) and value not in DISPATCH_NAMES:
            raise UnsafeExpressionError(
                f"{name}() with the string {value!r} is not allowed: pandas would look the method up by "
                f"name; pass a lambda, or one of {', '.join(sorted(DISPATCH_NAMES))}")


def _check_sizes(name: str, owner: Any, args: list, kwargs: dict) -> None:
    if name in _SIZED_METHODS:
        for value in (*args, *kwargs.values()):
            if _is_int(value) and abs(int(value)) > MAX_SIZE_ARGUMENT:
                raise UnsafeExpressionError(f"{name}({value}) is too large (limit {MAX_SIZE_ARGUMENT})")
        count = args[0] if args else kwargs.get("repeats")
        if name == "repeat" and _is_int(count):
            if isinstance(owner, StringMethods) and int(count) > MAX_ELEMENT_REPEAT:
                raise UnsafeExpressionError(f"repeating text values {count} times is not allowed "
                                            f"(limit {MAX_ELEMENT_REPEAT})")
            if _is_vector(owner) and owner.size * int(count) > MAX_NEW_ELEMENTS:
                raise UnsafeExpressionError(f"repeat({count}) would build {owner.size * int(count)} values "
                                            f"(limit {MAX_NEW_ELEMENTS})")
    if isinstance(owner, str) and name == "join" and args and isinstance(args[0], (list, tuple)):
        if sum(len(str(a)) for a in args[0]) + len(owner) * len(args[0]) > MAX_SEQUENCE_LEN:
            raise UnsafeExpressionError("joined string too long")
    if isinstance(owner, str) and name == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
        old, new = args[0], args[1]
        hits = owner.count(old) if old else len(owner) + 1
        if len(owner) + hits * (len(new) - len(old)) > MAX_SEQUENCE_LEN:
            raise UnsafeExpressionError(f"replace() would build a string longer than {MAX_SEQUENCE_LEN} characters")


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


# Lambdas made by this module (weak: they die with their evaluation).
_SAFE_LAMBDAS: weakref.WeakSet = weakref.WeakSet()


def _is_safe_lambda(value: Any) -> bool:
    return isinstance(value, types.FunctionType) and value in _SAFE_LAMBDAS


def _make_lambda(node: ast.Lambda, outer: Mapping[str, Any], state: _State) -> Callable:
    params = [a.arg for a in node.args.args]

    def safe_lambda(*args: Any) -> Any:
        if len(args) != len(params):
            raise ToolInputError(f"lambda takes {len(params)} argument(s) ({', '.join(params)}), got {len(args)}")
        for param, value in zip(params, args):
            if callable(value):
                raise UnsafeExpressionError(
                    f"lambda parameter {param!r} received a function ({_owner_label(value)}); lambda parameters "
                    "receive data values only")
        if state.depth >= MAX_LAMBDA_DEPTH:
            raise UnsafeExpressionError(f"lambda calls nested deeper than {MAX_LAMBDA_DEPTH} levels")
        state.depth += 1
        try:
            return _Evaluator(ChainMap(dict(zip(params, args)), outer), state).eval(node.body)
        finally:
            state.depth -= 1

    safe_lambda.__name__ = safe_lambda.__qualname__ = "<lambda>"
    safe_lambda.source = state.source  # type: ignore[attr-defined]
    _SAFE_LAMBDAS.add(safe_lambda)
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


def _run(tree: ast.Expression, names: Mapping[str, Any], source: str, what: str = "expression") -> Any:
    with _readable_errors(what, source, f"could not evaluate {source!r}"):
        return _finished(_Evaluator(names, _State(source)).eval(tree))


def _finished(result: Any) -> Any:
    """What an evaluation hands back: never a function; arrays writable again (as a copy)."""
    if _is_function_value(result):
        raise UnsafeExpressionError("the result is a function; an expression must give a value")
    if isinstance(result, np.ndarray) and not result.flags.writeable:
        return result.copy()
    return result


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
    result = _run(tree, _frame_names(df), cond, "condition")
    if isinstance(result, (bool, np.bool_)):
        return pd.Series(bool(result), index=df.index)
    if isinstance(result, (np.ndarray, pd.Index)):
        if result.ndim != 1:
            raise ToolInputError(f"condition {cond!r} must give one True/False per row, got an array of shape "
                                 f"{result.shape}")
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
    if _is_safe_lambda(src):
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
            return _finished(fn(*args))

    call.__name__ = call.__qualname__ = "<lambda>"
    call.source = src  # type: ignore[attr-defined]
    _SAFE_LAMBDAS.add(call)
    return call


def _short(args: tuple) -> str:
    text = ", ".join(repr(a) for a in args)
    return text if len(text) <= 200 else text[:200] + "..."
