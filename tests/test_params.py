"""Each tool parameter is declared once (toolkit/params.py): the call grammar offers exactly what the tool takes.

Walks every registered tool over a scratchpad holding one object of each kind a trial makes (frames, a
Series of predictions, a one-column frame, a fitted model, a tuple of parts, an array) and checks, per
object parameter and per object, that the grammar offers the object exactly when the executor's check
lets it through, and that what the grammar leaves out the tool body could not have used either; per
column argument, that the grammar offers exactly the columns the check takes; per file argument, exactly
the files; and that names and lists are bounded alike in both.
"""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

import mltb_core.toolkit.tools  # noqa: F401 - registers the toolset
from mltb_core.toolkit.constraints import call_schema
from mltb_core.llm import prompts
from mltb_core.toolkit.params import (MAX_LIST_ITEMS, MAX_NAME_CHARS, NEW_NAME, NEW_NAME_PATTERN, NUMBER, OBJECT_NAME, Column, NewName,
                                      OneOf, Range, ReadFile, WriteFile, check_arguments, declarations, parameter_kind)
from mltb_core.toolkit.registry import REGISTRY, Tool, ToolInputError, execute
from mltb_core.toolkit.scratchpad import Scratchpad
from tool_calls import tool_context

ROWS = 12
FRAME = pd.DataFrame({"Age": np.arange(ROWS, dtype=float), "Count": np.arange(ROWS), "Planet": ["Mars", "Earth"] * 6,
                      "Flag": [True, False] * 6, "When": ["2020-01-01"] * ROWS, "_is_train": [1] * 8 + [0] * 4})
FEATURES = FRAME[["Age", "Count"]]
LABELS = pd.Series([0, 1] * 6, name="model")
MODEL = LogisticRegression().fit(FEATURES, LABELS)
OBJECTS: dict[str, Any] = {
    "frame": FRAME, "features": FEATURES, "predictions": LABELS, "one_column": LABELS.to_frame(),
    "model": MODEL, "parts": (FEATURES, LABELS), "array": LABELS.to_numpy(),
}
FILES = ["train.csv", "test.csv", "sample.csv.gz", "notes.txt", "model.pkl", "data.json"]
TOOLS = sorted(REGISTRY, key=lambda t: t.name)


def branches(tool: Tool, pad: Scratchpad) -> list[dict[str, Any]]:
    schema = call_schema([tool], pad, FILES)
    return [] if schema is None else [b["properties"]["tool_args"] for b in schema["anyOf"]]


def offered_bindings(tool: Tool, pad: Scratchpad, param: str) -> set[str]:
    found = set()
    for args in branches(tool, pad):
        prop = args["properties"]["bindings"]["properties"].get(param, {})
        found |= {prop["const"]} if "const" in prop else set(prop.get("enum", ()))
    return found


