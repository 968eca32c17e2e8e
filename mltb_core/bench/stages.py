"""The paper's ten pipeline stages (number, name, title): the one list that every count of stages and
every table keyed by stage follows.

It lives in the lowest layer, apart from the checks in :mod:`mltb_core.planners.rewards` (which import
pandas), so prompts, the front ends and the tables can read it cheaply. A table keyed by stage name is
built with :func:`by_stage`, which refuses, at import, a table that lacks a stage or names one that
does not exist.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, TypeVar

__all__ = ["Stage", "REWARD_STAGES", "STAGE_COUNT", "STAGE_NAMES", "stage_index", "stage_label", "by_stage",
           "StageTableError"]

T = TypeVar("T")


@dataclass(frozen=True)
class Stage:
    number: int
    name: str
    title: str


REWARD_STAGES: tuple[Stage, ...] = (
    Stage(1, "train_data_loading", "train data loaded"),
    Stage(2, "test_data_loading", "test data loaded"),
    Stage(3, "combine_train_test", "train and test combined"),
    Stage(4, "data_cleaning", "no missing values"),
    Stage(5, "feature_engineering", "features encoded"),
    Stage(6, "split_train_test", "split back into train and test"),
    Stage(7, "train_data_to_features_target", "train features and target"),
    Stage(8, "test_data_to_features", "test features"),
    Stage(9, "modeling", "model fitted"),
    Stage(10, "create_submission", "valid submission written"),
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
