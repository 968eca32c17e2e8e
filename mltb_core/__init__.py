"""mltb core library: scratchpad, tools, tasks, grading, planners, LLM backends. No pytest here.

Layers, lowest first (a module imports only from its own layer or lower ones; tests/test_layers.py
checks it): ``bench`` (tasks, data, splits, grading) · ``toolkit`` (scratchpad, tool registry, the
tools, the safe evaluator, sandbox, limits) · ``llm`` (backends, prompts) · ``config`` · ``planners``
(search, rewards, trajectories) · ``analysis`` (records, statistics, tables, reports) · ``runner``
(one trial, confinement, expert pipelines) · ``cli``.
"""
__version__ = "0.1.0"
