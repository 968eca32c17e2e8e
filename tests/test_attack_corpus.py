"""Issues 13 and 20: the attack corpus (tests/attack_corpus.py) through every entry point of the expression
language (mltb_core/toolkit/expressions.py).

Each attack runs against a real frame through evaluate_expression / evaluate_condition /
compile_lambda (applied to a column and to rows) and through the real tools (registry.execute with a ToolContext whose sandbox is
a tmp dir). For every run: the attack is refused with a readable error or is harmless; no file
appears in a canary directory, the cwd or the sandbox; the canary "labels" content never comes
back; the input frame (values and dtypes) is unchanged.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mltb_core.toolkit.tools  # noqa: F401 - registers the tools run below
from attack_corpus import ATTACKS
from mltb_core.toolkit.registry import ToolContext, ToolInputError, execute
from mltb_core.toolkit.expressions import (
    MAX_ERROR_CHARS,
    ExpressionError,
    ExpressionRejected,
    compile_lambda,
    evaluate_condition,
    evaluate_expression,
)
from mltb_core.toolkit.scratchpad import Scratchpad

CANARY_TEXT = "CANARY-LABELS-7f3a9c"  # content of the labels file; must never come back
ROOT = Path(__file__).resolve().parents[1]


def make_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 60
    return pd.DataFrame({
        "PassengerId": [f"{i // 2:04d}_{i % 2 + 1:02d}" for i in range(n)],
        "HomePlanet": [None if i % 11 == 4 else p for i, p in enumerate(rng.choice(["Earth", "Europa", "Mars"], n))],
        "CryoSleep": rng.random(n) > 0.5,
        "Cabin": [None if i % 10 == 3 else f"{'ABF'[i % 3]}/{i}/{'PS'[i % 2]}" for i in range(n)],
        "Age": np.where(np.arange(n) % 7 == 0, np.nan, rng.integers(1, 80, n).astype(float)),
        "RoomService": rng.integers(0, 500, n).astype(float),
        "Spa": rng.integers(0, 300, n).astype(float),
        "Name": [f"Mr. Person{i}" if i % 2 else f"Mrs. Person{i}" for i in range(n)],
        "Start": pd.date_range("2024-01-01", periods=n, freq="36h").astype(str),
        "Transported": rng.random(n) > 0.5,
        "_is_train": [1] * 45 + [0] * 15,
    })


class Arena:
    """A frame, a sandbox, a canary dir, a canary labels file and a scratch cwd, with before/after checks."""

    def __init__(self, root: Path):
        self.sandbox = root / "sandbox"
        self.outside = root / "outside"
        self.cwd = root / "cwd"
        for d in (self.sandbox, self.outside, self.cwd):
            d.mkdir()
        self.labels = self.outside / "labels.csv"
        self.labels.write_text(f"id,target\n0,{CANARY_TEXT}\n")
        self.frame = make_frame()
        self.original = self.frame.copy(deep=True)
        self.listing = self._listing()

    def _listing(self) -> dict[str, list[str]]:
        return {str(d): sorted(p.name for p in d.rglob("*")) for d in (self.sandbox, self.outside, self.cwd)}

    def fill(self, source: str) -> str:
        return source.replace("{OUT}", str(self.outside)).replace("{LABELS}", str(self.labels))

    def assert_untouched(self, what: str) -> None:
        assert self._listing() == self.listing, f"{what}: files appeared: {self._listing()}"
        pd.testing.assert_frame_equal(self.frame, self.original, check_dtype=True, obj=f"frame after {what}")
        assert list(self.frame.dtypes) == list(self.original.dtypes), what


@pytest.fixture
def arena(tmp_path, monkeypatch) -> Arena:
    arena = Arena(tmp_path)
    monkeypatch.chdir(arena.cwd)
    return arena


def assert_harmless(value, what: str) -> None:
    """A value an attack produced: no function, no canary content."""
    assert not callable(value) or isinstance(value, type), f"{what} returned a callable {value!r}"
    if isinstance(value, (pd.DataFrame, pd.Series)):  # text can only hide in object columns
        frame = value.to_frame() if isinstance(value, pd.Series) else value
        text = frame.select_dtypes(include="object").astype(str)
        leaked = any(col.str.contains(CANARY_TEXT, regex=False).any() for _, col in text.items())
    else:
        leaked = CANARY_TEXT in repr(value)
    assert not leaked, f"{what} read the labels file"


def assert_readable(exc: Exception, what: str) -> None:
    message = str(exc)
    assert isinstance(exc, ToolInputError), f"{what}: {type(exc).__name__} escaped: {message}"
    assert message and len(message) <= MAX_ERROR_CHARS and "Traceback" not in message, f"{what}: unreadable error {message!r}"
    assert CANARY_TEXT not in message, f"{what}: the error message leaked the labels file"


def run_direct(what: str, thunk) -> None:
    try:
        value = thunk()
    except Exception as exc:  # noqa: BLE001 - every exception is checked for readability
        assert_readable(exc, what)
    else:
        assert_harmless(value, what)


def run_tool(arena: Arena, tool: str, func_kwargs: dict) -> None:
    pad = Scratchpad(objects={"combined": arena.frame})
    branch = pad.child()
    result = execute({"tool_name": tool, "tool_args": {"bindings": {"df": "combined"}, "func_kwargs": func_kwargs,
                                                       "output": "result"}},
                     branch, ToolContext(sandbox=arena.sandbox, time_limit=30))
    what = f"{tool}({func_kwargs})"
    assert "unknown tool" not in result.message, result.message
    assert CANARY_TEXT not in result.message, f"{what} leaked the labels file"
    if result.ok:
        assert_harmless(branch.get("result"), what)
    else:
        assert result.message.startswith("Error:"), result.message
    assert pad.get("combined") is arena.frame


def run_attack(arena: Arena, kind: str, source: str) -> None:
    src = arena.fill(source)
    df = arena.frame
    if kind == "expr":
        run_direct(f"evaluate_expression({src!r})", lambda: evaluate_expression(src, df))
        arena.assert_untouched(f"evaluate_expression({src!r})")
        run_direct(f"evaluate_condition({src!r})", lambda: evaluate_condition(src, df))
        arena.assert_untouched(f"evaluate_condition({src!r})")
        run_tool(arena, "create_numeric_feature", {"name": "X", "expression": src})
        arena.assert_untouched(f"create_numeric_feature({src!r})")
        run_tool(arena, "filter_dataframe", {"condition": src})
        arena.assert_untouched(f"filter_dataframe({src!r})")
    else:
        for label, arg in (("column", df["Cabin"]), ("rows", df[["Age", "Spa"]])):
            run_direct(f"compile_lambda({src!r}) on {label}", lambda arg=arg: compile_lambda(src).apply(arg))
            arena.assert_untouched(f"compile_lambda({src!r}) on {label}")
        run_tool(arena, "apply_custom_function", {"name": "X", "source_columns": "Cabin", "func": src})
        run_tool(arena, "apply_custom_function", {"name": "X", "source_columns": ["Age", "Spa"], "func": src})
        run_tool(arena, "fillna_with_custom_function", {"target_column": "Age", "condition": None, "custom_func": src})
        arena.assert_untouched(f"tools with lambda {src!r}")


def test_corpus_size_and_classes():
    print(f"attack corpus: {len(ATTACKS)} entries in {len({g for g, _, _ in ATTACKS})} classes")
    assert len(ATTACKS) >= 200
    assert len({s for _, _, s in ATTACKS}) == len(ATTACKS), "duplicate attacks"


@pytest.mark.parametrize("group,kind,source", ATTACKS, ids=[f"{g}:{s[:50]}" for g, _, s in ATTACKS])
def test_attack_is_contained(arena, group, kind, source):
    run_attack(arena, kind, source)


def test_every_attack_is_refused_by_the_language(arena, ):
    """No attack in the corpus gives a value: each is refused at compile time (a construct outside the
    language) or fails with an ExpressionError (a size guard, a type check)."""
    outcomes: dict[str, list[str]] = {"rejected": [], "error": [], "value": []}
    for _, kind, source in ATTACKS:
        src = arena.fill(source)
        try:
            if kind == "expr":
                evaluate_expression(src, arena.frame)
            else:
                compile_lambda(src).apply(arena.frame["Cabin"])
        except ExpressionRejected:
            outcomes["rejected"].append(src)
        except ExpressionError:
            outcomes["error"].append(src)
        else:
            outcomes["value"].append(src)
    print({k: len(v) for k, v in outcomes.items()})
    assert outcomes["value"] == []
    assert len(outcomes["rejected"]) > 0.9 * len(ATTACKS)   # almost all never get past the compiler
    arena.assert_untouched("the whole corpus")


# ---------------------------------------------------- issue 13's own examples, one test each
def refused_without_effect(arena: Arena, expr: str, fragment: str, *markers: Path) -> None:
    """Run ``expr``; first check nothing happened, then that the compiler refused it naming the construct."""
    try:
        evaluate_expression(expr, arena.frame)
    except ToolInputError as exc:
        outcome: Exception | None = exc
    else:
        outcome = None
    for marker in markers:
        assert not marker.exists(), f"{expr!r} wrote {marker}"
    arena.assert_untouched(expr)
    assert isinstance(outcome, ExpressionRejected), f"{expr!r} was not refused: {outcome!r}"
    assert fragment in str(outcome), str(outcome)


def test_issue13_agg_through_lambda_parameter_reaches_python_eval(arena):
    marker = arena.outside / "pwned"
    inner = f"Age.__class__.__init__.__globals__['np'].lib._npyio_impl.os.system('touch {marker}')"
    refused_without_effect(arena, f"(lambda f: f('eval', expr=\"{inner}\", engine='python'))(df.agg)",
                           "calling the result of an expression", marker)


def test_issue13_agg_in_a_list_writes_csv(arena):
    target = arena.outside / "from_list.csv"
    refused_without_effect(arena, f"[df.agg][0]('to_csv', path_or_buf='{target}')", "calling the result", target)


def test_issue13_isetitem_mutates_the_frame(arena):
    refused_without_effect(arena, "df.isetitem(1, 'Mars')", "x.isetitem() is not a function")


def test_issue13_filter_dataframe_cannot_rewrite_a_column_across_mcts_branches(arena):
    """The reported case: a filter_dataframe condition rewrote HomePlanet for every row of the shared frame."""
    root = Scratchpad(objects={"train_df": arena.frame})
    left, right = root.child(), root.child()
    condition = "df.isetitem(df.columns.get_loc('HomePlanet'), 'Earth') is None"
    result = execute({"tool_name": "filter_dataframe", "tool_args": {
        "bindings": {"df": "train_df"}, "func_kwargs": {"condition": condition}, "output": "kept"}},
        left, ToolContext(sandbox=arena.sandbox))
    pd.testing.assert_series_equal(right.get("train_df")["HomePlanet"], arena.original["HomePlanet"])
    arena.assert_untouched("filter_dataframe with isetitem")
    assert not result.ok and "isetitem" in result.message, result.message


def test_results_are_plain_values_never_shared_with_the_frame(arena):
    """What an expression hands back is a Series or a scalar; a Series that could share the frame's memory
    (a bare column) is still never written by the tools, which build new frames."""
    for expr in ("Age", "df['Age']", "Age * 1", "np.log1p(Spa)", "max(Age)", "Cabin.str.lower()", "1"):
        value = evaluate_expression(expr, arena.frame)
        assert isinstance(value, (pd.Series, int, float, str, bool)) or value is None, (expr, type(value))
    arena.assert_untouched("plain values")


# ------------------------------------------- legitimate use still works, with the same values
def _expert_sources() -> list[tuple[str, str]]:
    from mltb_core.runner.expert import expert_slugs, load_expert

    out = []
    for slug in expert_slugs():
        for call in load_expert(slug):
            kwargs = call.func_kwargs
            for key, kind in (("expression", "expr"), ("condition", "cond")):
                if isinstance(kwargs.get(key), str):
                    out.append((kind, kwargs[key]))
    return sorted(set(out))


EXPERT_SOURCES = _expert_sources()


def _frame_for(source: str) -> pd.DataFrame:
    """A numeric frame holding every column the expression names (plus the text columns experts compare)."""
    import ast
    tree = ast.parse(source, mode="eval")
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - {"np", "pd", "df", "math", "int", "float"}
    names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
              for n in [n.slice]}
    rng = np.random.default_rng(len(source))
    frame = pd.DataFrame({name: rng.normal(50, 30, 200).round(1) for name in sorted(names)})
    for name in ("accident", "clean_title"):
        if name in frame:
            frame[name] = rng.choice(["Yes", "None reported", "At least 1 accident or damage reported"], 200)
    if "_is_train" in frame:
        frame["_is_train"] = rng.integers(0, 2, 200)
    return frame


def test_expert_trajectories_have_expressions():
    assert len(EXPERT_SOURCES) >= 30, EXPERT_SOURCES


@pytest.mark.parametrize("kind,source", EXPERT_SOURCES, ids=[s[:60] for _, s in EXPERT_SOURCES])
def test_expert_expressions_give_plain_pandas_values(kind, source):
    """Reference: the same text through Python's eval with the columns as variables (trusted fixture text)."""
    frame = _frame_for(source)
    with np.errstate(all="ignore"):
        expected = eval(source, {"np": np, "pd": pd, "df": frame}, dict(frame.items()))  # noqa: S307 - fixture text
        if kind == "expr":
            got = evaluate_expression(source, frame)
            np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(expected, dtype=float))
        else:
            got = evaluate_condition(source, frame)
            assert got.tolist() == expected.fillna(False).astype(bool).tolist()
    pd.testing.assert_frame_equal(frame, _frame_for(source))  # inputs unchanged