def example(schema: dict[str, Any]) -> Any:
    """A value the schema allows (the first choice everywhere)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return example(schema["anyOf"][0])
    kind = schema.get("type")
    if kind == "array":
        return [example(schema.get("items", {"type": "string"}))]
    if kind == "object":
        return {}
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if schema.get("pattern") == NEW_NAME_PATTERN:
        return "x"
    if "pattern" in schema:   # a file to write: its first suffix
        return "out." + re.search(r"\(\[\.\](\w+)", schema["pattern"]).group(1)
    return "x"


def arguments(tool: Tool, objects: dict[str, Any], param: str, obj_name: str) -> tuple[dict, dict] | None:
    """Bindings and kwargs of a call from the grammar with ``obj_name`` bound to ``param``, the other
    arguments as the grammar offers them; None when the grammar offers no such call."""
    pad = Scratchpad(objects=objects)
    for args in branches(tool, pad):
        props = args["properties"]["bindings"]["properties"]
        bindings = {p: example(s) for p, s in props.items() if p in args["properties"]["bindings"]["required"]}
        bindings[param] = obj_name
        kwargs = {p: example(s) for p, s in args["properties"]["func_kwargs"]["properties"].items()
                  if p in args["properties"]["func_kwargs"]["required"]}
        return bindings, kwargs
    return None


def refusal(tool: Tool, values: dict[str, Any]) -> str | None:
    try:
        check_arguments(tool, values)
    except ToolInputError as exc:
        return str(exc)
    return None


OBJECT_CASES = [(tool.name, param) for tool in TOOLS for param in tool.object_params]


@pytest.mark.parametrize(("tool_name", "param"), OBJECT_CASES, ids=[f"{t}-{p}" for t, p in OBJECT_CASES])
def test_the_grammar_binds_exactly_the_objects_the_check_takes(tool_name, param, tmp_path):
    tool = REGISTRY.get(tool_name)
    offered = offered_bindings(tool, Scratchpad(objects=OBJECTS), param)
    assert offered, f"{tool_name}: nothing offered as {param!r} on a scratchpad holding every kind"
    for name, obj in OBJECTS.items():
        call = arguments(tool, OBJECTS, param, next(iter(offered)))
        assert call is not None
        bindings, kwargs = call
        values = {**{p: OBJECTS[n] for p, n in bindings.items()}, param: obj, **kwargs}
        refused = refusal(tool, values)
        kind_refusal = refused is not None and refused.startswith(f"'{param}' must be")
        rows_refusal = refused is not None and refused.startswith(f"'{param}' holds")
        if rows_refusal:
            # a frame of one part (params.Part): the grammar offers it in no branch of the switch that
            # refuses it; the other branch's call is checked in test_a_part_is_offered_where_its_rows_fit
            assert declarations(tool).bound[param].part is not None, refused
            continue
        assert (name in offered) == (not kind_refusal), (tool_name, param, name, refused)
        if name in offered:
            continue
        # never less: the body, called without the declaration's check, cannot use what the grammar leaves out
        ctx = tool_context(tmp_path)
        direct = {**values, **({"ctx": ctx} if tool.wants_ctx else {})}
        with pytest.raises(Exception):   # noqa: B017 - any failure: the body cannot use this object
            tool.func(**direct)
        # and the executor runs the declaration's check before the body
        result = execute({"tool_name": tool_name, "tool_args": {"bindings": {**bindings, param: name},
                                                                 "func_kwargs": kwargs, "output": "out"}},
                         Scratchpad(objects=OBJECTS), ctx)
        assert not result.ok and f"'{param}' must be" in result.message, result.message


def test_a_part_is_offered_where_its_rows_fit():
    """Issue 33: converting the train features as test "succeeded" with features of the wrong rows. A frame
    of one part (params.Part) is offered, and taken, exactly in the branches where its rows fit: the train
    part and the X of a train conversion with is_train true, the test part with false, the combined frame in
    neither, a frame of unknown rows in both."""
    from mltb_core.toolkit.validation import mark_rows
    combined = FRAME
    objects = {"combined": combined,
               "train_part": mark_rows(combined[combined["_is_train"] == 1].drop(columns="_is_train"), "train"),
               "test_part": mark_rows(combined[combined["_is_train"] == 0].drop(columns="_is_train"), "test"),
               "X": mark_rows(FEATURES.iloc[:8], "train"), "unknown": FEATURES}
    tool = REGISTRY.get("convert_dataframe_to_features_target")
    offered: dict[bool, set[str]] = {True: set(), False: set()}
    for args in branches(tool, Scratchpad(objects=objects)):
        switch = args["properties"]["func_kwargs"]["properties"]["is_train"]
        prop = args["properties"]["bindings"]["properties"]["df"]
        for is_train in ([switch["const"]] if "const" in switch else switch["enum"]):
            offered[is_train] |= {prop["const"]} if "const" in prop else set(prop["enum"])
    assert offered == {True: {"train_part", "X", "unknown"}, False: {"test_part", "unknown"}}
    for is_train in (True, False):
        for name, obj in objects.items():
            refused = refusal(tool, {"df": obj, "target_column": "Age", "is_train": is_train})
            assert (name in offered[is_train]) == (refused is None or not refused.startswith("'df' holds")), \
                (is_train, name, refused)


def test_a_part_without_a_switch_is_offered_only_where_it_fits():
    """concatenate_train_test with train and test swapped flagged each row as the other part; its frames are
    declared parts too (params.frame_of), so each is offered, and taken, only where its rows fit."""
    from mltb_core.toolkit.validation import mark_rows
    train = FRAME[FRAME["_is_train"] == 1].drop(columns="_is_train")
    test = FRAME[FRAME["_is_train"] == 0].drop(columns=["_is_train", "Flag"])
    objects = {"combined": FRAME, "train_raw": mark_rows(train.copy(), "train"),
               "test_raw": mark_rows(test.copy(), "test"), "unknown": test,
               "combined_slice": FRAME[FRAME["_is_train"] == 1]}   # one part's flags, combined once
    tool = REGISTRY.get("concatenate_train_test")
    pad = Scratchpad(objects=objects)
    offered = {param: offered_bindings(tool, pad, param) for param in ("train_df", "test_df")}
    assert offered == {"train_df": {"train_raw", "unknown"}, "test_df": {"test_raw", "unknown"}}
    for param, other in (("train_df", "test_df"), ("test_df", "train_df")):
        for name, obj in objects.items():
            refused = refusal(tool, {param: obj, other: objects["unknown"]})
            assert (name in offered[param]) == (refused is None or not refused.startswith(f"'{param}' holds")), \
                (param, name, refused)


def test_the_predictions_are_offered_wherever_the_paper_saves_or_combines_them():
    """Issue 33: after predict_target the grammar offered only frames as save_dataframe_to_csv's df."""
    pad = Scratchpad(objects={"test": FRAME, "X_test": FEATURES, "model": MODEL, "preds": LABELS})
    for tool, param in (("save_dataframe_to_csv", "df"), ("concatenate_dataframes", "df2"),
                        ("convert_to_dataframe", "data"), ("create_submission", "predictions")):
        assert "preds" in offered_bindings(REGISTRY.get(tool), pad, param), tool
    assert offered_bindings(REGISTRY.get("predict_target"), pad, "model") == {"model"}


