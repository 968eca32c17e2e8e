"""Reading a JSON or TOML file a user points mltb at (a baseline, a price table): one rule for its errors.

A missing, unreadable or malformed file raises the caller's error class with a message that names what the
file should be and where it is, never a bare traceback.
"""
from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

__all__ = ["read_document"]

_PARSERS = {"json": (json.loads, json.JSONDecodeError), "toml": (tomllib.loads, tomllib.TOMLDecodeError)}


def read_document(path: str | os.PathLike, what: str, kind: Literal["json", "toml"],
                  error: type[Exception] = ValueError) -> Any:
    """The parsed contents of the ``kind`` file at ``path``; ``error("<what> <path> ...")`` when it is missing,
    unreadable, not UTF-8 or not ``kind``."""
    parse, malformed = _PARSERS[kind]
    path = Path(path)
    try:
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as exc:   # a directory, no permission...
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except malformed as exc:
        raise error(f"{what} {path} is not {kind.upper()}: {exc}") from None