@pytest.mark.parametrize("src,values,expected", [
    # The paper's apply_custom_function lambda (Appendix F, with its typographic quotes as extracted) and the
    # tools' docstring examples, evaluated over a whole column / the rows at once.
    ("lambda x: x.split(’/’)[0] if isinstance(x, str) else None", pd.Series(["B/0/P", None]), ["B", None]),
    ("lambda x: x.split('/')[0] if isinstance(x, str) else None", pd.Series(["B/0/P", None, "C"]), ["B", None, "C"]),
    ("lambda row: 0 if row['CryoSleep'] == True else row['Age'] / 10",
     pd.DataFrame({"CryoSleep": [True, False], "Age": [30.0, 30.0]}), [0, 3.0]),
    ("lambda row: row['RoomService'] + row['Spa']", pd.DataFrame({"RoomService": [1.0], "Spa": [2.0]}), [3.0]),
])
def test_paper_and_docstring_lambdas(src, values, expected):
    got = compile_lambda(src).apply(values)
    assert [None if pd.isna(v) else v for v in got.tolist()] == expected


def test_constant_lambda_gives_a_scalar():
    assert compile_lambda("lambda row: 0").apply(pd.DataFrame({"Spa": [np.nan]})) == 0


@pytest.mark.parametrize("cond,expected", [
    ("Transported.notna()", [True, True, False]),  # the paper's filter_dataframe condition
    ("Age < 18 and CryoSleep == True", [True, False, False]),  # create_conditional_feature docstring
    ("Age >= 18 and Spa > 0", [False, True, False]),  # filter_dataframe docstring
    ("_is_train == 1", [True, True, False]),
])
def test_paper_and_docstring_conditions(cond, expected):
    frame = pd.DataFrame({"Transported": [True, False, None], "Age": [5.0, 40.0, np.nan],
                          "CryoSleep": [True, False, True], "Spa": [0.0, 3.0, 1.0], "_is_train": [1, 1, 0]})
    assert evaluate_condition(cond, frame).tolist() == expected


