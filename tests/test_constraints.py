"""State-aware constrained calls: the schema holds only what exists, and reaches the servers."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

import mltb_core.toolkit.tools  # noqa: F401 - registers the toolset
from fake_openai_server import FakeOpenAIServer, content_reply, tool_call_reply
from tiny_model import needs_tiny_model
from mltb_core.config import TrialConfig
from mltb_core.llm.local import LocalBackend
from mltb_core.llm.openai_backend import OpenAIBackend
from mltb_core.toolkit.constraints import arguments_by_tool, call_schema, readable_files
from mltb_core.toolkit.params import NEW_NAME, Column, WriteFile, declarations
from mltb_core.toolkit.registry import REGISTRY
from mltb_core.toolkit.scratchpad import Scratchpad

PAPER = list(REGISTRY.for_toolset("paper"))


def state() -> Scratchpad:
    model = LogisticRegression().fit([[0.0], [1.0]], [0, 1])
    return Scratchpad(objects={"train": pd.DataFrame({"Age": [1.0], "HomePlanet": ["Mars"]}),
                               "test": pd.DataFrame({"Age": [2.0], "Cabin": ["B/1/P"]}),
                               "y": pd.Series([1]), "clf": model, "notes": {"a": 1}})


def branches(schema: dict[str, Any], tool: str) -> list[dict[str, Any]]:
    return [b["properties"]["tool_args"] for b in schema["anyOf"] if b["properties"]["tool_name"]["const"] == tool]


def binding_values(args: dict[str, Any], param: str) -> list[str]:
    prop = args["properties"]["bindings"]["properties"][param]
    return [prop["const"]] if "const" in prop else prop["enum"]


def enums(prop: dict[str, Any]) -> list[list[str]]:
    """Every enum inside a property schema (a column argument may take one name or a list)."""
    found = [prop["enum"]] if "enum" in prop else []
    for part in prop.get("anyOf", []) + ([prop["items"]] if "items" in prop else []):
        found += enums(part)
    return found


def test_bindings_name_existing_objects_of_the_right_kind():
    schema = call_schema(PAPER, state(), [])
    [predict] = [b for b in branches(schema, "predict_target")] or [None]
    # one branch per frame would only appear with column arguments; predict_target has none
    assert binding_values(predict, "model") == ["clf"]
    assert binding_values(predict, "X_data") == ["train", "test"]
    [fit] = branches(schema, "fit_random_forest_classifier")
    assert binding_values(fit, "X_train") == ["train", "test"] and binding_values(fit, "y_train") == ["y"]
    assert fit["properties"]["func_kwargs"]["properties"]["cv"] == {"enum": list(range(2, 21))}
    assert fit["required"] == ["bindings", "func_kwargs", "output"]
    [save] = branches(schema, "save_model")
    assert binding_values(save, "model") == ["clf"] and "output" not in save["properties"]  # a get tool


def test_tools_whose_inputs_do_not_exist_are_not_offered():
    empty = call_schema(PAPER, Scratchpad(), ["train.csv", "test.csv"])
    assert [b["properties"]["tool_name"]["const"] for b in empty["anyOf"]] == ["read_data"]  # no model file yet
    [load] = branches(call_schema(PAPER, Scratchpad(), ["train.csv", "model.pkl"]), "load_model")
    assert load["properties"]["func_kwargs"]["properties"]["filepath"] == {"enum": ["model.pkl"]}
    frames_only = call_schema(PAPER, Scratchpad(objects={"df": pd.DataFrame({"a": [1], "b": [2]})}), [])
    names = {b["properties"]["tool_name"]["const"] for b in frames_only["anyOf"]}
    assert "fillna_with_median" in names and "predict_target" not in names and "fit_xgboost_classifier" not in names
    assert call_schema([REGISTRY.get("predict_target")], Scratchpad(), []) is None


def test_column_arguments_are_the_bound_frames_columns():
    schema = call_schema(PAPER, state(), [])
    by_frame = {binding_values(b, "df")[0]: b for b in branches(schema, "drop_feature")}
    assert set(by_frame) == {"train", "test"}  # one branch per frame: its columns go with it
    assert enums(by_frame["train"]["properties"]["func_kwargs"]["properties"]["column"]) == [["Age", "HomePlanet"]] * 2
    assert enums(by_frame["test"]["properties"]["func_kwargs"]["properties"]["column"]) == [["Age", "Cabin"]] * 2
    columns = {binding_values(b, "df")[0]: b["properties"]["func_kwargs"]["properties"]["columns"]
               for b in branches(schema, "one_hot_encode")}
    assert columns["test"] == {"anyOf": [{"enum": ["Age", "Cabin"]},
                                         {"type": "array", "items": {"enum": ["Age", "Cabin"]}, "maxItems": 2}]}
    # new names are free, existing ones are not
    [train_feature] = branches(schema, "create_numeric_feature")  # no column argument: one branch, any frame
    assert binding_values(train_feature, "df") == ["train", "test"]
    assert train_feature["properties"]["func_kwargs"]["properties"]["name"] == NEW_NAME
    joins = branches(schema, "join_dataframes")
    assert {(binding_values(j, "left_df")[0], binding_values(j, "right_df")[0]) for j in joins} == \
        {(a, b) for a in ("train", "test") for b in ("train", "test")}
    train_test = [j["properties"]["func_kwargs"] for j in joins
                  if binding_values(j, "left_df") == ["train"] and binding_values(j, "right_df") == ["test"]]
    [keyed] = [j for j in train_test if "const" not in j["properties"]["how"]]
    assert keyed["properties"]["right_on"]["anyOf"][0]["enum"] == ["Age", "Cabin"]
    assert keyed["properties"]["how"] == {"enum": ["inner", "left", "right", "outer"]}
    # a cross join takes no key columns (the tool does not look at them): a branch of its own
    [cross] = [j for j in train_test if j["properties"]["how"] == {"const": "cross"}]
    assert "how" in cross["required"] and cross["properties"]["left_on"]["anyOf"][0] == {"type": "string"}


def test_the_target_appears_only_as_a_column_of_a_bound_frame():
    target = "Transported"
    no_target = json.dumps(call_schema(PAPER, state(), ["train.csv"]))
    assert target not in no_target
    pad = Scratchpad(objects={"train": pd.DataFrame({"Age": [1.0], target: [True]})})
    schema = call_schema(PAPER, pad, ["train.csv"])

    def paths(node: Any, path: tuple = ()) -> list[tuple]:
        if isinstance(node, dict):
            return [p for k, v in node.items() for p in paths(v, path + (k,))]
        if isinstance(node, list):
            return [p for v in node for p in paths(v, path)]
        return [path] if node == target else []

    column_params = {name for tool in PAPER for name, rule in declarations(tool).rules.items()
                     if isinstance(rule, Column)}
    found = paths(schema)
    assert found and all("func_kwargs" in p and any(k in column_params for k in p) for p in found)


def test_file_arguments_name_readable_files(tmp_path):
    sandbox, data = tmp_path / "sandbox", tmp_path / "data"
    sandbox.mkdir(), data.mkdir()
    (data / "train.csv").write_text("a\n1\n")
    (data / "test.csv").write_text("a\n2\n")
    (sandbox / "model.pkl").write_bytes(b"x")
    (sandbox / ".hidden").write_text("")
    files = readable_files(sandbox, data)
    assert files == ["model.pkl", "test.csv", "train.csv"]
    schema = call_schema(PAPER, state(), files)
    [read] = branches(schema, "read_data")
    assert read["properties"]["func_kwargs"]["properties"]["filepath"] == {"enum": ["test.csv", "train.csv"]}
    [write] = branches(schema, "save_model")  # a file to be written does not exist yet: a name of its kind
    assert write["properties"]["func_kwargs"]["properties"]["filepath"] == \
        {"type": "string", "pattern": WriteFile((".pkl", ".pickle", ".joblib")).pattern}


def test_local_server_receives_the_schema_as_its_grammar(tmp_path):
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    schema = call_schema(PAPER, state(), ["train.csv"])
    tools = [t.schema() for t in PAPER]
    reply = content_reply('{"tool_name": "drop_feature", "tool_args": {"bindings": {"df": "train"}, '
                          '"func_kwargs": {"column": "Age"}, "output": "train"}}')
    with FakeOpenAIServer(default=reply) as server:
        backend = LocalBackend(tmp_path / "tiny.gguf", base_url=server.base_url)
        response = backend.complete([{"role": "user", "content": "go"}], tools, call_schema=schema)
        backend.close()
    [request] = server.requests
    assert request["response_format"] == {"type": "json_object", "schema": schema}
    assert response.candidates[0].tool_calls[0].func_kwargs == {"column": "Age"}


def test_openai_server_receives_state_aware_function_parameters():
    schema = call_schema(PAPER, state(), ["train.csv"])
    tools = [t.schema() for t in PAPER]
    reply = tool_call_reply("drop_feature", {"bindings": {"df": "test"}, "func_kwargs": {"column": "Cabin"}})
    with FakeOpenAIServer(default=reply) as server:
        backend = OpenAIBackend("gpt-4o", base_url=server.base_url, api_key="k", strict_tools=True)
        backend.complete([{"role": "user", "content": "go"}], tools, call_schema=schema)
        backend.complete([{"role": "user", "content": "go"}], tools)
        backend.close()
    constrained, plain = server.requests
    sent = {t["function"]["name"]: t["function"] for t in constrained["tools"]}
    assert set(sent) == set(arguments_by_tool(schema)) and "predict_target" in sent
    assert sent["drop_feature"]["parameters"] == arguments_by_tool(schema)["drop_feature"]
    assert all(f["strict"] for f in sent.values())
    assert len(plain["tools"]) == len(tools) and "strict" not in plain["tools"][0]["function"]


def test_the_flag_defaults_by_backend_and_is_hashed_only_when_set():
    base = TrialConfig(planner="react", model="local")
    assert LocalBackend.constrains_by_default
    # openai: with native tools sends them unconstrained unless asked; a JSON call format, like the local model,
    # keeps one catalogue in the prompt and narrows each call by its schema
    assert not OpenAIBackend("gpt-4o", api_key="k", call_format="tools").constrains_by_default
    assert OpenAIBackend("gpt-4o", api_key="k", call_format="json_schema").constrains_by_default
    assert base.config_hash() == base.with_(constrained_calls=None).config_hash()
    hashes = {base.config_hash(), base.with_(constrained_calls=True).config_hash(),
              base.with_(constrained_calls=False).config_hash()}
    assert len(hashes) == 3


def test_backends_without_schema_support_ignore_it():
    from mltb_core.llm.sim import SimPolicy

    sim = SimPolicy(0.5, 0)
    schema = call_schema(PAPER, state(), [])
    tools = [t.schema() for t in PAPER]
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert [c.text for c in sim.complete(messages, tools, call_schema=schema).candidates] == \
        [c.text for c in SimPolicy(0.5, 0).complete(messages, tools).candidates]


@pytest.mark.slow
@needs_tiny_model
def test_real_smollm2_constrained_calls_parse_and_execute(tmp_path):
    """Through the real llama.cpp server: the grammar-constrained calls load a file and act on it."""
    from mltb_core.toolkit.registry import ToolContext, execute

    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "train.csv").write_text("PassengerId,Age,HomePlanet\n0001_01,39,Europa\n0002_01,24,Earth\n")
    ctx = ToolContext(sandbox=sandbox)
    registry = REGISTRY.for_toolset("paper")
    pad = Scratchpad()
    backend = LocalBackend(named="smollm2", cache_dir=tmp_path / "llm", max_tokens=96, n_ctx=2048, keep_server=False)
    system = {"role": "system", "content": "You are a data scientist. Call one tool."}
    try:
        for ask, offered in (("Load train.csv.", ["read_data"]),
                             ("Look at the data.", ["get_dataframe_summary", "drop_feature", "get_missing_summary"])):
            tools = [registry.get(name) for name in offered]
            schema = call_schema(tools, pad, readable_files(sandbox))
            response = backend.complete([system, {"role": "user", "content": ask}], [t.schema() for t in tools],
                                        temperature=0.2, seed=1, call_schema=schema)
            [candidate] = response.candidates
            assert candidate.error is None and len(candidate.tool_calls) == 1, candidate.text
            result = execute(candidate.tool_calls[0], pad, ctx, registry)
            assert result.ok, result.message
    finally:
        backend.close()
    assert any(isinstance(pad.get(n), pd.DataFrame) for n in pad.names())
