"""Reading JSON or TOML that mltb did not write itself (a file a user points at, a reply from the model or the
tool worker): one bounded parser and one rule for its errors.

Untrusted JSON can exhaust the stack (brackets nested thousands deep: ``RecursionError``), the integer
parser (``ValueError`` past Python's 4,300-digit limit) or memory (a huge file). :func:`loads_bounded` checks
depth and size in one linear scan before parsing and turns every failure into a ``ValueError`` whose text
names the problem. A missing, unreadable or malformed file raises the caller's error class with a message
that names what the file should be and where it is (:func:`read_document`); a file of JSON lines gives each
bad line as ``file:line: reason`` and goes on (:func:`json_lines`), never a bare traceback.
"""
from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

__all__ = ["read_document", "loads_bounded", "encodable", "clean_strings", "json_depth", "json_lines", "JSONShapeError", "MAX_DOCUMENT_DEPTH",
           "MAX_DOCUMENT_BYTES", "check_document_size"]

MAX_DOCUMENT_DEPTH = 64            # records, trajectories, baselines and price tables are a few levels deep
MAX_DOCUMENT_BYTES = 512 * 2**20   # one file mltb reads whole (results.jsonl of a large run is tens of MiB)


class JSONShapeError(ValueError):
    """JSON text or a value that is too deep or too large to accept."""


def encodable(text: str) -> str:
    """``text`` with every code point UTF-8 cannot encode (lone surrogates) replaced by ``?``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def clean_strings(value: Any) -> Any:
    """A parsed JSON value with every string (keys too) made :func:`encodable` (JSON's ``\\udc80`` escapes
    produce lone surrogates). Call on values whose depth is bounded (:func:`loads_bounded`)."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, list):
        return [clean_strings(v) for v in value]
    if isinstance(value, dict):
        return {encodable(k) if isinstance(k, str) else k: clean_strings(v) for k, v in value.items()}
    return value


def json_depth(text: str) -> int:
    """Deepest bracket nesting of JSON text, brackets inside strings ignored (one linear scan)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth -= 1
    return deepest


def loads_bounded(text: str, max_depth: int = MAX_DOCUMENT_DEPTH, max_chars: int = MAX_DOCUMENT_BYTES) -> Any:
    """``json.loads`` for untrusted text. Too long or too deeply nested is a :class:`JSONShapeError` (checked
    before parsing, so the parser never recurses that deep); anything else the parser refuses (bad JSON, an
    integer past the digit limit) is a ``ValueError`` saying why."""
    if len(text) > max_chars:
        raise JSONShapeError(f"the JSON text has {len(text):,} characters (at most {max_chars:,})")
    if json_depth(text) > max_depth:
        raise JSONShapeError(f"the JSON text is nested more than {max_depth} levels deep")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:   # the integer digit limit; the stack, should a scan miss
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def check_document_size(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> None:
    """OSError-free size check: ValueError when the file at ``path`` is larger than ``limit`` bytes."""
    try:
        size = path.stat().st_size
    except OSError:
        return   # the read that follows names the problem
    if size > limit:
        raise JSONShapeError(f"holds {size:,} bytes (at most {limit:,})")


def _loads_toml(text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except RecursionError:
        raise tomllib.TOMLDecodeError("nested too deeply") from None
    except ValueError as exc:   # the integer digit limit
        raise tomllib.TOMLDecodeError(str(exc)) from None


_PARSERS = {"json": (loads_bounded, ValueError), "toml": (_loads_toml, ValueError)}


def read_document(path: str | os.PathLike, what: str, kind: Literal["json", "toml"],
                  error: type[Exception] = ValueError) -> Any:
    """The parsed contents of the ``kind`` file at ``path``; ``error("<what> <path> ...")`` when it is missing,
    unreadable, too large or deep, not UTF-8 or not ``kind``."""
    parse, malformed = _PARSERS[kind]
    path = Path(path)
    try:
        check_document_size(path)
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as exc:   # a directory, no permission...
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except JSONShapeError as exc:
        raise error(f"{what} {path} is refused: {exc}") from None
    except malformed as exc:
        raise error(f"{what} {path} is not {kind.upper()}: {exc}") from None


def json_lines(path: str | os.PathLike, data: bytes | None = None) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, value, None)`` for each JSON line of ``path`` (or of ``data``, its bytes), and
    ``(line number, None, reason)`` for each line that is not bounded, UTF-8 JSON; blank lines are skipped.
    ``OSError`` when the file cannot be read; :class:`JSONShapeError` when it is too large to read."""
    if data is None:
        path = Path(path)
        check_document_size(path)
        data = path.read_bytes()
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield lineno, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            continue
        try:
            value = loads_bounded(text)
            # only a \\uD8xx-\\uDFxx escape can make a lone surrogate: most lines need no walk
            yield lineno, clean_strings(value) if ("\\ud" in text or "\\uD" in text) else value, None
        except json.JSONDecodeError as exc:
            torn = " (the last line, without a newline: a write was interrupted)" if lineno == len(lines) else ""
            yield lineno, None, f"not JSON: {exc.msg} at column {exc.colno}{torn}"
        except ValueError as exc:
            yield lineno, None, f"refused: {exc}"