def test_numeric_docstring_example_and_common_idioms(arena):
    df = arena.frame
    pd.testing.assert_series_equal(evaluate_expression("RoomService + Spa", df), df["RoomService"] + df["Spa"])
    pd.testing.assert_series_equal(evaluate_expression("df.Age.fillna(df.Age.median())", df),
                                   df["Age"].fillna(df["Age"].median()), check_names=False)
    pd.testing.assert_series_equal(evaluate_expression("pd.to_datetime(Start).dt.dayofweek", df),
                                   pd.to_datetime(df["Start"]).dt.day_of_week, check_names=False)
    pd.testing.assert_series_equal(evaluate_expression("RoomService + Spa", df), df[["RoomService", "Spa"]].sum(axis=1),
                                   check_names=False)
    np.testing.assert_allclose(evaluate_expression("np.log1p(Spa)", df), np.log1p(df["Spa"].to_numpy()))
    assert evaluate_expression("Spa.mean()", df) == pytest.approx(df["Spa"].mean())
    assert evaluate_expression("Cabin.str[0]", df).tolist()[:3] == [c[0] if isinstance(c, str) else None
                                                                  for c in df["Cabin"].tolist()[:3]]
    arena.assert_untouched("legitimate idioms")


def test_no_file_in_the_repository_cwd_either():
    """The arena fixture moves the cwd to a tmp dir; check the real one got nothing from a direct call too."""
    before = set(os.listdir(ROOT))
    with pytest.raises(ExpressionRejected):
        evaluate_expression("df.to_csv('written_by_attack.csv')", make_frame())
    assert set(os.listdir(ROOT)) == before


