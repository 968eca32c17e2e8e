"""Tool masking: which tools each of the ten subtasks offers the model."""
from __future__ import annotations

from typing import NamedTuple

from mltb_core.bench.stages import by_stage
from mltb_core.toolkit.registry import REGISTRY, ToolRegistry

__all__ = ["subtask_tools", "stage_tools"]

_SUMMARIES = ("get_dataframe_summary", "get_dataframe_dtypes_summary", "get_missing_summary", "get_unique_values")

class Subtask(NamedTuple):
    """The tools of one subtask: ``first`` (named, the tools that complete it, most relevant first), every tool
    tagged with one of ``tags``, and ``also`` (named, ranked after the tagged ones). :func:`stage_tools` shows
    their parameters in that order; ``predicted_first`` replaces ``first`` once the path holds predictions for
    the test rows (``Progress.predicted``)."""
    first: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    predicted_first: tuple[str, ...] = ()


# One entry per stage of REWARD_STAGES (by_stage refuses a missing or unknown stage at import).
_SUBTASKS: dict[str, Subtask] = by_stage({
    "train_data_loading": Subtask(("read_data",)),
    "test_data_loading": Subtask(("read_data",)),
    "combine_train_test": Subtask(("concatenate_train_test", "concatenate_dataframes", "join_dataframes")),
    "data_cleaning": Subtask(("fillna_with_median", "fillna_with_mode", "fillna_with_value"), ("cleaning",),
                             ("drop_feature",)),
    "feature_engineering": Subtask(("encode_all_categorical_columns", "label_encode", "one_hot_encode",
                                    "cast_categorical_columns"), ("features",),
                                   ("drop_feature", "cast_columns")),
    "split_train_test": Subtask(("split_combined_into_train_test",)),
    "train_data_to_features_target": Subtask(("convert_dataframe_to_features_target", "drop_feature", "get_features")),
    "test_data_to_features": Subtask(("convert_dataframe_to_features_target", "drop_feature", "get_features")),
    "modeling": Subtask(tags=("modeling",), also=("evaluate_regression_model", "evaluate_classification_model")),
    # The paper toolset has no create_submission: the ids come from the test frame (get_features) and join the
    # predictions (convert_to_dataframe, concatenate_dataframes) before save_dataframe_to_csv writes the file.
    # Once the path holds test predictions, saving them finishes (the paper's one-call finish): a model shown
    # predict_target first proposed it again below every prediction it had made (issue 33).
    "create_submission": Subtask(("predict_target", "create_submission", "save_dataframe_to_csv",
                                  "convert_to_dataframe", "get_features", "concatenate_dataframes"),
                                 predicted_first=("save_dataframe_to_csv", "create_submission",
                                                  "convert_to_dataframe", "get_features", "concatenate_dataframes",
                                                  "predict_target")),
}, "masking._SUBTASKS")


def _check_predicted_first() -> None:
    """``predicted_first`` is another order of ``first``'s tools, so the masked tool lists stay as they were."""
    for name, subtask in _SUBTASKS.items():
        if subtask.predicted_first and sorted(subtask.predicted_first) != sorted(subtask.first):
            raise ValueError(f"masking._SUBTASKS[{name!r}]: predicted_first must reorder first, not change its tools")


_check_predicted_first()


def subtask_tools(stage_name: str, registry: ToolRegistry | None = None) -> list[str]:
    """Names of the tools offered in subtask ``stage_name`` (summaries are always offered), in registry order."""
    reg = registry if registry is not None else REGISTRY
    try:
        subtask = _SUBTASKS[stage_name]
    except KeyError:
        raise KeyError(f"unknown subtask {stage_name!r}; subtasks: {list(_SUBTASKS)}") from None
    wanted = set(subtask.first) | set(subtask.also) | set(_SUMMARIES)
    wanted |= {t.name for t in reg if set(subtask.tags) & set(t.stages)}
    if stage_name != "modeling":  # model fitting belongs to the modeling subtask only
        wanted -= {t.name for t in reg if t.name.startswith(("fit_", "tune_"))}
    return [n for n in reg.names() if n in wanted]


def stage_tools(stage_name: str, registry: ToolRegistry | None = None, predicted: bool = False) -> list[str]:
    """The tools of subtask ``stage_name`` by relevance to it: its ``first`` tools (its ``predicted_first``
    ones when ``predicted`` and it has them) in their listed order, then
    the others by how specific they are (a tool tagged with one stage before one shared by three; the ``also``
    tools rank as tagged with their own stages), the summaries (offered in every subtask) last; registry
    order within a rank. The prompt shows the parameters of as many as fit its budget in this order
    (``prompts.stage_tools_note``)."""
    reg = registry if registry is not None else REGISTRY
    subtask = _SUBTASKS[stage_name]
    first = subtask.predicted_first if predicted and subtask.predicted_first else subtask.first
    order = {name: index for index, name in enumerate(reg.names())}

    def rank(name: str) -> tuple[bool, int, int]:
        if name in first:
            return False, first.index(name) - len(first), 0
        return name in _SUMMARIES, len(reg.get(name).stages), order[name]

    return sorted(subtask_tools(stage_name, reg), key=rank)
