"""Decorators, paper-format tool calls, generated JSON schemas and the never-raising executor."""
import json

import pandas as pd
import pytest

import mltb_core.toolkit.tools  # noqa: F401  (registers the toolset)
from mltb_core.toolkit.registry import (PAPER, REGISTRY, TOOL_ROLES, ToolCall, ToolCallError, ToolContext, ToolRegistry,
                                ToolReturn, UnknownToolsetError, build_tool, execute, make_get_and_set_tool,
                                make_get_tool, make_set_tool)
from mltb_core.toolkit.scratchpad import Scratchpad

PAPER_TABLE_9 = """fit_logistic_regressor fit_linear_regressor fit_random_forest_regressor fit_random_forest_classifier
fit_xgboost_regressor fit_xgboost_classifier fit_lightgbm_regressor fit_lightgbm_classifier fit_catboost_regressor
fit_catboost_classifier read_data create_numeric_feature create_categorical_feature create_conditional_feature
extract_string_pattern split_string_column create_group_aggregation get_group_aggregation create_rolling_feature
create_lag_feature create_lead_feature extract_datetime_features create_time_delta apply_custom_function
fillna_with_value fillna_with_median fillna_with_mean fillna_with_mode fillna_with_condition
fillna_with_multiple_conditions fillna_with_conditional_aggregation fillna_with_custom_function
drop_rows_with_missing get_missing_summary cast_columns cast_numeric_columns cast_integer_columns_to_float
cast_categorical_columns one_hot_encode label_encode normalize_features encode_all_categorical_columns
normalize_all_numerical_columns concatenate_train_test split_combined_into_train_test
convert_dataframe_to_features_target convert_to_dataframe drop_feature get_features concatenate_dataframes
join_dataframes rename_feature get_unique_values get_dataframe_dtypes_summary filter_dataframe save_model load_model
save_dataframe_to_csv evaluate_regression_model evaluate_classification_model predict_target""".split()


def test_every_paper_tool_and_the_extras_are_registered():
    missing = [name for name in PAPER_TABLE_9 if name not in REGISTRY]
    assert not missing
    extras = ["get_dataframe_summary", "create_submission"] + [
        f"tune_{m}_{k}" for m in ("random_forest", "xgboost", "lightgbm", "catboost") for k in ("classifier", "regressor")]
    assert all(name in REGISTRY for name in extras)
    assert len(REGISTRY) >= 61


@pytest.mark.parametrize("tool", list(REGISTRY), ids=lambda t: t.name)
def test_every_tool_has_doc_stages_and_a_valid_openai_schema(tool):
    assert tool.doc and tool.roles and set(tool.roles) <= set(TOOL_ROLES)
    schema = tool.schema()
    json.dumps(schema)
    fn = schema["function"]
    assert fn["name"] == tool.name and fn["description"]
    props = fn["parameters"]["properties"]
    assert set(props["bindings"]["properties"]) == set(tool.object_params)
    assert set(props["func_kwargs"]["properties"]) == set(tool.value_params)
    assert "ctx" not in props["func_kwargs"]["properties"]
    assert ("output" in props) == (tool.kind != "get")


def test_kinds_follow_the_paper():
    assert REGISTRY.get("read_data").kind == "set"
    assert REGISTRY.get("get_missing_summary").kind == "get"
    assert REGISTRY.get("fit_lightgbm_classifier").kind == "get-set"
    assert REGISTRY.get("fillna_with_median").kind == "override"


def test_tool_call_parses_the_paper_format_and_round_trips():
    raw = {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "combined"},
                                                           "func_kwargs": {"columns": ["Age"]}, "output": "combined"}}
    call = ToolCall.from_dict(json.dumps(raw))
    assert call.bindings == {"df": "combined"} and call.func_kwargs == {"columns": ["Age"]}
    assert call.to_dict() == raw
    assert ToolCall.from_dict(call.to_dict()).key() == call.key()


@pytest.mark.parametrize("bad, fragment", [
    ("not json", "not valid JSON"),
    ([1, 2], "JSON object"),
    ({"tool_args": {}}, "tool_name"),
    ({"tool_name": "x", "tool_args": {"bindings": {"df": 3}}}, "bindings"),
    ({"tool_name": "x", "tool_args": {"func_kwargs": [1]}}, "func_kwargs"),
    ({"tool_name": "x", "tool_args": {"output": 5}}, "output"),
])
def test_malformed_calls_are_rejected_with_a_reason(bad, fragment):
    with pytest.raises(ToolCallError) as err:
        ToolCall.from_dict(bad)
    assert fragment in str(err.value)


def _ctx(tmp_path):
    return ToolContext(sandbox=tmp_path)