# ------------------------------------------------------------------------------------------------------------
# Issue 34: hostile replies through the real OpenAI client (loopback fake server), the boundary and the cache.
# A bound of a few seconds per reply tells a linear parse (milliseconds) from the quadratic ones it replaced
# (35-109 s per reply); it is a containment bound, not a speed target. It is CPU seconds of this process
# (time.process_time), so other processes' load cannot fail it: a quadratic parse burns CPU, a busy box does not.
from attack_corpus import FILE_ATTACKS, REPLY_ATTACKS  # noqa: E402
from fake_openai_server import FakeOpenAIServer, content_reply, tool_call_reply  # noqa: E402

STALL_SECONDS = 5.0


def _reply_step(kind, payload):
    if kind == "native":
        name, arguments = payload
        return tool_call_reply(name, arguments)
    return content_reply(payload)


def _encodable_json(value) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    text.encode("utf-8")   # raises on a lone surrogate
    return text


@pytest.mark.parametrize("name,kind,payload", REPLY_ATTACKS, ids=[a[0] for a in REPLY_ATTACKS])
def test_a_hostile_reply_is_the_models_malformed_reply(tmp_path, name, kind, payload):
    import time

    from mltb_core.llm.base import MALFORMED
    from mltb_core.llm.cache import ResponseCache
    from mltb_core.llm.openai_backend import OpenAIBackend
    from mltb_core.planners.lats import judge_score

    cache = ResponseCache(tmp_path / "cache")
    with FakeOpenAIServer() as server:
        server.enqueue(_reply_step(kind, payload))
        backend = OpenAIBackend("gpt-4o", base_url=server.base_url, api_key="test", cache=cache,
                                sleep=lambda s: None, max_retries=0)
        messages = [{"role": "user", "content": f"attack {name}"}]
        started = time.process_time()
        response = backend.complete(messages, [])
        [candidate] = response.candidates
        if kind == "judge":
            score = judge_score(candidate.text)
            assert score is None or 0.1 <= score <= 1.0
        seconds = time.process_time() - started
        again = backend.complete(messages, [])   # replayed from the cache: what was stored is what came back
    assert seconds < STALL_SECONDS, f"{name}: {seconds:.1f} CPU s for one reply"
    assert again.cached and again.candidates[0].to_dict() == candidate.to_dict()
    _encodable_json(candidate.to_dict())
    assert len(candidate.text) <= 200_000
    if candidate.tool_calls:
        assert candidate.error is None, candidate.error
        assert all("\udc80" not in _encodable_json(c.to_dict()) for c in candidate.tool_calls)
    elif kind == "native" or name == "reply-too-long" or (kind == "content" and '{"tool_name"' in payload):
        assert candidate.error and candidate.error.startswith(MALFORMED), (name, candidate.error)
    assert response.usage.calls == 1 and backend.usage.calls == 1


