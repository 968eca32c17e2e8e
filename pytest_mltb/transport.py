"""Worker → controller transport of trial records.

A worker puts the trial record (JSON) and the trajectory text (zlib+base64 when big) into the item's
``user_properties``; the controller reads them from the teardown report (the last report of every
item that ran, whatever its outcome). Nothing relies on a shared filesystem, so remote xdist workers
work, and junitxml carries the record as a property.
"""
from __future__ import annotations

import base64
import zlib
from pathlib import Path
from typing import Any

import pytest

__all__ = ["RECORD_PROPERTY", "TRAJECTORY_PROPERTY", "encode_trajectory", "decode_trajectory", "attach",
           "report_property"]

RECORD_PROPERTY = "mltb_record"
TRAJECTORY_PROPERTY = "mltb_trajectory"
# Trajectories larger than this travel compressed (junitxml and execnet stay small).
COMPRESS_ABOVE = 16_000
_COMPRESSED = "zlib+base64:"


def encode_trajectory(text: str) -> str:
    """Trajectory text for a user property: as is when small, ``zlib+base64:...`` when big."""
    if len(text) <= COMPRESS_ABOVE:
        return text
    return _COMPRESSED + base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def decode_trajectory(value: str) -> str:
    if value.startswith(_COMPRESSED):
        return zlib.decompress(base64.b64decode(value[len(_COMPRESSED):])).decode("utf-8")
    return value


def attach(item: pytest.Item, record) -> None:
    """Put the record and its trajectory text into the item's user_properties (→ report → controller)."""
    from mltb_core.analysis.records import record_json

    item.user_properties.append((RECORD_PROPERTY, record_json(record)))
    if record.trajectory and Path(record.trajectory).is_file():
        text = Path(record.trajectory).read_text(encoding="utf-8")
        item.user_properties.append((TRAJECTORY_PROPERTY, encode_trajectory(text)))


def report_property(report: pytest.TestReport, name: str) -> Any:
    for key, value in getattr(report, "user_properties", ()) or ():
        if key == name:
            return value
    return None