def test_executor_never_raises_and_returns_the_docstring(tmp_path):
    pad = Scratchpad(objects={"df": pd.DataFrame({"a": [1.0, None]})})
    cases = [
        {"tool_name": "no_such_tool"},
        {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "nope"}}},
        {"tool_name": "fillna_with_median", "tool_args": {"func_kwargs": {"df": "df"}}},
        {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "df", "columns": "a"}}},
        {"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "df"}, "func_kwargs": {"columns": ["zz"]}}},
    ]
    for call in cases:
        result = execute(call, pad, _ctx(tmp_path))
        assert not result.ok and result.message.startswith("Error:"), call
    result = execute(cases[2], pad, _ctx(tmp_path))
    assert "pass its scratchpad name in bindings" in result.message
    assert "Tool documentation for fillna_with_median" in result.message
    assert pad.local_names == ["df"]  # failures write nothing


def test_unknown_tool_suggests_close_names(tmp_path):
    result = execute({"tool_name": "fillna_median"}, Scratchpad(), _ctx(tmp_path))
    assert "Did you mean" in result.message and "fillna_with_median" in result.message


def test_tool_masking_refuses_tools_outside_the_allowed_set(tmp_path):
    result = execute({"tool_name": "get_missing_summary", "tool_args": {"bindings": {"df": "df"}}},
                     Scratchpad(objects={"df": pd.DataFrame({"a": [1]})}), _ctx(tmp_path), allowed=["read_data"])
    assert not result.ok and "not available at this stage" in result.message


def test_user_registers_an_extra_tool_with_one_decorator(tmp_path):
    registry = ToolRegistry()

    @make_get_and_set_tool(roles=("features",), registry=registry)
    def double(df: pd.DataFrame, column: str, factor: int = 2) -> pd.DataFrame:
        """Multiply a column.

        Parameters
        ----------
        df : pd.DataFrame
            Input frame.
        column : str
            Column to scale.
        factor : int
            Multiplier.
        """
        return ToolReturn(df.assign(**{column: df[column] * factor}), note=f"scaled {column}")

    tool = registry.get("double")
    assert tool.object_params == ("df",) and tool.value_params == ("column", "factor")
    props = tool.schema()["function"]["parameters"]["properties"]["func_kwargs"]["properties"]
    assert props["factor"] == {"type": "integer", "description": "(int) Multiplier.", "default": 2}
    pad = Scratchpad(objects={"df": pd.DataFrame({"x": [1, 2]})})
    result = execute({"tool_name": "double", "tool_args": {"bindings": {"df": "df"}, "func_kwargs": {"column": "x"},
                                                           "output": "out"}}, pad, _ctx(tmp_path), registry)
    assert result.ok and "scaled x" in result.message and pad.get("out")["x"].tolist() == [2, 4]


def test_tuple_outputs_unpack_to_a_list_or_suffix_a_single_name(tmp_path):
    registry = ToolRegistry()

    @make_set_tool(roles=("loading",), output_parts=("left", "right"), registry=registry)
    def pair() -> tuple:
        """Two things."""
        return (1, 2)

    pad = Scratchpad()
    assert execute({"tool_name": "pair", "tool_args": {"output": ["a", "b"]}}, pad, _ctx(tmp_path), registry).ok
    assert (pad.get("a"), pad.get("b")) == (1, 2)
    result = execute({"tool_name": "pair", "tool_args": {"output": "p"}}, pad, _ctx(tmp_path), registry)
    assert result.written == ["p", "p_left", "p_right"] and pad.get("p_right") == 2
    bad = execute({"tool_name": "pair", "tool_args": {"output": ["a", "b", "c"]}}, pad, _ctx(tmp_path), registry)
    assert not bad.ok and "returned 2 object(s)" in bad.message


def test_decorator_validation():
    with pytest.raises(ValueError, match=r"unknown role\(s\) \['cooking'\]"):
        build_tool(lambda df: df, "get", roles=("cooking",), objects=("df",))
    # the name before 0.2 still registers, with a warning
    registry = ToolRegistry()
    with pytest.warns(DeprecationWarning, match="stages= is now roles="):
        @make_get_tool(stages=("cleaning",), registry=registry)
        def old(df: pd.DataFrame) -> pd.DataFrame:
            """x"""
            return df
    assert registry.get("old").roles == ("cleaning",)
    # a legacy fit_/tune_ tool keeps what its name meant before roles=: it fits (and tunes) a model
    with pytest.warns(DeprecationWarning, match="'fits_model'"):
        @make_get_tool(stages=("modeling", "modeling"), registry=registry)
        def tune_mine(X: pd.DataFrame) -> pd.DataFrame:
            """x"""
            return X
    tuned = registry.get("tune_mine")
    assert tuned.fits_model and tuned.tunes and tuned.workflow_roles == ("modeling",)   # once each
    with pytest.raises(ValueError, match="'tuning' role needs 'fits_model'"):
        build_tool(lambda df: df, "get", roles=("modeling", "tuning"), objects=("df",))
    with pytest.raises(ValueError, match="cannot read objects"):
        @make_set_tool(roles=("loading",), registry=ToolRegistry())
        def bad(df: pd.DataFrame) -> pd.DataFrame:
            """x"""
            return df
    with pytest.raises(ValueError, match="must read at least one object"):
        @make_get_tool(roles=("loading",), registry=ToolRegistry())
        def bad2(n: int) -> int:
            """x"""
            return n


