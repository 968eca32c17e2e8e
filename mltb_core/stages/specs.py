"""The paper's ten pipeline stages, one spec each (number, name, title, the tools it offers, its prompt
prefix): the one list that every count of stages and every table keyed by stage follows.

It stays light, apart from the checks in :mod:`mltb_core.stages.rewards` (which import pandas), so the front
ends and the tables can read it cheaply. A table keyed by stage name is built with :func:`by_stage`, which
refuses, at import, a table that lacks a stage or names one that does not exist.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, TypeVar

from mltb_core.llm.prompts import STAGE_FEEDBACK as _FEEDBACK
from mltb_core.llm.prompts import SUBTASK_PREFIXES as _PREFIXES

__all__ = ["Stage", "Subtask", "SUMMARY_TOOLS", "stage", "REWARD_STAGES", "STAGE_COUNT", "STAGE_NAMES", "stage_index", "stage_label", "by_stage",
           "StageTableError"]

T = TypeVar("T")


@dataclass(frozen=True)
class Subtask:
    """The tools a stage offers the model (:mod:`mltb_core.stages.masking` reads it): ``first`` (named, the tools
    that complete it, most relevant first), every tool tagged with one of ``tags``, and ``also`` (named, ranked
    after the tagged ones); ``predicted_first`` replaces ``first`` once the path holds predictions for the test
    rows (``Progress.predicted``) and must reorder ``first``, not change its tools. ``fits_models``: the stage
    offers the tools that fit a model (``Tool.fits_model``); every other stage hides them."""
    first: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    predicted_first: tuple[str, ...] = ()
    fits_models: bool = False

    def __post_init__(self) -> None:
        if self.predicted_first and sorted(self.predicted_first) != sorted(self.first):
            raise ValueError("Subtask.predicted_first must reorder first, not change its tools")


@dataclass(frozen=True)
class Stage:
    """One stage's spec: number, name (what tables and records key by), title (what reports print), the tools it
    offers, and (looked up by name) its prompt prefix, check and feedback texts. A stage's check is in
    :mod:`mltb_core.stages.rewards` (``CHECKS``, keyed by stage name); its texts (prefix, feedback templates) in
    :mod:`mltb_core.llm.prompts`, which the check fills in."""
    number: int
    name: str
    title: str
    tools: Subtask = Subtask()

    @property
    def check(self) -> Callable[..., tuple[bool, str]]:
        """The stage's check (``rewards.CHECKS``; imported on first use, as it needs pandas)."""
        from mltb_core.stages.rewards import CHECKS

        return CHECKS[self.name]

    @property
    def prefix(self) -> str:
        """The hierarchical planner's subtask prefix (the paper's Appendix H.3)."""
        return SUBTASK_PREFIXES[self.name]

    @property
    def feedback(self) -> Mapping[str, str]:
        """The check's feedback templates, by situation (``prompts.STAGE_FEEDBACK``; the check fills them in)."""
        return STAGE_FEEDBACK[self.name]


# The tools every stage offers (summaries of the scratchpad's frames).
SUMMARY_TOOLS = ("get_dataframe_summary", "get_dataframe_dtypes_summary", "get_missing_summary", "get_unique_values")
_FEATURES_OR_TARGET = ("convert_dataframe_to_features_target", "drop_feature", "get_features")

REWARD_STAGES: tuple[Stage, ...] = (
    Stage(1, "train_data_loading", "train data loaded", Subtask(("read_data",))),
    Stage(2, "test_data_loading", "test data loaded", Subtask(("read_data",))),
    Stage(3, "combine_train_test", "train and test combined",
          Subtask(("concatenate_train_test", "concatenate_dataframes", "join_dataframes"))),
    Stage(4, "data_cleaning", "no missing values",
          Subtask(("fillna_with_median", "fillna_with_mode", "fillna_with_value"), ("cleaning",), ("drop_feature",))),
    Stage(5, "feature_engineering", "features encoded",
          Subtask(("encode_all_categorical_columns", "label_encode", "one_hot_encode", "cast_categorical_columns"),
                  ("features",), ("drop_feature", "cast_columns"))),
    Stage(6, "split_train_test", "split back into train and test", Subtask(("split_combined_into_train_test",))),
    Stage(7, "train_data_to_features_target", "train features and target", Subtask(_FEATURES_OR_TARGET)),
    Stage(8, "test_data_to_features", "test features", Subtask(_FEATURES_OR_TARGET)),
    Stage(9, "modeling", "model fitted",
          Subtask(tags=("modeling",), also=("evaluate_regression_model", "evaluate_classification_model"),
                  fits_models=True)),
    # The paper toolset has no create_submission: the ids come from the test frame (get_features) and join the
    # predictions (convert_to_dataframe, concatenate_dataframes) before save_dataframe_to_csv writes the file.
    # Once the path holds test predictions, saving them finishes (the paper's one-call finish): a model shown
    # predict_target first proposed it again below every prediction it had made (issue 33).
    Stage(10, "create_submission", "valid submission written",
          Subtask(("predict_target", "create_submission", "save_dataframe_to_csv", "convert_to_dataframe",
                   "get_features", "concatenate_dataframes"),
                  predicted_first=("save_dataframe_to_csv", "create_submission", "convert_to_dataframe",
                                   "get_features", "concatenate_dataframes", "predict_target"))),
)
STAGE_COUNT = len(REWARD_STAGES)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in REWARD_STAGES)


class StageTableError(ValueError):
    """A table keyed by stage name lacks a stage or names one that does not exist."""


def stage_index(name: str) -> int:
    for s in REWARD_STAGES:
        if s.name == name:
            return s.number
    raise KeyError(f"unknown stage {name!r}; stages: {list(STAGE_NAMES)}")


def stage_label(reached: int) -> str:
    """How far a trial got, as every front end prints it: ``3/10 (combine_train_test)``, or ``0/10``. The name
    is mltb's own, never a record's ``stage_name`` (text a records file or a worker wrote)."""
    return f"{reached}/{STAGE_COUNT}" + (f" ({STAGE_NAMES[reached - 1]})" if 1 <= reached <= len(STAGE_NAMES) else "")


def by_stage(table: Mapping[str, T], what: str) -> dict[str, T]:
    """``table`` in stage order, checked to hold exactly one entry per stage of :data:`REWARD_STAGES`;
    otherwise :class:`StageTableError` naming ``what`` and the stages missing or unknown."""
    missing = [name for name in STAGE_NAMES if name not in table]
    unknown = [name for name in table if name not in STAGE_NAMES]
    if missing or unknown:
        raise StageTableError(f"{what} must have one entry per stage of REWARD_STAGES: "
                              + "; ".join(part for part in (f"missing {missing}" if missing else "",
                                                            f"unknown {unknown}" if unknown else "") if part))
    return {name: table[name] for name in STAGE_NAMES}


def stage(name: str) -> Stage:
    """The spec of stage ``name``; a KeyError naming the stages for any other name."""
    return REWARD_STAGES[stage_index(name) - 1]


# Every stage has a prompt prefix, and every prefix a stage (refused at import otherwise).
SUBTASK_PREFIXES = by_stage(_PREFIXES, "prompts.SUBTASK_PREFIXES")
# Every stage has its feedback texts, and every table of them a stage (refused at import otherwise).
STAGE_FEEDBACK = by_stage(_FEEDBACK, "prompts.STAGE_FEEDBACK")
