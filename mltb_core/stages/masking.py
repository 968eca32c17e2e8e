"""Tool masking: which tools each of the ten subtasks offers the model (the stage specs' ``tools``)."""
from __future__ import annotations

from mltb_core.stages.specs import SUMMARY_TOOLS, stage
from mltb_core.toolkit.registry import REGISTRY, ToolRegistry

__all__ = ["subtask_tools", "stage_tools"]


def subtask_tools(stage_name: str, registry: ToolRegistry | None = None) -> list[str]:
    """Names of the tools offered in subtask ``stage_name`` (summaries are always offered), in registry order."""
    reg = registry if registry is not None else REGISTRY
    try:
        subtask = stage(stage_name).tools
    except KeyError:
        raise KeyError(f"unknown subtask {stage_name!r}") from None
    wanted = set(subtask.first) | set(subtask.also) | set(SUMMARY_TOOLS)
    wanted |= {t.name for t in reg if set(subtask.tags) & set(t.roles)}
    fitting = {t.name for t in reg if t.fits_model}
    # model fitting belongs to the stages that declare it, and every model-fitting tool to them
    wanted = wanted | fitting if subtask.fits_models else wanted - fitting
    return [n for n in reg.names() if n in wanted]


def stage_tools(stage_name: str, registry: ToolRegistry | None = None, predicted: bool = False) -> list[str]:
    """The tools of subtask ``stage_name`` by relevance to it: its ``first`` tools (its ``predicted_first``
    ones when ``predicted`` and it has them) in their listed order, then
    the others by how specific they are (a tool tagged with one workflow stage before one shared by three; the
    ``also`` tools rank as tagged with their own stages), the summaries (offered in every subtask) last; registry
    order within a rank. The prompt shows the parameters of as many as fit its budget in this order
    (``prompts.stage_tools_note``)."""
    reg = registry if registry is not None else REGISTRY
    subtask = stage(stage_name).tools
    first = subtask.predicted_first if predicted and subtask.predicted_first else subtask.first
    order = {name: index for index, name in enumerate(reg.names())}

    def rank(name: str) -> tuple[bool, int, int]:
        if name in first:
            return False, first.index(name) - len(first), 0
        return name in SUMMARY_TOOLS, len(reg.get(name).workflow_roles), order[name]

    return sorted(subtask_tools(stage_name, reg), key=rank)
