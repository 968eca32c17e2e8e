"""safe_eval: injection attempts are refused with a clear message; legitimate expressions give the right values."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mltb_core.toolkit.registry import ToolInputError
from mltb_core.toolkit.safe_eval import (
    MAX_EXPRESSION_CHARS,
    UnsafeExpressionError,
    compile_lambda,
    evaluate_condition,
    evaluate_expression,
)


@pytest.fixture
def df() -> pd.DataFrame:
    return pd.DataFrame({
        "Age": [10.0, 40.0, np.nan, 50.0],
        "RoomService": [1, 2, 3, 4],
        "FoodCourt": [10, 0, 5, 1],
        "HomePlanet": ["Earth", "Earth", "Mars", None],
        "VIP": [True, False, True, None],
        "Cabin": ["A/1/S", "B/2/P", None, "C/3/S"],
        "Room Service": [1, 2, 3, 4],
        "_is_train": [1, 1, 0, 0],
    })


# (expression, a fragment the rejection message must contain)
INJECTIONS = [
    ("__import__('os').system('id')", "__import__"),
    ("import os", "import"),
    ("from os import system", "import"),
    ("x = 1", "statements"),
    ("().__class__.__mro__[1].__subclasses__()", "__mro__"),
    ("''.__class__.__base__.__subclasses__()", "__class__"),
    ("Age.__class__", "__class__"),
    ("df.__dict__", "__dict__"),
    ("(lambda: 0).__globals__", "__globals__"),
    ("df._mgr", "_mgr"),
    ("df.to_pickle('/tmp/x')", "to_pickle"),
    ("df.to_csv('/tmp/x.csv')", "to_csv"),
    ("df.to_parquet('/tmp/x')", "to_parquet"),
    ("df.to_sql('t', 'sqlite:///x')", "to_sql"),
    ("Age.to_json('/tmp/x')", "to_json"),
    ("pd.read_csv('/etc/passwd')", "read_csv"),
    ("pd.read_pickle('/tmp/x.pkl')", "read_pickle"),
    ("np.save('/tmp/x', Age)", "save"),
    ("np.load('/tmp/x.npy')", "np.load"),
    ("np.fromfile('/etc/passwd')", "np.fromfile"),
    ("np.loadtxt('/etc/passwd')", "np.loadtxt"),
    ("df.values.tofile('/tmp/x')", "tofile"),
    ("Age.values.dump('/tmp/x')", "dump"),
    ("open('/etc/passwd').read()", "open"),
    ("eval('1+1')", "eval"),
    ("exec('x=1')", "exec"),
    ("compile('1', 'f', 'eval')", "compile"),
    ("getattr(df, 'to_pickle')('/tmp/x')", "getattr"),
    ("globals()", "globals"),
    ("vars(df)", "vars"),
    ("type(df)", "type"),
    ("df.eval('Age * 2')", "eval"),
    ("df.query('Age > 3')", "query"),
    ("df.pipe(len)", "pipe"),
    ("Age.apply('to_pickle', args=('/tmp/x',))", "to_pickle"),
    ("df.agg('eval')", "eval"),
    ("'{0.__class__}'.format(Age)", "__class__"),
    ("'{0.values}'.format(Age)", "0.values"),
    ("Cabin.map('{0.__class__.__mro__}'.format)", "__class__"),
    ("str.format('{0.__class__}', Age)", "str.format"),
    ("'{x.__class__}'.format_map({'x': 1})", "format_map"),
    ("f'{Age:>{10**9}}'", "format spec"),
    ("f'{Age:>100000000}'", "format width"),
    ("'%*s' % (10**9, 'a')", "width"),
    ("'%999999999s' % 'a'", "width"),
    ("'a' * 10**9", "too large"),
    ("[0] * 10**9", "too large"),
    ("10**10**10", "too large"),
    ("2 ** 100000", "too large"),
    ("1 << 10**9", "too large"),
    ("Cabin * 10**7", "repeating text"),
    ("Cabin.str.repeat(10**8)", "too large"),
    ("'x'.ljust(10**9)", "too large"),
    # Self-application needs a function as a lambda argument, which is refused before any recursion.
    ("(lambda f: f(f))(lambda f: f(f))", "a lambda cannot be passed"),
    ("(lambda f, s: f(f, s + s))(lambda f, s: f(f, s + s), 'ab')", "a lambda cannot be passed"),
    ("(lambda x=open: x)()", "default"),
    ("(lambda *a: a)(1)", "*args"),
    ("[c for c in ().__class__.__base__.__subclasses__()]", "comprehension"),
    ("list(x for x in Age)", "generator"),
    ("(y := 1)", "walrus"),
    ("df.iterrows().gi_frame.f_globals", "gi_frame"),
    ("Age.drop(0, inplace=True)", "inplace"),
    ("df.pop('Age')", "pop"),
    ("df.insert(0, 'x', 1)", "insert"),
    ("df.values.setflags(write=True)", "setflags"),
    ("np.log(Age, out=Age.to_numpy())", "out="),
    ("Age.plot()", "plot"),
    ("isinstance(df, df.__class__)", "__class__"),
    ("Age + 1" + " + 1" * MAX_EXPRESSION_CHARS, "characters long"),
    ("Age\x00", "NUL"),
    ("print(Age)", "print"),
    ("range(10**12)", "range"),
]


@pytest.mark.parametrize("expr,fragment", INJECTIONS, ids=[e[:40] for e, _ in INJECTIONS])
def test_injection_is_rejected_with_clear_message(df, expr, fragment):
    with pytest.raises(UnsafeExpressionError) as info:
        evaluate_expression(expr, df)
    message = str(info.value)
    assert message.startswith("unsafe expression rejected"), message
    assert fragment in message, message


def test_corpus_is_large_enough():
    assert len(INJECTIONS) >= 40


@pytest.mark.parametrize("src", [
    "lambda x: __import__('os')",
    "lambda x: x.__class__",
    "lambda x: open('/etc/passwd')",
    "lambda x, y=print: y",
    "lambda _x: _x",
    "lambda x: x.to_pickle('/tmp/p')",
    "import os",
])
def test_compile_lambda_rejects_escapes(src):
    with pytest.raises(UnsafeExpressionError):
        fn = compile_lambda(src)
        fn(pd.Series([1]))  # runtime-only checks (to_pickle on the argument) fire at call time


def test_conditions_reject_injections(df):
    with pytest.raises(UnsafeExpressionError, match="unsafe condition rejected"):
        evaluate_condition("Age.__class__ is None", df)


# ------------------------------------------------------------------ legitimate use
@pytest.mark.parametrize("expr,expected", [
    ("RoomService + FoodCourt", [11, 2, 8, 5]),
    ("np.log1p(RoomService)", list(np.log1p([1, 2, 3, 4]))),
    ("df['RoomService'] * 2", [2, 4, 6, 8]),
    ("Age.fillna(0) / 2", [5.0, 20.0, 0.0, 25.0]),
    ("Cabin.str.split('/').str[0].fillna('U')", ["A", "B", "U", "C"]),
    ("`Room Service` * 10", [10, 20, 30, 40]),
    ("df['_is_train'] + 1", [2, 2, 1, 1]),
    ("np.where(Age > 20, 1, 0)", [0, 1, 0, 1]),
    ("np.clip(FoodCourt, 1, 5)", [5, 1, 5, 1]),
    ("RoomService ** 2 - FoodCourt % 3", [0, 4, 7, 15]),
    ("RoomService.apply(lambda v: v * 3)", [3, 6, 9, 12]),
    ("FoodCourt.rank().astype(int)", [4, 1, 3, 2]),
    ("HomePlanet.fillna('Unknown').str.upper()", ["EARTH", "EARTH", "MARS", "UNKNOWN"]),
    ("Cabin.str.split('/', expand=True)[2].map({'S': 1, 'P': 0})", [1, 0, np.nan, 1]),
    ("pd.isna(Age).astype(int)", [0, 0, 1, 0]),
    ("df.groupby('HomePlanet')['RoomService'].transform('mean').fillna(0)", [1.5, 1.5, 3.0, 0.0]),
    ("(RoomService > 2) * 1", [0, 0, 1, 1]),
    ("abs(-RoomService)", [1, 2, 3, 4]),
])
def test_legitimate_series_expressions(df, expr, expected):
    result = list(evaluate_expression(expr, df))
    if all(isinstance(v, str) for v in expected):
        assert result == expected
    else:
        np.testing.assert_allclose(np.asarray(result, dtype=float), np.asarray(expected, dtype=float))


@pytest.mark.parametrize("expr,expected", [
    ("RoomService.sum()", 10),
    ("max(1, 2) + min(3, 4) + round(2.6)", 8),
    ("len(df)", 4),
    ("f'{RoomService.mean():.1f}'", "2.5"),
    ("'{}-{}'.format('a', 1)", "a-1"),
    ("'%s/%d' % ('a', 3)", "a/3"),
    ("2 ** 10", 1024),
    ("1 if Age.isna().any() else 0", 1),
    ("math.sqrt(16)", 4.0),
    ("int('7') + float('0.5')", 7.5),
    ("'a' * 3", "aaa"),
])
def test_legitimate_scalar_expressions(df, expr, expected):
    assert evaluate_expression(expr, df) == expected


@pytest.mark.parametrize("cond,expected", [
    ("Age > 30 and HomePlanet == 'Earth'", [False, True, False, False]),
    ("(Age > 30) & (VIP == True)", [False, False, False, False]),
    ("Age > 30 or VIP == True", [True, True, True, True]),
    ("Cabin.isna()", [False, False, True, False]),
    ("not Cabin.isna()", [True, True, False, True]),
    ("HomePlanet in ['Mars', 'Europa']", [False, False, True, False]),
    ("HomePlanet not in ['Mars']", [True, True, False, True]),
    ("20 < Age < 45", [False, True, False, False]),
    ("Cabin == None", [False, False, True, False]),
    ("Cabin is not None", [True, True, False, True]),
    ("HomePlanet.str.startswith('E')", [True, True, False, False]),
    ("True", [True, True, True, True]),
    ("df['Room Service'] >= 3", [False, False, True, True]),
])
def test_conditions(df, cond, expected):
    mask = evaluate_condition(cond, df)
    assert mask.dtype == bool
    assert mask.index.equals(df.index)
    assert mask.tolist() == expected


def test_condition_must_be_boolean(df):
    with pytest.raises(ToolInputError, match="must be boolean"):
        evaluate_condition("Age + 1", df)
    with pytest.raises(ToolInputError, match="True/False per row"):
        evaluate_condition("'Earth'", df)


def test_unknown_column_names_close_match(df):
    with pytest.raises(ToolInputError, match="Did you mean: Age"):
        evaluate_expression("Agee * 2", df)


def test_pandas_errors_become_readable(df):
    with pytest.raises(ToolInputError, match="could not evaluate"):
        evaluate_expression("HomePlanet / 2", df)


def test_compile_lambda_string_forms(df):
    first = compile_lambda("lambda x: x.split('/')[0] if isinstance(x, str) else None")
    assert df["Cabin"].map(first).tolist()[:2] == ["A", "B"]
    assert first(None) is None
    row_sum = compile_lambda("lambda row: row['RoomService'] + row['FoodCourt']")
    assert df.apply(row_sum, axis=1).tolist() == [11, 2, 8, 5]
    bare = compile_lambda("x * 3 + 1")
    assert bare(2) == 7
    two = compile_lambda("lambda a, b: max(a, b)")
    assert two(3, 9) == 9
    assert compile_lambda(two) is two


def test_compile_lambda_errors_are_clear():
    fn = compile_lambda("lambda x: x + 1")
    with pytest.raises(ToolInputError, match="failed on 'a'"):
        fn("a")
    with pytest.raises(ToolInputError, match="takes 1 argument"):
        fn(1, 2)
    with pytest.raises(ToolInputError, match="must be a string"):
        compile_lambda(42)


def test_evaluation_does_not_mutate_frame(df):
    before = df.copy()
    evaluate_expression("Age.fillna(0)", df)
    evaluate_expression("df.drop(columns=['Age'])", df)
    pd.testing.assert_frame_equal(df, before)


# ------------------------------------------------------------------ the allow-list design (issue 13)
class _OverridingSeries(pd.Series):
    """A subclass whose fillna is not pandas' fillna: same name, different object."""

    @property
    def _constructor(self):
        return _OverridingSeries

    def fillna(self, *args, **kwargs):  # noqa: ARG002 - never reached
        raise AssertionError("the evaluator called a method it had not allowed")


