"""mltb's expression language (mltb_core/toolkit/expressions.py, issue 20): each table function, the aliases
models write, the refusals, the size guards, capped errors, and the expressions of the paper's and the
experts' trajectories."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

import mltb_core.toolkit.tools  # noqa: F401 - registers the tools
from mltb_core.toolkit import expressions as ex
from mltb_core.toolkit.expressions import (
    EXPRESSION_DOC,
    FUNCTIONS,
    MAX_ERROR_CHARS,
    ExpressionError,
    ExpressionRejected,
    compile_expression,
    compile_lambda,
    evaluate_condition,
    evaluate_expression,
)
from mltb_core.toolkit.registry import REGISTRY, ToolContext, ToolInputError, execute
from mltb_core.toolkit.scratchpad import Scratchpad
from mltb_core.toolkit.validation import DTYPE_NAMES, choose, resolve_dtype


@pytest.fixture
def df() -> pd.DataFrame:
    return pd.DataFrame({
        "Age": [10.0, 25.0, np.nan, 40.0],
        "Spa": [0, 1, 4, 9],
        "Cabin": ["A/1/S", None, "B/22/P", "C/3/S"],
        "Name": ["Ann Lee", "bob  ", None, "Cy"],
        "Start": ["2024-01-01 10:00", "2024-03-15 23:30", None, "2023-12-31 00:05"],
        "End": ["2024-01-03 10:00", "2024-03-16 23:30", None, "2024-01-01 00:05"],
        "Flag": [True, False, True, False],
        "odd name": [1, 2, 3, 4],
        "_is_train": [1, 1, 0, 0],
    })


def values(result) -> list:
    """A result as a list with missing values as None (NaN, None and NaT compare equal here)."""
    items = result.tolist() if isinstance(result, pd.Series) else [result]
    return [None if (v is None or (not isinstance(v, str) and pd.isna(v))) else v for v in items]


# Every table function, through its own name and the spellings models use (expression, expected values).
CASES: list[tuple[str, list]] = [
    ("log(Spa + 1)", list(np.log(np.array([1, 2, 5, 10.0])))),
    ("np.log1p(Spa)", list(np.log1p(np.array([0, 1, 4, 9.0])))),
    ("log2(Spa + 1)", list(np.log2(np.array([1, 2, 5, 10.0])))),
    ("math.log10(Spa + 1)", list(np.log10(np.array([1, 2, 5, 10.0])))),
    ("exp(Spa * 0)", [1.0, 1.0, 1.0, 1.0]),
    ("np.expm1(Spa * 0)", [0.0, 0.0, 0.0, 0.0]),
    ("sqrt(Spa)", [0.0, 1.0, 2.0, 3.0]),
    ("np.cbrt(Spa * 0 + 8)", [2.0, 2.0, 2.0, 2.0]),
    ("square(Spa)", [0, 1, 16, 81]),
    ("abs(Spa - 2)", [2, 1, 2, 7]),
    ("np.absolute(2 - Spa)", [2, 1, 2, 7]),
    ("sign(Spa - 1)", [-1, 0, 1, 1]),
    ("floor(Age / 3)", [3.0, 8.0, None, 13.0]),
    ("ceil(Age / 3)", [4.0, 9.0, None, 14.0]),
    ("trunc(0 - Age / 3)", [-3.0, -8.0, None, -13.0]),
    ("sin(Spa * 0)", [0.0] * 4), ("cos(Spa * 0)", [1.0] * 4), ("tan(Spa * 0)", [0.0] * 4),
    ("tanh(Spa * 0)", [0.0] * 4), ("arctan(Spa * 0)", [0.0] * 4),
    ("isfinite(Age)", [True, True, False, True]),
    ("isinf(Age / 0)", [True, True, False, True]),
    ("round(Age / 3, 1)", [3.3, 8.3, None, 13.3]),
    ("Age.round()", [10.0, 25.0, None, 40.0]),
    ("clip(Spa, 1, 4)", [1, 1, 4, 4]),
    ("np.clip(Spa, 0, None)", [0, 1, 4, 9]),
    ("Spa.clip(lower=2)", [2, 2, 4, 9]),
    ("power(Spa, 2)", [0, 1, 16, 81]),
    ("maximum(Spa, 2)", [2, 2, 4, 9]),
    ("np.minimum(Spa, Age)", [0.0, 1.0, None, 9.0]),
    ("max(Spa, Age)", [10.0, 25.0, 4.0, 40.0]),
    ("min(Spa, Age, 3)", [0.0, 1.0, 3.0, 3.0]),
    ("max(Age)", [40.0]), ("min(Age)", [10.0]),
    ("mean(Spa)", [3.5]), ("Age.median()", [25.0]), ("np.sum(Spa)", [14]), ("var(Spa)", [49 / 3]),
    ("std(Spa) ** 2", [49 / 3]),
    ("isnull(Age)", [False, False, True, False]),
    ("pd.isna(Cabin)", [False, True, False, False]),
    ("notnull(Age)", [True, True, False, True]),
    ("Cabin.notna()", [True, False, True, True]),
    ("Age is None", [False, False, True, False]),
    ("fillna(Age, 0)", [10.0, 25.0, 0.0, 40.0]),
    ("Age.fillna(Age.mean())", [10.0, 25.0, 25.0, 40.0]),
    ("Age.fillna(Spa)", [10.0, 25.0, 4.0, 40.0]),
    ("where(Spa > 1, 'big', 'small')", ["small", "small", "big", "big"]),
    ("np.where(Age > 20, 1, 0)", [0, 1, 0, 1]),
    ("'yes' if Flag else None", ["yes", None, "yes", None]),
    ("between(Spa, 1, 4)", [False, True, True, False]),
    ("Age.between(20, 50)", [False, True, False, True]),
    ("isin(Spa, [1, 9])", [False, True, False, True]),
    ("Spa in [1, 9]", [False, True, False, True]),
    ("Spa not in (1, 9)", [True, False, True, False]),
    ("is_str(Cabin)", [True, False, True, True]),
    ("isinstance(Cabin, str)", [True, False, True, True]),
    ("is_float(Age)", [True, True, False, True]),   # a missing value is of no type
    ("is_int(Spa)", [True, True, True, True]),
    ("is_bool(Flag)", [True, True, True, True]),
    ("is_number(Name)", [False, False, False, False]),
    ("isinstance(Spa, (int, float))", [True, True, True, True]),
    ("astype(Flag, 'int')", [1, 0, 1, 0]),
    ("(Spa > 0).astype(int)", [0, 1, 1, 1]),
    ("Spa.astype(np.float32) / 2", [0.0, 0.5, 2.0, 4.5]),
    ("str(Spa) + '!'", ["0!", "1!", "4!", "9!"]),
    ("float(Spa) / 4", [0.0, 0.25, 1.0, 2.25]),
    ("int(Age.fillna(0)) // 10", [1, 2, 0, 4]),
    ("to_numeric(str_split_part(Cabin, '/', 1))", [1.0, None, 22.0, 3.0]),
    ("dt_year(to_datetime(Start))", [2024, 2024, None, 2023]),
    ("pd.to_datetime(Start, format='%Y-%m-%d %H:%M').dt.month", [1, 3, None, 12]),
    ("dt_month(Start)", [1, 3, None, 12]), ("dt_day(Start)", [1, 15, None, 31]),
    ("dt_hour(Start)", [10, 23, None, 0]), ("dt_minute(Start)", [0, 30, None, 5]),
    ("dt_second(Start)", [0, 0, None, 0]), ("to_datetime(Start).dt.dayofweek", [0, 4, None, 6]),
    ("dt_dayofyear(Start)", [1, 75, None, 365]), ("dt_quarter(Start)", [1, 1, None, 4]),
    ("dt_days(to_datetime(End) - to_datetime(Start))", [2, 1, None, 1]),
    ("(to_datetime(End) - to_datetime(Start)).dt.total_seconds() / 3600", [48.0, 24.0, None, 24.0]),
    ("str_len(Cabin)", [5, None, 6, 5]), ("len(Cabin)", [5, None, 6, 5]), ("Cabin.str.len()", [5, None, 6, 5]),
    ("str_lower(Name)", ["ann lee", "bob  ", None, "cy"]), ("Name.str.upper()", ["ANN LEE", "BOB  ", None, "CY"]),
    ("str_strip(Name)", ["Ann Lee", "bob", None, "Cy"]),
    ("str_contains(Cabin, '/S')", [True, False, False, True]),
    ("Cabin.str.contains('.')", [False, False, False, False]),   # plain text, not a pattern
    ("Cabin.str.startswith('B')", [False, False, True, False]),
    ("str_endswith(Cabin, 'S')", [True, False, False, True]),
    ("str_split_part(Cabin, '/', 0)", ["A", None, "B", "C"]),
    ("Cabin.str.split('/').str[-1]", ["S", None, "P", "S"]),
    ("str_slice(Cabin, 0, 3)", ["A/1", None, "B/2", "C/3"]), ("Cabin.str[2:]", ["1/S", None, "22/P", "3/S"]),
    ("str_get(Cabin, 0)", ["A", None, "B", "C"]), ("Cabin.str.get(-1)", ["S", None, "P", "S"]),
    ("str_replace(Cabin, '/', '-')", ["A-1-S", None, "B-22-P", "C-3-S"]),
    ("`odd name` * 2", [2, 4, 6, 8]), ("df['odd name'] + df.Spa", [1, 3, 7, 13]),
    ("10 < Age <= 40", [False, True, False, True]),
    ("(_is_train == 0) | (Spa == 0)", [True, False, True, True]),
    ("not Flag and Spa > 0", [False, True, False, True]),
    ("~Flag", [False, True, False, True]),
    ("-Age + pi * 0", [-10.0, -25.0, None, -40.0]),
    ("Spa % 4 + Spa // 4", [0, 1, 1, 3]),
]


@pytest.mark.parametrize("expr,expected", CASES, ids=[c[0] for c in CASES])
def test_function_cases(df, expr, expected):
    before = df.copy(deep=True)
    got = values(evaluate_expression(expr, df))
    assert got == [pytest.approx(v) if isinstance(v, float) else v for v in expected]
    pd.testing.assert_frame_equal(df, before)   # inputs never change


def test_every_table_function_has_a_case():
    used = set()
    for expr, _ in CASES:
        tree_names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", expr))
        used |= tree_names & set(FUNCTIONS)
    # Functions reached only through an alias in CASES: isnull (pd.isna/is None), is_str (isinstance), ...
    aliased = {"isnull", "notnull", "is_str", "is_number", "dt_dayofweek", "dt_total_seconds", "str_len", "str_upper",
               "str_startswith", "str_get"}
    assert set(FUNCTIONS) - used - aliased == set()


def test_conditions_count_missing_as_false(df):
    assert evaluate_condition("Age > 15", df).tolist() == [False, True, False, True]
    assert evaluate_condition("True", df).tolist() == [True] * 4
    with pytest.raises(ExpressionError, match="must be True/False"):
        evaluate_condition("Age + 1", df)


def test_lambdas_are_vectorised_over_a_column_or_rows(df):
    deck = compile_lambda("lambda x: x.split('/')[0] if isinstance(x, str) else None")
    assert values(deck.apply(df["Cabin"])) == ["A", None, "B", "C"]
    assert values(compile_lambda("x * 2").apply(df["Spa"])) == [0, 2, 8, 18]
    rows = compile_lambda("lambda row: row['Age'] / 10 if row['Flag'] else row.Spa")
    assert values(rows.apply(df)) == [1.0, 1, None, 9]
    with pytest.raises(ExpressionError, match="is a row"):
        compile_lambda("lambda row: row + 1").apply(df)
    with pytest.raises(ExpressionError, match="one value, not a row"):
        compile_lambda("lambda x: x['Age']").apply(df["Age"])
    with pytest.raises(ExpressionError, match="unknown name 'Age'"):
        compile_lambda("lambda x: Age").apply(df["Age"])
    with pytest.raises(ExpressionRejected, match="exactly one parameter"):
        compile_lambda("lambda a, b: a + b")


def test_unknown_columns_and_functions_get_suggestions(df):
    with pytest.raises(ExpressionError, match=r"unknown column 'Agee'.*'Age'"):
        evaluate_expression("Agee + 1", df)
    with pytest.raises(ExpressionRejected, match="np.log1 is not a function.*np.log1p"):
        evaluate_expression("np.log1(Age)", df)
    with pytest.raises(ExpressionRejected, match=r"x.fillnaa\(\) is not a function.*x.fillna"):
        evaluate_expression("Age.fillnaa(0)", df)
    with pytest.raises(ExpressionError, match="'log' is a function"):
        evaluate_expression("log", df)


def test_arguments_are_typed_and_checked_at_compile_time():
    with pytest.raises(ExpressionError, match="must be a literal string"):
        compile_expression("str_contains(Cabin, Name)")
    with pytest.raises(ExpressionError, match="must be a literal integer"):
        compile_expression("str_split_part(Cabin, '/', Age)")
    with pytest.raises(ExpressionError, match="has no argument 'engine'"):
        compile_expression("clip(Age, engine='numba')")
    with pytest.raises(ExpressionError, match="unknown type 'S1000000000'"):
        compile_expression("astype(Age, 'S1000000000')")
    with pytest.raises(ExpressionError, match="takes at most 2"):
        compile_expression("fillna(Age, 0, 1)")
    with pytest.raises(ExpressionError, match="missing its argument 'value'"):
        compile_expression("fillna(Age)")
    with pytest.raises(ExpressionRejected, match="literal list"):
        compile_expression("Age in Spa")


def test_run_time_type_checks(df):
    with pytest.raises(ExpressionError, match=r"log\(\) needs numbers"):
        evaluate_expression("log(Name)", df)
    with pytest.raises(ExpressionError, match=r"str_lower\(\) needs text"):
        evaluate_expression("str_lower(Age)", df)
    with pytest.raises(ExpressionError, match="missing value"):
        evaluate_expression("astype(Age, int)", df)


@pytest.mark.parametrize("expr,fragment", [
    ("'a' * 10**9", "repeating text"),
    ("Cabin * 100000", "repeating text"),
    ("Cabin * Spa * 100000", "repeating text"),
    ("9 ** 9 ** 9", "too large"),
    ("2 ** 200", "too large"),
    ("9223372036854775807 * 9223372036854775807 * 9223372036854775807", "too large"),
    ("99999999999999999999999", "integer literal"),
    ("'%999999999s' % 'a'", "printf"),
    ("1 << 100", "operator <<"),
    ("'" + "x" * 1001 + "' + Name", "string literal"),
    ("str_replace(str_replace(Cabin, '/', '" + "x" * 900 + "'), 'x', '" + "y" * 900 + "')", "str_replace()"),
    ("Age" + " + 1" * 400, "parts"),
    ("-" * 200 + "Age", "nests"),
    ("(" * 250 + "Age" + ")" * 250, "nest"),
    ("Age" + " + 1" * 600, "characters long"),
    ("Spa in [1, Age]", "not a constant"),
])
def test_size_guards(df, expr, fragment):
    with pytest.raises(ExpressionError) as info:
        evaluate_expression(expr, df)
    assert fragment in str(info.value) or fragment in str(info.value).lower(), str(info.value)


def test_rows_are_combined_by_position_never_aligned():
    """Two Series with duplicated index labels would align as an outer product; here they never meet by label."""
    frame = pd.DataFrame({"a": np.arange(4000.0)}, index=[0] * 4000)
    assert len(evaluate_expression("a + fillna(a, 0) * where(a > 1, a, 0)", frame)) == 4000


def test_error_messages_are_capped():
    """A short expression over a frame with huge values or names cannot make a huge message (issue 20: a
    130-character expression once produced a 3 MB error, over the next request's context window)."""
    huge = "x" * 1_000_000
    frame = pd.DataFrame({"Name": [huge, huge + "y"], huge: [1, 2], "Age": [1.0, 2.0]})
    for expr in ("astype(Name, 'int')", "to_numeric(Name) + log(Name)", f"{'Nam' + 'x' * 100} + 1",
                 "str_lower(Age) + Name * 2", "Name + Age", "where(Age > 0, Name, 0) + 1 - Name",
                 "astype(df['" + "x" * 120 + "'], 'bool') and Name"):
        with pytest.raises(ToolInputError) as info:
            evaluate_expression(expr, frame)
        assert len(str(info.value)) <= MAX_ERROR_CHARS, (expr, len(str(info.value)))
    long_source = "Age + " * 330 + "Agee"
    with pytest.raises(ToolInputError) as info:
        evaluate_expression(long_source, frame)
    assert len(str(info.value)) <= MAX_ERROR_CHARS


def test_refusals_name_the_construct_and_the_allowed_forms(df):
    for expr, construct in (("[a for a in Age]", "a list comprehension"), ("Age.values", "the attribute .values"),
                            ("f'{Age}'", "an f-string"), ("{'a': 1}", "a dict literal"),
                            ("import os", "a statement"), ("(lambda: 1)()", "calling the result"), ("Age + (lambda: 1)", "a lambda inside"),
                            ("Age.__class__", "'__class__'"), ("Age.pipe(len)", "x.pipe() is not a function"),
                            ("(Age + 1)(2)", "calling the result")):
        with pytest.raises(ExpressionRejected) as info:
            evaluate_expression(expr, df)
        assert construct in str(info.value), str(info.value)
        assert "not part of mltb's expression language" in str(info.value) or "not a function of mltb's" in str(
            info.value) or "calling the result" in str(info.value)


# ----------------------------------------------------------- the tools' model words go through tables
def test_choose_returns_the_tables_value_not_the_models_object():
    class Sneaky(str):
        pass
    table = {"mean": "mean"}
    assert choose("mean", table, "agg_func") is table["mean"]
    with pytest.raises(ToolInputError, match="'agg_func' must be one of"):
        choose(Sneaky("mean"), table, "agg_func")
    with pytest.raises(ToolInputError, match="must be one of"):
        choose(["mean"], table, "agg_func")
    assert resolve_dtype("INT") == "int64" and resolve_dtype("Int64") == "Int64"
    assert all(not name.startswith(("S", "V", "U")) or name == "U" for name in DTYPE_NAMES.values())


@pytest.mark.parametrize("tool,kwargs,fragment", [
    ("create_group_aggregation", {"name": "g", "group_column": "Cabin", "agg_column": "Spa", "agg_func": "to_csv"},
     "'agg_func' must be one of"),
    ("create_group_aggregation", {"name": "g", "group_column": "Cabin", "agg_column": "Spa",
                                  "agg_func": ["mean", "to_csv"]}, "'agg_func' must be one of"),
    ("create_rolling_feature", {"name": "r", "source_column": "Spa", "window": 2, "agg_func": "__reduce_ex__"},
     "'agg_func' must be one of"),
    ("fillna_with_conditional_aggregation", {"target_column": "Age", "condition_column": "Flag",
                                             "agg_func": "_op_via_apply"}, "'agg_func' must be one of"),
    ("cast_columns", {"column_type_mapping": {"Spa": "S1000000000"}}, "unknown type"),
    ("create_time_delta", {"name": "d", "start_column": "Start", "end_column": "End", "unit": ["D"]}, "'unit'"),
    # refused by the parameter's declaration (toolkit/params.py: OneOf), before the body's own table
    ("extract_datetime_features", {"datetime_column": "Start", "features": ["__class__"]}, "'features' must be one of"),
])
def test_tools_refuse_words_outside_their_tables(df, tmp_path, tool, kwargs, fragment):
    pad = Scratchpad(objects={"frame": df})
    result = execute({"tool_name": tool, "tool_args": {"bindings": {"df": "frame"}, "func_kwargs": kwargs,
                                                       "output": "out"}}, pad, ToolContext(sandbox=tmp_path))
    assert not result.ok and fragment in result.message, result.message[:400]
    assert list(tmp_path.iterdir()) == []


def test_join_how_goes_through_a_table(df, tmp_path):
    pad = Scratchpad(objects={"a": df, "b": df})
    call = {"tool_name": "join_dataframes", "tool_args": {"bindings": {"left_df": "a", "right_df": "b"},
            "func_kwargs": {"left_on": "Spa", "how": "left_anti"}, "output": "j"}}
    result = execute(call, pad, ToolContext(sandbox=tmp_path))
    assert not result.ok and "'how' must be one of" in result.message


EXPRESSION_TOOLS = ("create_numeric_feature", "create_conditional_feature", "apply_custom_function",
                    "filter_dataframe", "fillna_with_condition", "fillna_with_multiple_conditions",
                    "fillna_with_custom_function")


@pytest.mark.parametrize("tool", EXPRESSION_TOOLS)
def test_expression_tools_document_the_language_once(tool):
    doc = REGISTRY.get(tool).doc
    assert doc.count(EXPRESSION_DOC) == 1
    assert "{expression_language}" not in doc


def test_tools_that_take_expressions(df, tmp_path):
    ctx = ToolContext(sandbox=tmp_path)
    pad = Scratchpad(objects={"frame": df})

    def run(tool: str, kwargs: dict) -> pd.DataFrame:
        result = execute({"tool_name": tool, "tool_args": {"bindings": {"df": "frame"}, "func_kwargs": kwargs,
                                                           "output": "out"}}, pad, ctx)
        assert result.ok, result.message[:500]
        return pad.get("out")

    assert run("create_numeric_feature", {"name": "n", "expression": "np.log1p(Spa) * 0 + Spa"})["n"].tolist() == [0, 1, 4, 9]
    assert run("create_conditional_feature", {"name": "c", "condition": "Spa > 1", "true_value": 1,
                                              "false_value": 0})["c"].tolist() == [0, 0, 1, 1]
    # (test rows stay: a filter that drops some of them is refused)
    assert run("filter_dataframe", {"condition": "str_contains(Cabin, '/S') or _is_train == 0"}).index.tolist() == [0, 2, 3]
    assert run("apply_custom_function", {"name": "deck", "source_columns": "Cabin",
                                         "func": "lambda x: x.split('/')[0]"})["deck"].tolist()[2] == "B"
    assert run("apply_custom_function", {"name": "num", "source_columns": "Cabin",
                                         "func": "lambda x: str_split_part(x, '/', 1)"})["num"].tolist()[2] == 22
    assert run("apply_custom_function", {"name": "t", "source_columns": ["Spa", "Age"],
                                         "func": "lambda row: row['Spa'] + 1"})["t"].tolist() == [1, 2, 5, 10]
    assert values(run("fillna_with_condition", {"target_column": "Age", "condition": "Spa > 1",
                                                "fill_value": 0})["Age"]) == [10.0, 25.0, 0.0, 40.0]
    assert values(run("fillna_with_multiple_conditions", {"target_column": "Age", "conditions_and_values": [
        ["Spa > 5", 1], ["Spa > 1", 2]]})["Age"]) == [10.0, 25.0, 2.0, 40.0]
    assert values(run("fillna_with_custom_function", {"target_column": "Age", "condition": None,
                                                      "custom_func": "lambda row: row['Spa'] * 10"})["Age"]) == [
        10.0, 25.0, 40.0, 40.0]
    assert values(run("fillna_with_custom_function", {"target_column": "Age", "condition": "Spa > 1",
                                                      "custom_func": "lambda row: 7"})["Age"]) == [10.0, 25.0, 7.0, 40.0]


# ----------------------------------------------------------- the paper's and the experts' expressions
# Every model-written expression in the paper's appendix trajectories (/work/shared/papers: Appendix F's
# apply_custom_function, with the typographic quotes of the extracted text, and the filter_dataframe
# condition), with the tool that takes it.
PAPER_EXPRESSIONS = [
    ("apply_custom_function", "lambda x: x.split(\u2019/\u2019)[0] if isinstance(x, str) else None"),
    ("filter_dataframe", "Transported.notna()"),
]


def test_paper_expressions_compile_and_run():
    frame = pd.DataFrame({"Cabin": ["B/0/P", None], "Transported": [True, None]})
    assert values(compile_lambda(PAPER_EXPRESSIONS[0][1]).apply(frame["Cabin"])) == ["B", None]
    assert evaluate_condition(PAPER_EXPRESSIONS[1][1], frame).tolist() == [True, False]


def _tool_examples() -> list[tuple[str, str, str]]:
    """(tool, parameter, text) of every expression in the expression tools' docstring examples."""
    out = []
    for tool in EXPRESSION_TOOLS:
        doc = REGISTRY.get(tool).doc
        for block in re.findall(r"\{\"tool_name\".*?\"output\": \"\w+\"\}\}", doc, re.S):
            kwargs = json.loads(block)["tool_args"]["func_kwargs"]
            for key in ("expression", "condition", "func", "custom_func"):
                if isinstance(kwargs.get(key), str):
                    out.append((tool, key, kwargs[key]))
    return out


def test_docstring_examples_compile():
    examples = _tool_examples()
    assert len(examples) >= 6, examples
    for _, key, text in examples:
        (compile_lambda if key in ("func", "custom_func") else compile_expression)(text)


def test_module_has_no_name_dispatch_on_values():
    """The evaluator never looks a name up on a value: the module calls no getattr/eval/exec/__import__ and
    no pandas method that resolves strings to methods (agg, apply, transform, pipe, query, eval)."""
    import ast
    tree = ast.parse(open(ex.__file__).read())
    calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)]
    named = {f.id for f in calls if isinstance(f, ast.Name)}
    methods = {f.attr for f in calls if isinstance(f, ast.Attribute)}
    assert not named & {"getattr", "setattr", "eval", "exec", "compile", "__import__", "vars", "globals"}
    assert not methods & {"agg", "aggregate", "apply", "transform", "pipe", "query", "eval", "map_partitions"}


def test_docs_function_table_is_the_codes():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "expressions.md").read_text()
    block = text.split("<!-- function-table:begin -->\n", 1)[1].split("\n<!-- function-table:end -->", 1)[0]
    assert block == ex.function_reference(), "regenerate docs/expressions.md's table from function_reference()"


def test_deep_nesting_under_a_deep_caller_stack_is_a_refusal(df):
    """A caller already deep in its stack (planner, registry, pytest) meets Python's recursion limit sooner;
    the result is still a clear refusal, never a RecursionError."""
    import sys

    def nested(depth: int):
        if depth:
            return nested(depth - 1)
        for source in ("-" * 140 + "Age", "Age" + " + 1" * 140):
            with pytest.raises(ToolInputError, match="nests too deeply"):
                evaluate_expression(source, df)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        nested(150)
    finally:
        sys.setrecursionlimit(limit)
