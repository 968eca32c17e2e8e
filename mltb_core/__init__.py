"""mltb core library: scratchpad, tools, tasks, grading, planners, LLM backends. No pytest here.

Layers, lowest first (a module imports only from its own layer or lower ones; tests/test_layers.py
checks it): ``environment`` (the variables mltb reads, and the one reader) · ``plugins`` (the one
registry rule, the entry-point loader) · ``bench`` (tasks, data,
splits, grading) · ``toolkit`` (scratchpad, tool registry, the tools, the safe evaluator, sandbox,
limits) · ``llm`` (backends, prompts) · ``config`` · ``stages`` (the trial environment: stage specs and checks,
rewards, the workspace, trajectory events) · ``planners`` (search) · ``analysis`` (records, statistics, tables, reports) · ``runner``
(one trial, confinement, expert pipelines) · ``cli``.

The names below are the public API, resolved on first use: ``import mltb_core`` stays cheap (the pytest
plugin imports it in every pytest run) and the layers keep their order.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_PUBLIC = {
    # tools: the four decorators that register a function as a tool, and the registry
    "make_get_tool": "mltb_core.toolkit.registry",
    "make_set_tool": "mltb_core.toolkit.registry",
    "make_get_and_set_tool": "mltb_core.toolkit.registry",
    "make_override_tool": "mltb_core.toolkit.registry",
    "REGISTRY": "mltb_core.toolkit.registry",
    "Scratchpad": "mltb_core.toolkit.scratchpad",
    # tasks
    "Task": "mltb_core.bench.tasks",
    "get_task": "mltb_core.bench.tasks",
    "load_tasks": "mltb_core.bench.tasks",
    # model backends: the decorator, the spec to subclass, the backend interface
    "backend": "mltb_core.llm.backends",
    "BackendSpec": "mltb_core.llm.backends",
    "LLMBackend": "mltb_core.llm.base",
    # planners: the registry and its decorator
    "PLANNERS": "mltb_core.planners",
    "Planner": "mltb_core.planners",
    "register_planner": ("mltb_core.planners.base", "register"),
    "knob": "mltb_core.config",          # a planner's own setting (Planner.knobs)
    # one trial
    "TrialConfig": "mltb_core.config",
    "TrialRecord": "mltb_core.analysis.records",
    "Outcome": "mltb_core.analysis.records",
    "run_trial": "mltb_core.runner.trial",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    target = _PUBLIC.get(name)
    if target is None:
        raise AttributeError(f"module 'mltb_core' has no attribute {name!r}")
    module, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