def test_the_reply_boundary_names_why_a_call_was_refused():
    from mltb_core.llm.base import candidate_from_message

    payload = {name: p for name, _, p in REPLY_ATTACKS}
    deep = candidate_from_message(payload["nested-brackets-in-text"], [])
    assert "nested more than 32 levels" in deep.error
    digits = candidate_from_message(payload["long-integer-in-text"], [])
    assert "4300 digits" in digits.error
    long = candidate_from_message("x" * 1_000_000, [])
    assert "1,000,000 characters" in long.error and len(long.text) < 5_000
    [call] = candidate_from_message(payload["surrogate-in-call-json"], []).tool_calls
    assert call.func_kwargs == {"filepath": "?"} and call.output == "x"


def test_fenced_calls_and_prose_brackets_still_parse():
    from mltb_core.llm.base import parse_content_tool_calls

    call = '{"tool_name": "read_data", "tool_args": {"bindings": {}, "func_kwargs": {"filepath": "a.csv"}}}'
    for text in (f"[see below] {call}", f"```json\n{call}\n```", f"```\n{call}```", f"note (x[0]) then [{call}]",
                 f"```python\nprint(1)\n``` and ```json {call}```", f'He said "hi [" {call}'):
        calls, error = parse_content_tool_calls(text)
        assert error is None and [c.tool_name for c in calls] == ["read_data"], text
    tricky = '{"tool_name": "read_data", "tool_args": {"func_kwargs": {"filepath": "a\\\\\\"]}b[\\\\"}}}'
    [call], error = parse_content_tool_calls(f"[x] {tricky} (")
    assert error is None and call.func_kwargs == {"filepath": 'a\\"]}b[\\'}


