"""Model backends: OpenAI, the embedded llama.cpp model, the synthetic policy; ``make_backend`` picks one.

Model strings: ``openai:<model>`` · ``local`` (= ``local:qwen2.5-coder-1.5b``) · ``local:<name>`` (the named
models of :mod:`mltb_core.llm.local.models`, e.g. ``local:smollm2``) · ``local:/path/model.gguf``
· ``sim`` · ``sim:<skill in [0, 1]>`` · ``sim:<skill>:neutral``; what each means is registered once in :mod:`mltb_core.llm.backends`
(third parties add backends through the ``mltb.backends`` entry-point group).
"""
from __future__ import annotations

from typing import Any

from mltb_core.llm.backends import (BackendSpec, ModelRef, as_model_ref, backend, is_synthetic, model_forms, model_id,
                                    parse_model, preflight, register_backend)
from mltb_core.llm.base import Candidate, InfraError, LLMBackend, LLMResponse, UnknownModelError, Usage
from mltb_core.llm.cache import ResponseCache

__all__ = ["make_backend", "LLMBackend", "LLMResponse", "Candidate", "Usage", "InfraError",
           "UnknownModelError", "ResponseCache", "MODEL_FORMS", "BackendSpec", "backend", "register_backend",
           "parse_model", "ModelRef", "model_id", "is_synthetic", "model_forms", "preflight"]


def __getattr__(name: str) -> Any:
    # MODEL_FORMS follows the registry (plug-ins included), so it is computed when asked for.
    if name == "MODEL_FORMS":
        return tuple(model_forms())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_backend(model: ModelRef | str, *, seed: int = 0, cache: Any = None, price_table: Any = None,
                 **opts: Any) -> LLMBackend:
    """Build the backend named by ``model`` (a parsed ModelRef, or a string in one of the forms of the
    module docstring).

    ``seed`` is the trial seed (cache key, jitter, sim randomness); ``cache`` a ResponseCache, a
    directory, True (default directory) or None (off); ``price_table`` a PriceTable or a TOML path;
    other ``opts`` go to the backend's constructor. Unknown forms raise :class:`UnknownModelError`.
    """
    return as_model_ref(model).build(seed=seed, cache=cache, price_table=price_table, **opts)
