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
    'apply_custom_function': '347a122caa7dfe05',
    'average_predictions': '1c513995dac2af45',
    'cast_categorical_columns': '866483ee85422b12',
    'cast_columns': '8d69abd188ffcbbe',
    'cast_integer_columns_to_float': 'f3e89a91c99d32a0',
    'cast_numeric_columns': '0accba935e2881e8',
    'concatenate_dataframes': 'dd6cdda3fdaab78d',
    'concatenate_train_test': '3b2304f060766d63',
    'convert_dataframe_to_features_target': 'f44d3788f09bb44f',
    'convert_to_dataframe': '6dcc91a82640714b',
    'create_categorical_feature': '7db34ce0696875ef',
    'create_conditional_feature': 'cc61d32ceea0c2b5',
    'create_group_aggregation': '2c1c29d01043fd6e',
    'create_lag_feature': '60bde0f5b68d6734',
    'create_lead_feature': '3cf526647330b88f',
    'create_numeric_feature': 'af57eb988d89a8a2',
    'create_rolling_feature': 'c62688d148f1fbc4',
    'create_submission': 'c51e65cfb8427376',
    'create_time_delta': 'daf96f790497b3a2',
    'drop_feature': '539170fab272781e',
    'drop_rows_with_missing': '1afc5fd152b5e339',
    'encode_all_categorical_columns': 'adfc587c2cebfda6',
    'evaluate_classification_model': '9d1409e6ec472390',
    'evaluate_regression_model': '1457a9c757e9804e',
    'extract_datetime_features': 'bb1f7101784bafcd',
    'extract_string_pattern': '6da066dfdcd67f0c',
    'fillna_with_condition': 'b07dca9bddbc82e5',
    'fillna_with_conditional_aggregation': '6f773be64180f99b',
    'fillna_with_custom_function': 'a70f0c4f7ccbafcb',
    'fillna_with_mean': '81bc9351f33261bc',
    'fillna_with_median': '6505c58caf172f77',
    'fillna_with_mode': '2fa34aadf86ce188',
    'fillna_with_multiple_conditions': 'c202ccd895a9f3bb',
    'fillna_with_value': '708b3f699ae5124d',
    'filter_dataframe': '19eaa40b1b81d921',
    'fit_catboost_classifier': '7b436cd6ca7eed32',
    'fit_catboost_regressor': '22f79accdba75db2',
    'fit_lightgbm_classifier': '68975d49845b10aa',
    'fit_lightgbm_regressor': 'a18d9171cc591970',
    'fit_linear_regressor': '83cccbb1db4e0802',
    'fit_logistic_regressor': '1d4490ce5560b77c',
    'fit_random_forest_classifier': 'c090207f62ad1e99',
    'fit_random_forest_regressor': 'f9deef75f716f13f',
    'fit_xgboost_classifier': '503a16491a1bd85d',
    'fit_xgboost_regressor': '83ba9dd6d836f399',
    'get_dataframe_dtypes_summary': '0d589eb032462376',
    'get_dataframe_summary': '8590451a82872852',
    'get_features': '5c8c10c573087edf',
    'get_group_aggregation': '66cf2fe42736d509',
    'get_missing_summary': 'baf1de1a87052575',
    'get_unique_values': '37441243d4bf1648',
    'join_dataframes': 'a607dd7b88e7eeec',
    'label_encode': 'e6a7c72acb79bd2f',
    'load_model': 'c406d669a299b21a',
    'normalize_all_numerical_columns': 'f38761067fe35106',
    'normalize_features': '7c33118a1b92e6bd',
    'one_hot_encode': 'eea7128b1c9b21dd',
    'predict_target': 'ff6e3289b8d82a69',
    'read_data': '4b335b7e211ab664',
    'rename_feature': '6d95fe356004f509',
    'save_dataframe_to_csv': '682819aa900eef81',
    'save_model': 'fd73160fbb844c08',
    'split_combined_into_train_test': 'ff5723f99c97e109',
    'split_string_column': '7a39ddb58a8e1fed',
    'tune_catboost_classifier': '2397b720fb4926da',
    'tune_catboost_regressor': 'c422b78d767d09eb',
    'tune_lightgbm_classifier': '2b2f0976ee932eb6',
    'tune_lightgbm_regressor': '597d66ac15b9464c',
    'tune_random_forest_classifier': '374b7f8600abff22',
    'tune_random_forest_regressor': '1d70b51d318e8922',
    'tune_xgboost_classifier': '56fd31a26be94906',
    'tune_xgboost_regressor': 'd2c6d1086cff222c',
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
