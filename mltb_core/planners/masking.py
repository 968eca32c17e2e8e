"""Tool masking: which tools each of the ten subtasks offers the model."""
from __future__ import annotations

from mltb_core.bench.stages import by_stage
from mltb_core.toolkit.registry import REGISTRY, ToolRegistry

__all__ = ["subtask_tools", "stage_tools"]

_SUMMARIES = ("get_dataframe_summary", "get_dataframe_dtypes_summary", "get_missing_summary", "get_unique_values")

# Explicit names per subtask, plus every tool carrying the listed stage tags; one entry per stage of
# REWARD_STAGES (by_stage refuses a missing or unknown stage at import).
_SUBTASKS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = by_stage({
    "train_data_loading": (("read_data",), ()),
    "test_data_loading": (("read_data",), ()),
    "combine_train_test": (("concatenate_train_test", "concatenate_dataframes", "join_dataframes"), ()),
    "data_cleaning": (("drop_feature",), ("cleaning",)),
    "feature_engineering": (("drop_feature", "cast_columns", "cast_categorical_columns"), ("features",)),
    "split_train_test": (("split_combined_into_train_test",), ()),
    "train_data_to_features_target": (("convert_dataframe_to_features_target", "drop_feature", "get_features"), ()),
    "test_data_to_features": (("convert_dataframe_to_features_target", "drop_feature", "get_features"), ()),
    "modeling": (("evaluate_regression_model", "evaluate_classification_model"), ("modeling",)),
    # The paper toolset has no create_submission: the ids come from the test frame (get_features) and join the
    # predictions (convert_to_dataframe, concatenate_dataframes) before save_dataframe_to_csv writes the file.
    "create_submission": (("predict_target", "create_submission", "save_dataframe_to_csv", "convert_to_dataframe",
                           "get_features", "concatenate_dataframes"), ()),
}, "masking._SUBTASKS")


def subtask_tools(stage_name: str, registry: ToolRegistry | None = None) -> list[str]:
    """Names of the tools offered in subtask ``stage_name`` (summaries are always offered), in registry order."""
    reg = registry if registry is not None else REGISTRY
    try:
        names, tags = _SUBTASKS[stage_name]
    except KeyError:
        raise KeyError(f"unknown subtask {stage_name!r}; subtasks: {list(_SUBTASKS)}") from None
    wanted = set(names) | set(_SUMMARIES)
    wanted |= {t.name for t in reg if set(tags) & set(t.stages)}
    if stage_name != "modeling":  # model fitting belongs to the modeling subtask only
        wanted -= {t.name for t in reg if t.name.startswith(("fit_", "tune_"))}
    return [n for n in reg.names() if n in wanted]


def stage_tools(stage_name: str, registry: ToolRegistry | None = None) -> list[str]:
    """The tools of subtask ``stage_name`` by relevance to it: those named for the stage and those tagged with
    few stages first (a tool tagged with one stage is more specific to it than one shared by three), the
    summaries (offered in every subtask) last; registry order within a rank. The prompt shows the parameters
    of as many as fit its budget in this order (``prompts.stage_tools_note``)."""
    reg = registry if registry is not None else REGISTRY
    named = set(_SUBTASKS[stage_name][0]) if stage_name in _SUBTASKS else set()
    order = {name: index for index, name in enumerate(reg.names())}

    def rank(name: str) -> tuple[bool, int, int]:
        return name in _SUMMARIES, 1 if name in named else len(reg.get(name).stages), order[name]

    return sorted(subtask_tools(stage_name, reg), key=rank)