COLUMN_CASES = [(tool.name, param) for tool in TOOLS for param, rule in declarations(tool).rules.items()
                if isinstance(rule, Column)]


@pytest.mark.parametrize(("tool_name", "param"), COLUMN_CASES, ids=[f"{t}-{p}" for t, p in COLUMN_CASES])
def test_column_arguments_offer_exactly_the_columns_the_check_takes(tool_name, param):
    tool = REGISTRY.get(tool_name)
    found = declarations(tool)
    rule = found.rules[param]
    owner = rule.owner(found.first_frame)
    # a frame of one part cannot be the combined frame (both parts' rows): the same frame, rows unknown
    frame = FRAME.drop(columns="_is_train") if found.bound[owner].part is not None else FRAME
    only_frame = {"frame": frame, "model": MODEL, "predictions": LABELS}
    pad = Scratchpad(objects=only_frame)
    offered: set[str] = set()
    for args in branches(tool, pad):
        assert args["properties"]["bindings"]["properties"][owner] == {"const": "frame"}
        prop = args["properties"]["func_kwargs"]["properties"].get(param)
        lifted = any("const" in s for p, s in args["properties"]["func_kwargs"]["properties"].items() if p != param)
        if prop is None or lifted:
            continue
        offered |= {v for e in _enums(prop) for v in e}
        for array in _arrays(prop):   # a longer list would repeat a column, which the check refuses
            assert array["maxItems"] == len(array["items"]["enum"])
    call = arguments(tool, only_frame, owner, "frame")
    assert call is not None
    bindings, kwargs = call
    taken = set()
    for column in frame.columns:
        values = {**{p: only_frame[n] for p, n in bindings.items()}, **kwargs, param: column}
        if rule.unless is not None:
            values[rule.unless[0]] = _other(found, rule.unless)
        if refusal(tool, values) is None:
            taken.add(column)
    assert offered == taken, (tool_name, param)
    # a name that is no column of the frame: refused unless another argument lifts the rule
    values = {**{p: only_frame[n] for p, n in bindings.items()}, **kwargs, param: "NoSuchColumn"}
    assert "unknown column" in (refusal(tool, values) or "")


