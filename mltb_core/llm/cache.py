"""On-disk response cache: identical requests in the same trial seed replay the stored response.

One JSON file per key under ``<cache_dir>/llm/<aa>/<key>.json``. Writes go to a temp file then
``os.replace`` (atomic on POSIX), so concurrent xdist workers never see half a file; an entry a
backend could not have stored (torn, not JSON, a wrong type, past a fresh reply's bounds) is a miss: removed
with a warning and rewritten by the next call. Hits are free: the backend records
them with zero tokens/cost and keeps the original usage in ``Usage.cached_*``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from mltb_core.environment import default as default_environment
from mltb_core.environment import read as read_environment
from mltb_core.llm.base import MAX_REPLY_CHARS, LLMResponse
from mltb_core.bench.documents import loads_bounded
from mltb_core.toolkit.textsafety import cap_text

__all__ = ["ResponseCache", "default_cache_dir", "CACHE_ENV"]

CACHE_ENV = "MLTB_CACHE_DIR"
# Bounds of a stored entry: a reply of n candidates, each its text and calls within MAX_REPLY_CHARS (a call's
# arguments are nested a few levels inside the entry's own three).
MAX_ENTRY_BYTES = 64 * 4 * MAX_REPLY_CHARS
MAX_ENTRY_DEPTH = 48


def default_cache_dir() -> Path:
    """``$MLTB_CACHE_DIR``, else ``~/.cache/mltb``."""
    return Path(read_environment(CACHE_ENV) or default_environment(CACHE_ENV)).expanduser()


class ResponseCache:
    """Response cache rooted at ``cache_dir`` (files under ``cache_dir/llm``); ``enabled=False`` turns it off."""

    def __init__(self, cache_dir: str | os.PathLike | None = None, enabled: bool = True) -> None:
        self.root = Path(cache_dir or default_cache_dir()) / "llm"
        self.enabled = enabled

    @staticmethod
    def key(model: str, messages: list[dict], tools: list[dict], n: int, temperature: float,
            seed: int | None, trial_seed: int | None) -> str:
        """sha256 over everything that determines a response; ``model`` is the backend's
        :attr:`~mltb_core.llm.base.LLMBackend.response_identity` (model, what answers, settings)."""
        payload = {"model": model, "messages": messages, "tools": tools, "n": n,
                   "temperature": temperature, "seed": seed, "trial_seed": trial_seed}
        blob = json.dumps(payload, sort_keys=True, default=str, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> LLMResponse | None:
        """The stored response, or None on a miss or when disabled. An entry that is not one a backend could
        have stored (unreadable, not JSON, a wrong type anywhere, no candidate, past the bounds a fresh reply
        is held to) is a miss too: removed with a warning, so the next :meth:`put` replaces it."""
        if not self.enabled:
            return None
        path = self.path(key)
        try:
            size = path.stat().st_size
            if size > MAX_ENTRY_BYTES:
                raise ValueError(f"{size:,} bytes, more than any stored reply (at most {MAX_ENTRY_BYTES:,})")
            data: Any = loads_bounded(path.read_text(encoding="utf-8"), max_depth=MAX_ENTRY_DEPTH,
                                      max_chars=MAX_ENTRY_BYTES)
            return LLMResponse.from_dict(data)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - any unreadable entry is a miss, never a crash
            self.discard(key)
            warnings.warn(f"ignoring corrupt LLM cache entry {path} ({type(exc).__name__}: {cap_text(str(exc), 300)}); "
                          "removed; it will be rebuilt", RuntimeWarning, stacklevel=2)
            return None

    def discard(self, key: str) -> None:
        """Remove the entry of ``key``, if any (a damaged one: the next :meth:`put` writes it afresh)."""
        with contextlib.suppress(OSError):
            self.path(key).unlink(missing_ok=True)

    def put(self, key: str, response: LLMResponse) -> None:
        """Store ``response`` atomically (temp file in the same directory, then rename)."""
        if not self.enabled:
            return
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(response.to_dict(), handle, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.root.parent)!r}, enabled={self.enabled})"
