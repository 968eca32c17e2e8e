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
    'apply_custom_function': 'bd14c78ab6aeec6a',
    'average_predictions': 'd18aefb9ccb16728',
    'cast_categorical_columns': 'f8f652fa4b99b66c',
    'cast_columns': '9272f75fcd7a54ed',
    'cast_integer_columns_to_float': '4e8fa1fcd9fb211f',
    'cast_numeric_columns': '246eb4160c5301eb',
    'concatenate_dataframes': 'e317a345ca35a2fe',
    'concatenate_train_test': '95bc2c4f27a9bc71',
    'convert_dataframe_to_features_target': '13bef047c7e4e505',
    'convert_to_dataframe': 'fa4fcfe9e3b39258',
    'create_categorical_feature': '35cfdf1ef93ad3ac',
    'create_conditional_feature': 'bac09af748eb63da',
    'create_group_aggregation': '5e5827a077c07b01',
    'create_lag_feature': 'ae9294cebd9ca592',
    'create_lead_feature': '3011f495b72a26d5',
    'create_numeric_feature': 'd02decd0f9079da7',
    'create_rolling_feature': '684237c85260cb4b',
    'create_submission': '760ad40f8fbcaecd',
    'create_time_delta': 'a494845d16c01850',
    'drop_feature': '089a17c90bd0d0ca',
    'drop_rows_with_missing': '921563fca44fb587',
    'encode_all_categorical_columns': 'f1f95a5888ce7303',
    'evaluate_classification_model': 'ce2e33917a2fc941',
    'evaluate_regression_model': '9c633b34d39e472c',
    'extract_datetime_features': '4993e934f34bf55f',
    'extract_string_pattern': '1575ce682cb44268',
    'fillna_with_condition': '315120e6617574ee',
    'fillna_with_conditional_aggregation': '81ee66541c086390',
    'fillna_with_custom_function': '34e4f3519f1f9b6e',
    'fillna_with_mean': 'b844edcc58bd66aa',
    'fillna_with_median': 'ceb70669c4528d6d',
    'fillna_with_mode': '0b5de93a2ae5af15',
    'fillna_with_multiple_conditions': 'b9ee8bacd21ccdc0',
    'fillna_with_value': '6ba4aa9e2f739459',
    'filter_dataframe': 'f1bbc6cecf6a8e95',
    'fit_catboost_classifier': 'aba64e5deaa44352',
    'fit_catboost_regressor': '5820a9336e9b9089',
    'fit_lightgbm_classifier': 'ba923786def7cb90',
    'fit_lightgbm_regressor': '8f5b9e2220fafc30',
    'fit_linear_regressor': '5ec9243a0246dac0',
    'fit_logistic_regressor': 'f635f957148d5394',
    'fit_random_forest_classifier': 'a7173c40352c9198',
    'fit_random_forest_regressor': 'cd895bfef818ff61',
    'fit_xgboost_classifier': 'efb82dc19253bdaf',
    'fit_xgboost_regressor': 'f4b5ac7e5d541c6a',
    'get_dataframe_dtypes_summary': '81117cbd95ce5ac8',
    'get_dataframe_summary': '3436b1ca4a3c21b7',
    'get_features': 'ae1f354431d07207',
    'get_group_aggregation': 'db9dbf640811bfc2',
    'get_missing_summary': 'dd8097f5aeeac963',
    'get_unique_values': '0655e9dcdd9bc9dd',
    'join_dataframes': '444da20ca95397fb',
    'label_encode': 'fd3031ef85bebd88',
    'load_model': '651c5cc2afe150ac',
    'normalize_all_numerical_columns': 'c3641217bf217f76',
    'normalize_features': '520eead0b8065ffe',
    'one_hot_encode': '3e5e56052d4756a4',
    'predict_target': '8c9d666d5fb51058',
    'read_data': 'dbcb000cc8aabc24',
    'rename_feature': 'ba41b3b0d2124923',
    'save_dataframe_to_csv': '92eac0b82cdf5ff9',
    'save_model': '262e461002b72ae1',
    'split_combined_into_train_test': '722fe64ebae285de',
    'split_string_column': '9a9d494a3683985d',
    'tune_catboost_classifier': '770e59051a3d4388',
    'tune_catboost_regressor': '0f105ce9dd4e2e69',
    'tune_lightgbm_classifier': 'd5f1145f274a4efd',
    'tune_lightgbm_regressor': '5a3d7445960afe53',
    'tune_random_forest_classifier': 'c1df13a6375bcdb6',
    'tune_random_forest_regressor': 'bc1096027bb9d4e0',
    'tune_xgboost_classifier': '71edbe39407be2a1',
    'tune_xgboost_regressor': '62627dd8d3cb36b0',
}
PINNED_TOOLSETS: dict[str, dict[str, str]] = {
    'paper': {'names': '5266ef11212df944', 'catalogue': 'a9541de129b5f311', 'preamble': 'e9f6c825be91fe5e', 'local_catalogue': 'f556db9bd9ba4099', 'schemas': '9592859f5df88aa4'},
    'extended': {'names': '8c28b56ee2cc901a', 'catalogue': '62222396c4d12f46', 'preamble': '2d60b954fca6bde8', 'local_catalogue': 'e8381942b151e740', 'schemas': '2b2ca6ff94d1d55c'},
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