@pytest.mark.parametrize("name,line", FILE_ATTACKS, ids=[a[0] for a in FILE_ATTACKS])
def test_a_hostile_results_line_is_reported_and_skipped(tmp_path, name, line):
    from mltb_core.analysis.resultsfile import scan_records

    path = tmp_path / "results.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    records, problems = scan_records(path)
    assert records == [] and len(problems) == 1
    assert str(problems[0]).startswith(f"{path}:1: ")


@pytest.mark.parametrize("name,line", FILE_ATTACKS, ids=[a[0] for a in FILE_ATTACKS])
def test_a_hostile_baseline_is_a_clear_error(tmp_path, name, line):
    from mltb_core.analysis.compare import load_baseline

    path = tmp_path / "baseline.json"
    path.write_text(line, encoding="utf-8")
    with pytest.raises(ValueError, match=f"^baseline file {path} ") as info:
        load_baseline(path)
    assert "Traceback" not in str(info.value)


@pytest.mark.parametrize("name,line", FILE_ATTACKS, ids=[a[0] for a in FILE_ATTACKS])
def test_a_hostile_trajectory_line_is_named_or_passed_over(tmp_path, name, line):
    from mltb_core.analysis.reports import read_steps
    from mltb_core.analysis.records import TrialRecord
    from mltb_core.planners.trajectory import read_trajectory

    path = tmp_path / "t.jsonl"
    path.write_text('{"step_type": "trial_start"}\n' + line + "\n", encoding="utf-8")
    record = TrialRecord(task="t", planner="react", model="sim", trial=0, seed=0, config_hash="h",
                         outcome="valid", trajectory=str(path))
    steps, note = read_steps(record)
    if name == "surrogate-escape":   # a well-formed line: read, its strings made encodable
        assert list(read_trajectory(path))[1] == {"task": "?"} and steps[1] == {"task": "?"}
        return
    with pytest.raises(ValueError, match=f"^{path}:2: "):
        list(read_trajectory(path))
    assert steps == [{"step_type": "trial_start"}] and "1 trajectory line" in note


def test_a_task_spec_nested_too_deeply_is_a_spec_error(tmp_path):
    from mltb_core.bench.tasks import TaskSpecError, load_tasks

    (tmp_path / "deep.toml").write_text("slug = 'deep'\nx = " + "[" * 5_000 + "]" * 5_000 + "\n", encoding="utf-8")
    with pytest.raises(TaskSpecError, match="deep.toml.*nested too deeply"):
        load_tasks([tmp_path])


def test_judge_scores_are_read_in_linear_time():
    import time

    from mltb_core.planners.lats import judge_score

    for text in ("score" + " " * 400_000, "1" * 400_000, "score: 1 " * 100_000, "1/" * 200_000):
        started = time.process_time()
        judge_score(text)
        assert time.process_time() - started < STALL_SECONDS, text[:20]


def test_mltb_report_reads_a_run_with_a_hostile_results_line(capsys, tmp_path):
    """Issue 34: one nested line made `mltb report` refuse the whole run; it is now reported and skipped."""
    from mltb_core import cli

    run_dir = tmp_path / "run"
    assert cli.main(["run", "--task", "spaceship-titanic", "--planner", "react", "--model", "sim",
                     "--max-iterations", "2", "--out", str(run_dir)]) in (0, 1)
    results = run_dir / "results.jsonl"
    with results.open("a", encoding="utf-8") as handle:
        for _, line in FILE_ATTACKS:
            handle.write(line + "\n")
    capsys.readouterr()
    from mltb_core.analysis.resultsfile import ResultsFileWarning

    with pytest.warns(ResultsFileWarning) as warned:
        code = cli.main(["report", str(run_dir), "--out", str(tmp_path / "report")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (tmp_path / "report" / "index.html").is_file()
    messages = " ".join(str(w.message) for w in warned)
    for lineno in range(2, 2 + len(FILE_ATTACKS)):
        assert f"{results}:{lineno}: skipped" in messages