def test_schema_description_drops_sections_the_schema_already_carries():
    fn = REGISTRY.get("fillna_with_median").schema()["function"]
    assert fn["description"].startswith("Fill missing values with median")
    assert "Parameters" not in fn["description"] and "Returns" not in fn["description"]
    assert '"tool_name": "fillna_with_median"' in fn["description"]  # the example call stays
    kw = fn["parameters"]["properties"]["func_kwargs"]["properties"]["columns"]
    assert "Numeric column(s) to fill" in kw["description"]


# ------------------------------------------------------------------------- toolsets
def test_the_paper_toolset_is_table_9_plus_the_summary_and_tuning_tools():
    paper = REGISTRY.for_toolset("paper")
    tune = {t.name for t in REGISTRY if t.name.startswith("tune_")}
    assert len(tune) == 8
    assert set(paper.names()) == set(PAPER_TABLE_9) | {"get_dataframe_summary"} | tune
    assert "create_submission" not in paper
    assert set(REGISTRY.for_toolset("extended").names()) == set(REGISTRY.names())


def test_a_tool_outside_the_toolset_is_refused_with_a_clear_error(tmp_path):
    result = execute({"tool_name": "create_submission", "tool_args": {"bindings": {"predictions": "p", "test_df": "t"}}},
                     Scratchpad(), ToolContext(sandbox=tmp_path), REGISTRY.for_toolset("paper"))
    assert not result.ok and "not in this run's 'paper' toolset" in result.message


def _frame_summary(df: pd.DataFrame) -> str:
    """A summary."""
    return str(df.shape)


def test_toolset_names_are_checked():
    with pytest.raises(UnknownToolsetError, match="unknown toolset 'tiny'; valid toolsets: paper, extended"):
        REGISTRY.for_toolset("tiny")
    with pytest.raises(ValueError, match="unknown toolset"):
        build_tool(_frame_summary, "get", toolsets=("small",))
    assert build_tool(_frame_summary, "get", toolsets=PAPER).toolsets == ("paper", "extended")
    assert build_tool(_frame_summary, "get").toolsets == ("extended",)   # a new tool joins "paper" explicitly


def test_episodes_offer_only_the_trials_toolset(tmp_path):
    from mltb_core.config import TrialConfig
    from mltb_core.planners.episode import Episode
    from mltb_core.stages.masking import subtask_tools
    from mltb_core.bench.tasks import get_task
    from mltb_core.llm.sim import SimPolicy

    task = get_task("spaceship-titanic")
    for toolset, has_helper in (("paper", False), ("extended", True)):
        ep = Episode.in_process(task, TrialConfig("hierarchical_mcts", "sim", toolset=toolset), SimPolicy(seed=0), None,
                     ToolContext(sandbox=tmp_path, task=task))
        names = {s["function"]["name"] for s in ep.tool_schemas()}
        assert ("create_submission" in names) == has_helper
        offered = subtask_tools("create_submission", ep.registry)
        assert ("create_submission" in offered) == has_helper
        assert {"predict_target", "get_features", "convert_to_dataframe", "concatenate_dataframes",
                "save_dataframe_to_csv"} <= set(offered)


def test_fitting_a_model_is_declared_by_the_tool_roles():
    fitting = {t.name for t in REGISTRY if t.fits_model}
    assert fitting and all(REGISTRY.fits_model(name) for name in fitting)
    assert {"fit_lightgbm_classifier", "tune_xgboost_regressor"} <= fitting
    assert "predict_target" not in fitting and not REGISTRY.fits_model("no_such_tool")
    assert {t.name for t in REGISTRY if t.tunes} == {n for n in fitting if REGISTRY.get(n).tunes} != set()
    # roles that say what a tool does are not workflow stages: a fit ranks as specific as one staged tool
    assert REGISTRY.get("fit_lightgbm_classifier").workflow_roles == ("modeling",)


def test_the_modeling_stage_offers_every_model_fitting_tool_and_no_other_stage_does():
    from mltb_core.stages.masking import subtask_tools
    from mltb_core.stages.specs import REWARD_STAGES

    registry = ToolRegistry()
    for tool in REGISTRY:
        registry.add(tool)

    @make_get_and_set_tool(roles=("fits_model",), registry=registry)   # no workflow stage of its own
    def fit_mine(X_train: pd.DataFrame, y_train: pd.Series) -> object:
        """x"""
        return None

    for stage in REWARD_STAGES:
        assert ("fit_mine" in subtask_tools(stage.name, registry)) == stage.tools.fits_models, stage.name
