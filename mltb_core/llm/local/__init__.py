"""The embedded local model, fenced: everything that knows about llama.cpp lives in this package.

- :mod:`.models`: the named models (parts, pins, hashes) and the assembled GGUF;
- :mod:`.backend`: :class:`LocalBackend` (the OpenAI path, rewritten for a small model) and
  :class:`LocalServer` (one server per machine, model and partition);
- :mod:`.engine`: the server process, mltb's own OpenAI-compatible server over ``llama_cpp.Llama``;
- :mod:`.forcing`: grammar fast-forward; :mod:`.prefix_store`: prefix states on disk.

Only :mod:`mltb_core.llm.backends` (the ``local`` backend spec) names this package to the rest of mltb.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mltb_core.llm.local.backend import (
        DEFAULT_N_CTX, INSTALL_HINT, LocalBackend, LocalModelUnavailable, LocalServer, LocalServerError,
        available_cores, call_schema, chatml_messages, current_partition, default_model_path, draft_tokens_override,
        fast_forward_setting, llama_server_command, prefix_store_bytes, process_server, release_process_servers,
        request_log, resolve_model_path, tool_catalogue, worker_servers)

__all__ = ["DEFAULT_N_CTX", "INSTALL_HINT", "LocalBackend", "LocalModelUnavailable", "LocalServer", "LocalServerError",
           "available_cores", "call_schema", "chatml_messages", "current_partition", "default_model_path",
           "draft_tokens_override", "fast_forward_setting", "llama_server_command", "prefix_store_bytes",
           "process_server", "release_process_servers", "request_log", "resolve_model_path", "tool_catalogue",
           "worker_servers"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package (e.g. for .models, read by the backend spec) must not load the backend's
    # HTTP client and toolkit imports (1.5 s) until a local model is actually used.
    if name in __all__:
        return getattr(importlib.import_module("mltb_core.llm.local.backend"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