def _other(found: Any, unless: tuple[str, Any]) -> Any:
    switch, value = unless
    rule = found.rules.get(switch)
    return not value if isinstance(value, bool) else next(v for v in rule.values if v != value)


def _enums(prop: dict[str, Any]) -> list[list[Any]]:
    out = [prop["enum"]] if "enum" in prop else []
    for part in prop.get("anyOf", []) + ([prop["items"]] if "items" in prop else []):
        out += _enums(part)
    return out


def _arrays(prop: dict[str, Any]) -> list[dict[str, Any]]:
    out = [prop] if prop.get("type") == "array" else []
    for part in prop.get("anyOf", []):
        out += _arrays(part)
    return out


def test_a_lifted_rule_has_a_branch_of_its_own():
    """convert_dataframe_to_features_target(is_train=false) drops the target if present: any name is taken."""
    tool = REGISTRY.get("convert_dataframe_to_features_target")
    test_part = FRAME.drop(columns=["Flag", "_is_train"])
    assert refusal(tool, {"df": test_part, "target_column": "Flag", "is_train": False}) is None
    assert "unknown column" in refusal(tool, {"df": test_part, "target_column": "Flag", "is_train": True})
    kwargs = [b["properties"]["func_kwargs"]["properties"] for b in branches(tool, Scratchpad(objects={"t": test_part}))]
    assert {json.dumps(k["is_train"]) for k in kwargs} == {'{"enum": [true]}', '{"const": false}'}
    [free] = [k for k in kwargs if k["is_train"] == {"const": False}]
    assert free["target_column"] == {"type": "string"}


PART_TOOLS = [tool.name for tool in TOOLS if tool.output_parts]


@pytest.mark.parametrize("tool_name", PART_TOOLS)
def test_the_grammar_offers_a_list_of_output_names_exactly_when_the_tool_returns_its_parts(tool_name, tmp_path):
    """A branch whose switch makes the tool return one object offers one output name (alone or as a one-item
    list, which the executor takes alike); the others offer the list of parts too. Executed with a list of
    names there, the call is refused before the work, saying why."""
    tool = REGISTRY.get(tool_name)
    test_part = FRAME[FRAME["_is_train"] == 0].drop(columns=["_is_train"]).reset_index(drop=True)
    pad = Scratchpad(objects={"frame": FRAME, "test_part": test_part})
    for args in branches(tool, pad):
        kwargs = {k: v["const"] for k, v in args["properties"]["func_kwargs"]["properties"].items() if "const" in v}
        lengths = {form.get("maxItems") for form in args["properties"]["output"]["anyOf"]}
        assert lengths == ({None, 1, len(tool.output_parts)} if tool.returns_parts(kwargs) else {None, 1}), kwargs
    if tool.parts_unless is None:
        return
    switch, value = tool.parts_unless
    column = {"target_column": "Flag"} if "target_column" in tool.value_params else {}
    call = {"tool_name": tool_name, "tool_args": {"bindings": {tool.object_params[0]: "test_part"},
                                                  "func_kwargs": {**column, switch: value}, "output": ["X", "y"]}}
    result = execute(call, pad, tool_context(tmp_path))
    assert not result.ok and f"with {switch}={json.dumps(value)} returns one object" in result.message
    for output in ("X", ["X"]):       # one name, alone or as a one-item list, as the grammar offers it
        call["tool_args"]["output"] = output
        result = execute(call, pad, tool_context(tmp_path))
        assert result.ok and result.written == ["X"] and isinstance(pad.get("X"), pd.DataFrame)


BOOL_CASES = [(tool.name, param) for tool in TOOLS for param, base in declarations(tool).base.items()
              if base == {"type": "boolean"}]


