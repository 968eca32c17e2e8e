"""Every text the model reads about the tools, pinned by hash.

Tool docstrings, signatures, schemas and the tool catalogue are rendered into every prompt (and into the
shared preamble that llama.cpp and OpenAI cache): a refactoring of how they are written in the source
(shared parameter texts, generated docstrings) must not change a byte of them. This test hashes, per tool,
its doc, signature, describe() and JSON schema (whole and compact), and per toolset ('paper' and
'extended') the catalogue, the shared preamble and the local model's catalogue.

To change a tool's text deliberately: make the change, run ``python tests/test_tool_texts_pinned.py``,
paste the printed ``PINNED_TOOLS`` / ``PINNED_TOOLSETS`` over the ones below, and say in the commit message
which tools' descriptions changed and why (cached prompts of earlier runs stop matching).
"""
from __future__ import annotations

import hashlib
import json

import pytest

import mltb_core.toolkit.tools  # noqa: F401  (registers the toolset)
from mltb_core.llm import local, prompts
from mltb_core.toolkit.registry import REGISTRY, TOOLSETS, Tool

TASK_PROMPT = "A pinned task description."


def _digest(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tool_digest(tool: Tool) -> str:
    schema = tool.schema()
    return _digest({"doc": tool.doc, "signature": tool.signature, "summary": tool.summary,
                    "describe": tool.describe(), "schema": schema, "compact": prompts.compact_schema(schema)})


def toolset_digests(toolset: str) -> dict[str, str]:
    schemas = [tool.schema() for tool in REGISTRY.for_toolset(toolset)]
    return {"names": _digest([s["function"]["name"] for s in schemas]),
            "catalogue": _digest(prompts.tool_catalogue(schemas)),
            "preamble": _digest(prompts.shared_preamble(TASK_PROMPT, schemas)),
            "local_catalogue": _digest(local.tool_catalogue(schemas)),
            "schemas": _digest(schemas)}


def current() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    return ({tool.name: tool_digest(tool) for tool in REGISTRY}, {t: toolset_digests(t) for t in TOOLSETS})


PINNED_TOOLS: dict[str, str] = {
    'apply_custom_function': '8681806afa69369a',
    'average_predictions': 'f951553d35119955',
    'cast_categorical_columns': '9277528b8fcf285a',
    'cast_columns': '9fd5bd3b94c2431f',
    'cast_integer_columns_to_float': '0ac79ee2e0d97b1c',
    'cast_numeric_columns': 'aca12d26abfa691a',
    'concatenate_dataframes': '9e3a42c5a8b71cab',
    'concatenate_train_test': 'b15a7176f59447ff',
    'convert_dataframe_to_features_target': '7760114741953a1f',
    'convert_to_dataframe': '42a75998f0c5defd',
    'create_categorical_feature': '437e5d1ab90ea5d3',
    'create_conditional_feature': 'c05d4788c7ab1704',
    'create_group_aggregation': '1556b5e28ce9a71d',
    'create_lag_feature': '1b7ef861588a5f50',
    'create_lead_feature': '7cb9abd2270f3fba',
    'create_numeric_feature': '6294cbb2042d088a',
    'create_rolling_feature': '9af9269138e90f7a',
    'create_submission': 'd581843c0bd5cf7d',
    'create_time_delta': '1d868806613d4780',
    'drop_feature': '0af227ca52481747',
    'drop_rows_with_missing': '3e0fc5b04de02746',
    'encode_all_categorical_columns': 'ae242770a6d9dbae',
    'evaluate_classification_model': 'f0e2d917e5f09f95',
    'evaluate_regression_model': 'cd2788e6eea95edc',
    'extract_datetime_features': 'f2a88dab1e05e93e',
    'extract_string_pattern': 'ae6dba36c55d7f80',
    'fillna_with_condition': 'e0a1819a8ef839a1',
    'fillna_with_conditional_aggregation': '41b439c6aaebd0ee',
    'fillna_with_custom_function': 'cbba1f67a484442d',
    'fillna_with_mean': '6b4fce2a6f087b1b',
    'fillna_with_median': '392d3e338581efe1',
    'fillna_with_mode': '443b9a1c4e244c13',
    'fillna_with_multiple_conditions': '60ae2327e67644a0',
    'fillna_with_value': '14a1a69cdf3ec896',
    'filter_dataframe': 'e4b41515ff3789b5',
    'fit_catboost_classifier': 'd447261631057e39',
    'fit_catboost_regressor': '4cce020f3e45ef97',
    'fit_lightgbm_classifier': '0358c5d100074f66',
    'fit_lightgbm_regressor': '1da2b468303dcad9',
    'fit_linear_regressor': 'a883308f7e1d3ec8',
    'fit_logistic_regressor': '0424c14ca1be61b8',
    'fit_random_forest_classifier': 'f29a638099015fc9',
    'fit_random_forest_regressor': '457334ee981442c3',
    'fit_xgboost_classifier': 'deadce6c485d27b5',
    'fit_xgboost_regressor': '9ac5dc05e490433a',
    'get_dataframe_dtypes_summary': 'd296a60b3754d077',
    'get_dataframe_summary': 'bd4f1a3d0698e703',
    'get_features': '6b3f51d272189deb',
    'get_group_aggregation': '1c2acad1832bc748',
    'get_missing_summary': '344cec61dd4a87ba',
    'get_unique_values': '79581cb6798084be',
    'join_dataframes': '5d0732dc25803a8e',
    'label_encode': 'f866526eca456622',
    'load_model': 'fc9427548f401ad8',
    'normalize_all_numerical_columns': 'ba30d7f970bc0b03',
    'normalize_features': '0117fe366e4b581b',
    'one_hot_encode': 'f6415dd1fd016087',
    'predict_target': '26d860457ccc51ac',
    'read_data': 'cd99e0ad87822fc1',
    'rename_feature': '0c278276759c7f89',
    'save_dataframe_to_csv': '2b6426a8a9461f61',
    'save_model': '31c5d2fca4fe886c',
    'split_combined_into_train_test': 'd92bbb1cbf55cd9e',
    'split_string_column': '601fd7d93af13b22',
    'tune_catboost_classifier': '68615996d6ee71e6',
    'tune_catboost_regressor': 'be245a16dda47e19',
    'tune_lightgbm_classifier': 'e23397cf8e5dff73',
    'tune_lightgbm_regressor': '10db4266a99ddb9c',
    'tune_random_forest_classifier': '905f00589e5e6d53',
    'tune_random_forest_regressor': 'a0d59942c064e3f9',
    'tune_xgboost_classifier': '5c940734db3192e5',
    'tune_xgboost_regressor': 'f5303ae3879596e8',
}
PINNED_TOOLSETS: dict[str, dict[str, str]] = {
    'paper': {'names': '5266ef11212df944', 'catalogue': 'a9541de129b5f311', 'preamble': 'e9f6c825be91fe5e', 'local_catalogue': 'f556db9bd9ba4099', 'schemas': '2e723ee7fbdb3902'},
    'extended': {'names': '8c28b56ee2cc901a', 'catalogue': '62222396c4d12f46', 'preamble': '2d60b954fca6bde8', 'local_catalogue': 'e8381942b151e740', 'schemas': 'babe68a6415a1149'},
}


def test_the_same_tools_are_registered():
    assert sorted(REGISTRY.names()) == sorted(PINNED_TOOLS)


@pytest.mark.parametrize("name", sorted(PINNED_TOOLS))
def test_what_the_model_reads_about_each_tool_is_unchanged(name):
    assert tool_digest(REGISTRY.get(name)) == PINNED_TOOLS[name], (
        f"the text of tool {name!r} changed; if meant, update the pins (see the module docstring)")


@pytest.mark.parametrize("toolset", TOOLSETS)
def test_the_catalogue_and_preamble_of_each_toolset_are_unchanged(toolset):
    assert toolset_digests(toolset) == PINNED_TOOLSETS[toolset]


def test_the_digest_sees_a_one_character_change_in_a_docstring():
    tool = REGISTRY.get("fillna_with_median")
    before = tool_digest(tool)
    original = tool.func.__doc__
    try:
        tool.func.__doc__ = original.replace("median", "medIan", 1)
        assert tool_digest(tool) != before
    finally:
        tool.func.__doc__ = original


if __name__ == "__main__":   # prints the pins to paste above when a tool's text is meant to change
    tools, toolsets = current()
    print("PINNED_TOOLS: dict[str, str] = {")
    for name in sorted(tools):
        print(f"    {name!r}: {tools[name]!r},")
    print("}")
    print("PINNED_TOOLSETS: dict[str, dict[str, str]] = {")
    for toolset, digests in toolsets.items():
        print(f"    {toolset!r}: {digests!r},")
    print("}")
