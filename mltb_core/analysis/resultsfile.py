"""The results.jsonl store: appending trial records and reading them back.

The file is the run's single source of truth and ``--resume`` reads it. Nothing in it may lose or crash a
run: an append first moves a torn tail (a write killed half-way) to a side file
``results.jsonl.torn-<time>`` so the new line starts on a line of its own, then writes whole lines in one
write, fsynced, under a file lock. A reader skips every line that is not a well-formed record (bad JSON,
not UTF-8, not an object, a field of the wrong type) with a warning naming ``file:line`` and the reason.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from filelock import FileLock

from mltb_core.analysis.records import TrialRecord, record_json
from mltb_core.bench.documents import JSONShapeError, json_lines

__all__ = ["append_records", "read_records", "scan_records", "problem_lines", "check_results_file",
           "UnreadableLine", "ResultsFileError", "ResultsFileWarning", "MAX_REPORTED_PROBLEMS"]

# Unreadable lines reported one by one before the rest are only counted.
MAX_REPORTED_PROBLEMS = 10


class ResultsFileError(ValueError):
    """results.jsonl cannot be used at all (a directory, no permission): a usage error naming the path."""


class ResultsFileWarning(UserWarning):
    """A line of results.jsonl was skipped, or a torn tail was moved aside."""


def check_results_file(path: Path) -> None:
    """:class:`ResultsFileError` when ``path`` exists but is not a readable and writable regular file."""
    path = Path(path)
    if not path.exists():
        if path.parent.exists() and not path.parent.is_dir():
            raise ResultsFileError(f"{path}: its directory {path.parent} is not a directory")
        return
    if not path.is_file():
        raise ResultsFileError(f"{path} is not a regular file (a directory?): move it away or choose "
                               "another run directory")
    if not os.access(path, os.R_OK | os.W_OK):
        raise ResultsFileError(f"{path} is not readable and writable by this user")


def _set_aside_torn_tail(path: Path) -> Path | None:
    """Move a last line without its newline (a write killed half-way) to a side file; None when whole.

    Called under the file lock. The bytes are kept (``<name>.torn-<time>``) because they may be
    the only trace of a trial; the record itself is rerun by --resume, which never saw it.
    """
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return None
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        fh.seek(0)
        data = fh.read()
        start = data.rfind(b"\n") + 1
        side = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**9:09d}")
        with open(side, "wb") as out:
            out.write(data[start:])
            out.flush()
            os.fsync(out.fileno())
        fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())
    warnings.warn(f"{path}: its last line was torn (a write was interrupted); moved its {size - start} "
                  f"byte(s) to {side}", ResultsFileWarning, stacklevel=3)
    return side


def append_records(path: Path, records: Iterable[TrialRecord]) -> None:
    """Append records as whole JSON lines: under a lock, a torn tail first set aside, one write, fsynced."""
    path = Path(path)
    data = "".join(record_json(r) + "\n" for r in records).encode("utf-8")
    if not data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    check_results_file(path)
    with FileLock(str(path) + ".lock"):
        if path.exists():
            _set_aside_torn_tail(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = 0
            while written < len(data):  # os.write may write less than asked; the rest follows at once
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class UnreadableLine:
    """A line of results.jsonl that is not a trial record, and why."""
    path: Path
    lineno: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: skipped, not a trial record: {self.reason}"


def scan_records(path: Path) -> tuple[list[TrialRecord], list[UnreadableLine]]:
    """Every well-formed record of ``path`` and every line that is not one (empty when the file is absent).

    Raises :class:`ResultsFileError` when ``path`` is not a readable regular file.
    """
    path = Path(path)
    check_results_file(path)
    if not path.exists():
        return [], []
    try:
        lines = list(json_lines(path))   # bounded: depth, size, the integer digit limit
    except OSError as exc:
        raise ResultsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except JSONShapeError as exc:
        raise ResultsFileError(f"{path}: {exc}") from None
    records: list[TrialRecord] = []
    problems: list[UnreadableLine] = []
    for lineno, value, reason in lines:
        try:
            if reason is not None:
                raise ValueError(reason)
            records.append(TrialRecord.from_dict(value))
        except (ValueError, TypeError) as exc:
            problems.append(UnreadableLine(path, lineno, str(exc)))
    return records, problems


def problem_lines(problems: list[UnreadableLine], limit: int = MAX_REPORTED_PROBLEMS) -> list[str]:
    """One line per unreadable line, at most ``limit``, then one line counting the rest."""
    lines = [str(p) for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"{problems[0].path}: ... and {len(problems) - limit} more unreadable line(s) skipped")
    return lines


def read_records(path: Path, *, strict: bool = False) -> Iterator[TrialRecord]:
    """The well-formed records of ``path``; each unreadable line is a :class:`ResultsFileWarning`
    (at most :data:`MAX_REPORTED_PROBLEMS`, then a count) and skipped, or a ValueError when ``strict``."""
    records, problems = scan_records(path)
    if problems and strict:
        raise ValueError(str(problems[0]))
    for line in problem_lines(problems):
        warnings.warn(line, ResultsFileWarning, stacklevel=2)
    return iter(records)