@pytest.mark.parametrize(("tool_name", "param"), BOOL_CASES, ids=[f"{t}-{p}" for t, p in BOOL_CASES])
def test_a_bool_argument_takes_true_or_false_only(tool_name, param):
    """The grammar offers true and false; the check refuses the rest, so a truthy "false" cannot run the
    other branch."""
    tool = REGISTRY.get(tool_name)
    assert refusal(tool, {param: True}) is None and refusal(tool, {param: False}) is None
    for value in ("false", 0, 1, None, [], 0.0):
        assert f"'{param}' must be true or false, got {value!r}" == refusal(tool, {param: value})


def test_a_parts_switch_splits_the_grammar_without_any_column_rule():
    """A switch declared only by parts_unless (no rule lifted by it): its branch offers one output name, the
    other branch keeps the switch at its other value and offers the parts. A switch the grammar cannot split
    (not a bool) is refused when the tool is declared."""
    from mltb_core.toolkit.registry import build_tool

    def halves(df: pd.DataFrame, both: bool = True):
        """Split a frame in two halves."""
        return (df.iloc[:1], df.iloc[1:]) if both else df.iloc[:1]

    tool = build_tool(halves, "get-set", output_parts=("head", "tail"), parts_unless=("both", False))
    found = {json.dumps(b["properties"]["func_kwargs"]["properties"]["both"]): {f.get("maxItems") for f in
                                                                                b["properties"]["output"]["anyOf"]}
             for b in branches(tool, Scratchpad(objects={"f": FRAME}))}
    assert found == {'{"const": false}': {None, 1}, '{"enum": [true]}': {None, 1, 2}}

    def modes(df: pd.DataFrame, mode: Literal["one", "two"] = "two"):
        """Split a frame."""
        return df

    with pytest.raises(ValueError, match="must be a bool value parameter"):
        build_tool(modes, "get-set", output_parts=("a", "b"), parts_unless=("mode", "one"))


FILE_CASES = [(tool.name, param) for tool in TOOLS for param, rule in declarations(tool).rules.items()
              if isinstance(rule, ReadFile | WriteFile)]


@pytest.mark.parametrize(("tool_name", "param"), FILE_CASES, ids=[f"{t}-{p}" for t, p in FILE_CASES])
def test_file_arguments_offer_exactly_what_the_check_takes(tool_name, param):
    tool = REGISTRY.get(tool_name)
    rule = declarations(tool).rules[param]
    props = [b["properties"]["func_kwargs"]["properties"][param] for b in branches(tool, Scratchpad(objects=OBJECTS))]
    assert props
    candidates = FILES + ["sub/dir/out.csv", "out.CSV", "my file.csv", "a" * (MAX_NAME_CHARS - 3) + "csv",
                          "a" * MAX_NAME_CHARS + ".csv", "../up.csv", "m.pkl", "m.joblib"]
    for name in candidates:
        grammar = any(name in p.get("enum", ()) or ("pattern" in p and re.fullmatch(p["pattern"][1:-1], name))
                      for p in props)
        checked = refusal(tool, {**_bound(tool), param: name}) is None
        if isinstance(rule, ReadFile) and name not in FILES:
            continue   # a file that does not exist: the grammar cannot offer it, the tool cannot read it
        assert bool(grammar) == checked, (tool_name, name)


def _bound(tool: Tool) -> dict[str, Any]:
    return {p: OBJECTS[next(iter(offered_bindings(tool, Scratchpad(objects=OBJECTS), p)))]
            for p in tool.object_params if p in declarations(tool).required}