def test_methods_are_allowed_by_identity_not_by_name():
    fn = compile_lambda("lambda s: s.fillna(0)")
    assert fn(pd.Series([1.0, None])).tolist() == [1.0, 0.0]
    with pytest.raises(UnsafeExpressionError, match="_OverridingSeries.fillna is not allowed"):
        fn(_OverridingSeries([1.0, None]))


def test_instance_attribute_cannot_shadow_an_allowed_method():
    series = pd.Series([1.0, 2.0])
    series.__dict__["sum"] = print  # what getattr would return instead of Series.sum
    with pytest.raises(UnsafeExpressionError, match="set on the object itself"):
        compile_lambda("lambda s: s.sum()")(series)


def test_lambda_parameters_receive_data_only():
    with pytest.raises(UnsafeExpressionError, match="received a function"):
        compile_lambda("lambda f: 1")(print)


def test_data_types_are_values_functions_are_not(df):
    assert evaluate_expression("RoomService.astype(float).dtype == np.float64", df)
    assert evaluate_expression("Cabin.map(lambda c: isinstance(c, str)).sum()", df) == 3
    with pytest.raises(UnsafeExpressionError, match="call it directly"):
        evaluate_expression("Cabin.map(len)", df)
    with pytest.raises(UnsafeExpressionError, match="may only be passed directly as an argument"):
        evaluate_expression("[lambda v: v][0]", df)