def test_names_and_lists_are_bounded_alike_in_grammar_and_check():
    name_pattern = re.compile(OBJECT_NAME["pattern"][1:-1])
    assert name_pattern.fullmatch("a" * MAX_NAME_CHARS) and not name_pattern.fullmatch("a" * (MAX_NAME_CHARS + 1))
    new_name = re.compile(NEW_NAME["pattern"])
    assert new_name.fullmatch("a" * MAX_NAME_CHARS) and not new_name.fullmatch("a" * (MAX_NAME_CHARS + 1))
    tool = REGISTRY.get("create_numeric_feature")
    assert isinstance(declarations(tool).rules["name"], NewName)
    assert refusal(tool, {"df": FRAME, "name": "a" * MAX_NAME_CHARS, "expression": "1"}) is None
    assert "at most" in refusal(tool, {"df": FRAME, "name": "a" * (MAX_NAME_CHARS + 1), "expression": "1"})
    split = REGISTRY.get("split_string_column")
    assert "at most" in refusal(split, {"df": FRAME, "name_prefix": "p", "source_column": "Planet", "delimiter": "/",
                                        "indices": list(range(MAX_LIST_ITEMS + 1))})
    assert refusal(split, {"df": FRAME, "name_prefix": "p", "source_column": "Planet", "delimiter": "/",
                           "indices": list(range(MAX_LIST_ITEMS))}) is None
    # every array of every tool's grammar is bounded, and every output name
    text = json.dumps(call_schema(TOOLS, Scratchpad(objects=OBJECTS), FILES))
    schema = json.loads(text)
    arrays = _all_arrays(schema)
    assert arrays and all(0 < a.get("maxItems", 0) <= MAX_LIST_ITEMS for a in arrays)


def test_a_wide_frames_columns_go_in_one_list_in_grammar_and_check():
    """An expert path normalizes santander's 200 features in one call: column lists are bounded by the width."""
    wide = pd.DataFrame(np.zeros((3, 200)), columns=[f"var_{i}" for i in range(200)])
    tool = REGISTRY.get("normalize_features")
    [args] = branches(tool, Scratchpad(objects={"wide": wide}))
    [array] = _arrays(args["properties"]["func_kwargs"]["properties"]["columns"])
    assert array["maxItems"] == 200
    assert refusal(tool, {"df": wide, "columns": list(wide.columns)}) is None
    assert "more than once" in refusal(tool, {"df": wide, "columns": list(wide.columns) + ["var_0"]})
    rename = REGISTRY.get("rename_feature")
    [args] = branches(rename, Scratchpad(objects={"wide": wide}))
    [new] = _arrays(args["properties"]["func_kwargs"]["properties"]["new_name"])
    assert new["maxItems"] == 200
    assert refusal(rename, {"df": wide, "old_name": list(wide.columns), "new_name": [f"v{i}" for i in range(200)]}) is None


def _all_arrays(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [a for v in node for a in _all_arrays(v)]
    if not isinstance(node, dict):
        return []
    own = [node] if node.get("type") == "array" else []
    return own + [a for k, v in node.items() if k not in ("enum", "const") for a in _all_arrays(v)]


def test_the_whole_grammar_converts_for_llama_cpp():
    gbnf = pytest.importorskip("llama_cpp.llama_grammar")
    schema = call_schema(TOOLS, Scratchpad(objects=OBJECTS), FILES)
    grammar = gbnf.json_schema_to_gbnf(json.dumps(schema))
    assert "root ::=" in grammar
    # llama.cpp's parser refuses escapes it does not know (a "\." from a pattern once stopped the server)
    literals = re.findall(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', grammar)
    unknown = {m for lit in literals for m in re.findall(r"\\(.)", lit)} - set('xtrn\\"[]uU-^')
    assert not unknown, unknown


def _doc_heads(doc: str) -> dict[str, str]:
    """Parameter -> what its line in the Parameters section of a rendered doc says after the name."""
    section = doc.split("Parameters\n----------\n", 1)[1].split("\n\n", 1)[0]
    heads = {}
    for line in section.splitlines():
        if line and not line[0].isspace():
            names, _, head = line.partition(" : ")
            heads.update({name: head for name in names.split(", ")})
    return heads


@pytest.mark.parametrize("tool_name", [tool.name for tool in TOOLS])
def test_every_parameter_line_the_model_reads_is_written_from_its_declaration(tool_name):
    """The doc, the function schema and the stage note say what the declaration takes; the docstring adds
    only its explanation (a kind written by hand could go stale) and names no parameter the tool lacks."""
    tool = REGISTRY.get(tool_name)
    params = [*tool.object_params, *tool.value_params]
    raw = inspect.cleandoc(tool.func.__doc__ or "")
    if "Parameters\n----------\n" in raw:
        written = _doc_heads(raw)
        assert set(written) <= set(params), (tool_name, sorted(set(written) - set(params)))
        assert not any(written.values()), f"{tool_name}: a kind written by hand: {written}"
    heads = _doc_heads(tool.doc)
    assert set(heads) == set(params)
    found = declarations(tool)
    schema = tool.schema()["function"]["parameters"]["properties"]
    note = "\n".join(prompts.parameter_lines(tool.schema()))
    for name in params:
        kind = parameter_kind(tool, name)
        assert heads[name].split(", default ")[0].removesuffix(", optional") == kind, (name, heads[name])
        assert (name in found.defaults) == (heads[name] != kind)
        part = "bindings" if name in tool.object_params else "func_kwargs"
        assert f"({kind})" in schema[part]["properties"][name]["description"]
        assert f"{part}.{name}" in note and f"({kind})"[:prompts.PARAMETER_DOC_CHARS - 3] in note


def test_a_declaration_change_changes_the_doc_line_and_keeps_the_explanation():
    from mltb_core.toolkit.registry import build_tool

    def tool_with(window_rule: Range, columns_rule: Column) -> Tool:
        def roll(df, columns, window=3, how="mean", tags=None, name="rolled"):
            """Roll some columns.

            Parameters
            ----------
            columns : str
                What to roll (this kind is not read: the declaration says it).
            window
                Rows per window.
            """
            return df
        # the annotations as objects (this module's are strings, and the rules are local)
        roll.__annotations__ = {"df": pd.DataFrame, "columns": Annotated[str | list[str], columns_rule],
                                "window": Annotated[int, window_rule], "how": Annotated[str, OneOf(("mean", "max"))],
                                "tags": list[str] | None, "name": Annotated[str, NewName()]}
        return build_tool(roll, "get-set")

    tool = tool_with(Range(int, 1, 5), Column(many=True, dtype=NUMBER))
    heads = _doc_heads(tool.doc)
    assert heads == {"df": "DataFrame", "columns": "numeric column(s) of df",
                     "window": "integer from 1 to 5, default 3", "how": 'one of mean, max, default "mean"',
                     "tags": f"list[str], ≤{MAX_LIST_ITEMS} items, default null",
                     "name": f'new column name, ≤{MAX_NAME_CHARS} chars, default "rolled"'}
    assert "What to roll (this kind is not read" in tool.doc and "    Rows per window." in tool.doc
    assert tool.schema()["function"]["parameters"]["properties"]["func_kwargs"]["properties"]["window"][
        "description"] == "(integer from 1 to 5) Rows per window."
    changed = tool_with(Range(int, 2, 9), Column(of="df"))
    assert _doc_heads(changed.doc)["window"] == "integer from 2 to 9, default 3"
    assert _doc_heads(changed.doc)["columns"] == "column of df"


def test_a_tool_without_a_parameters_section_gets_one():
    from mltb_core.toolkit.registry import build_tool

    def peek(df: pd.DataFrame, column: Annotated[str, Column()]) -> str:
        """Show a column."""
        return str(df[column])

    doc = build_tool(peek, "get").doc
    assert doc == "Show a column.\n\nParameters\n----------\ndf : DataFrame\ncolumn : column of df"


# ------------------------------------------------------------------ issue 33's done-when, on the OpenAI path
@pytest.fixture(scope="module")
def paper_finish_on_openai(tmp_path_factory):
    """A scripted ReAct trial through the OpenAI backend with constrained calls: the canonical spaceship
    pipeline, then the paper's finish, save_dataframe_to_csv(df=<predict_target output>)."""
    import functools

    import mltb_core.llm as llm
    from fake_openai_server import FakeOpenAIServer, tool_call_reply
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.runner.trial import run_trial
    from scripted import spaceship_pipeline

    tmp_path = tmp_path_factory.mktemp("paper_finish")
    model_id = "fake-model"
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[models."{model_id}"]\ninput = 0.0\noutput = 0.0\n')
    calls = spaceship_pipeline(submit=False) + [
        {"tool_name": "save_dataframe_to_csv",
         "tool_args": {"bindings": {"df": "preds"}, "func_kwargs": {"filepath": "submission.csv"}}}]
    with pytest.MonkeyPatch.context() as patch, FakeOpenAIServer(model_ids=(model_id,)) as server:
        patch.setenv("MLTB_PRICES", str(prices))
        patch.setenv("OPENAI_API_KEY", "test-key")
        patch.setenv("OPENAI_BASE_URL", server.base_url)
        patch.setattr(llm, "make_backend", functools.partial(llm.make_backend, max_retries=0))
        server.enqueue(*(tool_call_reply(c["tool_name"], c["tool_args"]) for c in calls))
        config = TrialConfig(planner="react", model=f"openai:{model_id}", constrained_calls=True,
                             max_iterations=len(calls), llm_cache=False)
        record = run_trial(get_task("spaceship-titanic"), config, tmp_path / "run")
        assert record.endpoint == server.base_url.rstrip("/")   # the record says which server answered
        return calls, record, server.requests


def test_openai_constrained_calls_offer_the_predictions_to_save_and_the_trial_saves_them(paper_finish_on_openai):
    """With --constrained-calls on the OpenAI path, the tools sent after predict_target offer its output as
    save_dataframe_to_csv's df, and the trial's save of it runs (a one-column file)."""
    calls, record, requests = paper_finish_on_openai
    predict_at = [c["tool_name"] for c in calls].index("predict_target")
    after = {t["function"]["name"]: t["function"]["parameters"] for t in requests[predict_at + 1]["tools"]}
    df = after["save_dataframe_to_csv"]
    offered = [b["properties"]["bindings"]["properties"]["df"] for b in df.get("anyOf", [df])]
    assert any("preds" in p.get("enum", [p.get("const")]) for p in offered), offered
    steps = [json.loads(line) for line in Path(record.trajectory).read_text().splitlines()]
    [*_, saved] = [s for s in steps if s.get("step_type") == "tool_execution_completion"]
    assert saved["tool_results"][0]["ok"] and "x 1 columns to submission.csv" in json.dumps(saved), saved


def test_the_paper_finish_on_the_openai_path_is_recorded_valid(paper_finish_on_openai):
    _, record, _ = paper_finish_on_openai
    assert record.outcome == "valid", (record.stop_reason, record.feedback)


def test_a_frame_too_wide_to_list_offers_column_names_as_text_and_the_check_holds_them():
    """Round 5: the call schema grew ~1.6 KB per column (12.8 MB after nine self-joins). Past MAX_ENUM_COLUMNS
    a column parameter takes text as long as the frame's names; the tool's check refuses an unknown one."""
    from mltb_core.toolkit.params import MAX_ENUM_COLUMNS

    def schema_bytes(width: int) -> int:
        wide = pd.DataFrame(np.zeros((3, width)), columns=[f"feature_number_{i}" for i in range(width)])
        return len(json.dumps(call_schema(TOOLS, Scratchpad(objects={"wide": wide}), FILES)))

    listed, text = schema_bytes(MAX_ENUM_COLUMNS), schema_bytes(MAX_ENUM_COLUMNS + 1)
    assert text < listed and schema_bytes(4 * MAX_ENUM_COLUMNS) < 2 * text   # no longer grows by the width
    wide = pd.DataFrame(np.zeros((3, MAX_ENUM_COLUMNS + 1)), columns=[f"c{i}" for i in range(MAX_ENUM_COLUMNS + 1)])
    tool = REGISTRY.get("fillna_with_median")
    [args] = branches(tool, Scratchpad(objects={"wide": wide}))
    columns = args["properties"]["func_kwargs"]["properties"]["columns"]
    assert not _enums(columns) and _arrays(columns)[0]["maxItems"] == MAX_ENUM_COLUMNS + 1
    assert refusal(tool, {"df": wide, "columns": ["c0", "c256"]}) is None
    assert "unknown column" in refusal(tool, {"df": wide, "columns": ["no_such"]})
