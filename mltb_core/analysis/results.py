"""Trial records and the results.jsonl store.

One record per (task, planner, model, trial). Records are plain JSON so they can
travel inside pytest reports (``user_properties``) to the xdist controller and be
appended there; the file is the run's single source of truth and ``--resume`` reads it.

Nothing in the file may lose or crash a run: an append first moves a torn tail (a
write killed half-way) to a side file ``results.jsonl.torn-<time>`` so the new line
starts on a line of its own, then writes whole lines in one write, fsynced, under
a file lock. A reader skips every line that is not a well-formed record (bad JSON,
not UTF-8, not an object, a field of the wrong type) with a warning naming
``file:line`` and the reason.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
import warnings
from functools import lru_cache
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from filelock import FileLock

from mltb_core.analysis.safety import markdown as markdown_safe, one_line
from mltb_core.analysis.runstore import RESULTS_FILE, TRAJECTORY_DIR   # the run directory's names (re-exported)
from mltb_core.bench.documents import JSONShapeError, json_lines
from mltb_core.bench.tasks import is_slug
from mltb_core.stages.specs import STAGE_COUNT
from mltb_core.bench.stops import StopKind
from mltb_core.config import FIELD_RANGES, SEED_RANGE
from mltb_core.environment import Range

if TYPE_CHECKING:
    from mltb_core.config import TrialConfig

__all__ = ["TrialRecord", "Outcome", "append_records", "read_records", "record_key", "sort_records",
           "latest_records", "counted_records", "consistency_values", "percentile_values", "normalized_values",
           "group_by", "RESULTS_FILE", "TRAJECTORY_DIR", "SYNTHETIC_LABEL", "SYNTHETIC_BANNER", "model_label",
           "ResultsFileError", "ResultsFileWarning", "UnreadableLine", "scan_records", "problem_lines",
           "check_results_file", "MAX_REPORTED_PROBLEMS", "record_json", "PercentileCell", "percentile_cell",
           "percentile_exclusion", "NO_LEADERBOARD", "NOT_COMPARABLE", "quality_value", "normalized_cell",
           "QUALITY_FLOOR_NOTE", "display_text", "markdown_text", "SCHEMA_VERSION", "RecordVersionError",
           "StopKind", "INT_RANGES", "MAX_COUNT", "MAX_TOKENS"]

# The record format's version. Raise it when a field is added, removed or changes meaning, and add a step
# to _MIGRATIONS that turns a record of the version before into one of this version: old runs keep loading
# (--resume, --compare and mltb report read runs of any age) and never pass for the new meaning.
#   1 (no schema_version field): the records before it
#   2: schema_version, stop_kind (bench/stops.py), machine (provenance.machine_facts)
#   3: load_per_core (provenance.LoadMeter)
#   4: endpoint (LLMBackend.endpoint: what answered the trial's model calls)
SCHEMA_VERSION = 4

# Shown wherever a synthetic (sim) model's figures appear, so nobody mistakes them for an LLM's.
SYNTHETIC_LABEL = "(synthetic policy, not an LLM)"
# The banner of every report page that holds sim rows (a sentence; the label above is a suffix to a model name).
SYNTHETIC_BANNER = ("Rows for sim models come from a synthetic policy, not an LLM: their figures measure the harness, "
                    "not a language model.")



class Outcome(StrEnum):
    """How a trial ended. The value is what results.jsonl stores, and an ``Outcome`` is a ``str``: records
    written before the enum, and code comparing with the plain words, keep working."""

    VALID = "valid"                       # a valid submission (pass)
    PLANNER_FAILURE = "planner_failure"   # searched and failed, whatever the model's fault was (fail)
    INFRA_ERROR = "infra_error"           # API outage, server crash, OOM... (error; never counted, rerun)

# Unreadable lines reported one by one before the rest are only counted.
MAX_REPORTED_PROBLEMS = 10
_REQUIRED = ("task", "planner", "model", "trial", "seed", "config_hash", "outcome")
# JSON types allowed for each annotation word of a TrialRecord field.
_JSON_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "Outcome": (str,), "StopKind": (str,), "int": (int,), "float": (int, float),
                                            "bool": (bool,),
                                            "None": (type(None),), "dict[str, Any]": (dict,),
                                            "list": (list,)}


def _short(value: Any) -> str:
    """A value for a message, at most ~40 characters (an integer may have 4,300 digits)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


def _finite(value: int | float) -> bool:
    """A number a float field can hold: finite, and an integer small enough to be a float."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# The ranges of a record's integer fields, checked on read like their types: a record outside them is a bad
# line (reported and skipped), so no table, page name or sum meets an integer of 400 digits.
MAX_COUNT = 10**9      # tool calls, LLM calls, retries, tree nodes of one trial
MAX_TOKENS = 10**15    # tokens of one trial (a million calls of a billion tokens)
_COUNT = Range(int, 0, MAX_COUNT)
_TOKENS = Range(int, 0, MAX_TOKENS)
INT_RANGES: dict[str, Range] = {
    "trial": FIELD_RANGES["trial"], "seed": SEED_RANGE, "row_seed": SEED_RANGE,
    "stage_reached": Range(int, 0, STAGE_COUNT, why="the reward stages of stages/specs.py"),
    "tokens_in": _TOKENS, "tokens_in_cached": _TOKENS, "tokens_out": _TOKENS,
    "llm_calls": _COUNT, "llm_retries": _COUNT, "tool_calls": _COUNT, "tree_nodes": _COUNT,
}


def _json_types(annotation: str) -> tuple[type, ...]:
    """The JSON value types a field annotation admits ('list[float | None] | None' → list, None)."""
    words = re.sub(r"list\[[^\]]*\]", "list", annotation).split("|")
    return tuple(t for word in words for t in _JSON_TYPES[word.strip()])


_PLANNER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_CONFIG_HASH = re.compile(r"[A-Za-z0-9_-]{1,64}")     # config_hash() gives 12 hex digits; no dots, no slashes


class ResultsFileError(ValueError):
    """results.jsonl cannot be used at all (a directory, no permission): a usage error naming the path."""


class RecordVersionError(ValueError):
    """A record written by a newer mltb (a higher schema_version than this code reads)."""


class ResultsFileWarning(UserWarning):
    """A line of results.jsonl was skipped, or a torn tail was moved aside."""


@dataclass
class TrialRecord:
    task: str
    planner: str
    model: str
    trial: int
    seed: int
    config_hash: str
    outcome: Outcome
    valid: bool = False
    score: float | None = None
    percentile: float | None = None
    medal: str | None = None
    normalized: float | None = None
    # held-out-row bootstrap from grading (see mltb_core.bench.grading.row_bootstrap): the score and its
    # leaderboard percentile on each row resample, and the seed that drew the resamples (same seed
    # and row count = same resamples, so replicate b pairs across trials, planners and runs)
    score_samples: list[float | None] | None = None
    percentile_samples: list[float | None] | None = None
    normalized_samples: list[float | None] | None = None
    row_seed: int | None = None
    stage_reached: int = 0
    stage_name: str = ""
    stop_reason: str = ""      # the detail, for a person
    stop_kind: StopKind = StopKind.UNSPECIFIED    # what ended the search (bench/stops.py), for tables
    feedback: str = ""
    tokens_in: int = 0
    # the part of tokens_in the model's server took from its prompt cache (billed at the cached-input rate;
    # 0 where the server does not say, e.g. llama-cpp-python)
    tokens_in_cached: int = 0
    tokens_out: int = 0
    llm_calls: int = 0
    llm_retries: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    tree_nodes: int = 0
    wall_seconds: float = 0.0
    tool_seconds: float = 0.0
    llm_seconds: float = 0.0
    trajectory: str | None = None
    synthetic: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Why a valid trial has no percentile (e.g. an original dataset; see tasks.percentile_note) and the
    # leaderboard (public | private) percentiles are placed on; tables show both.
    percentile_note: str | None = None
    board: str | None = None
    toolset: str | None = None       # the tools offered to the model (paper | extended)
    # the code that ran the trial (provenance.code_version: mltb version @ commit); None in older records
    code: str | None = None
    # the machine that ran the trial (provenance.machine_facts); None in records before schema 2
    machine: dict[str, Any] | None = None
    # the machine's mean 1-minute load average per core while the trial ran (provenance.LoadMeter); None
    # where the system has none, and in records written before mltb measured it
    load_per_core: float | None = None
    # what answered the model calls (LLMBackend.endpoint: a server's base URL, a local model file's digest);
    # None for the synthetic policy, and in records before schema 4
    endpoint: str | None = None
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        self.model = str(self.model)   # a ModelRef given by a trial runner is kept as its string
        try:
            self.outcome = Outcome(self.outcome)
        except ValueError:
            raise ValueError(f"outcome must be one of {[o.value for o in Outcome]}, got {self.outcome!r}") from None
        try:
            self.stop_kind = StopKind(self.stop_kind)
        except ValueError:
            raise ValueError(f"stop_kind must be one of {[k.value for k in StopKind]}, "
                             f"got {self.stop_kind!r}") from None

    @classmethod
    def for_config(cls, task: str, config: TrialConfig, outcome: Outcome | str, **fields: Any) -> TrialRecord:
        """The record of a trial of ``task`` under ``config``: the fields that say which trial it is (model,
        seed, config hash, board, toolset, ...) all come from the config, so no route that makes a record
        (a finished trial, an infrastructure error, a crashed worker) can leave one out."""
        from mltb_core.analysis.provenance import code_version, machine_facts
        from mltb_core.llm.backends import is_synthetic

        return cls(task=task, planner=config.planner, model=config.model, trial=config.trial, seed=config.trial_seed,
                   config_hash=config.config_hash(), synthetic=is_synthetic(config.model), board=config.board,
                   toolset=config.toolset, code=code_version(), machine=dict(machine_facts()), outcome=outcome,
                   **fields)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        """A record from parsed JSON, migrated to :data:`SCHEMA_VERSION`; ValueError says why ``data`` is not
        one (unknown keys are dropped), :class:`RecordVersionError` that a newer mltb wrote it."""
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        data = migrate(data)
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise ValueError(f"trial record lacks field(s) {missing}")
        values = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            allowed = _json_types(str(f.type))
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                raise ValueError(f"field {f.name!r} is {value!r}, not {f.type}")
            if isinstance(value, list) and not all(v is None or (isinstance(v, (int, float))
                                                                 and not isinstance(v, bool)) for v in value):
                raise ValueError(f"field {f.name!r} holds a non-number")
            if float in allowed and isinstance(value, (int, float)) and not _finite(value):
                raise ValueError(f"field {f.name!r} is {str(value)[:40]}, not a finite number")
            bounds = INT_RANGES.get(f.name)
            if bounds is not None and value is not None and not bounds.allows(value):
                raise ValueError(f"field {f.name!r} is {_short(value)}, not {bounds.describe()}")
            values[f.name] = value
        load = values.get("load_per_core")
        if isinstance(load, (int, float)) and load < 0:
            raise ValueError(f"field 'load_per_core' is {load!r}, not a load (>= 0)")
        # Paths (trajectories, report pages) are built from these three.
        if not is_slug(values["task"]):
            raise ValueError(f"field 'task' is {values['task']!r}, not a task slug")
        if not _PLANNER_NAME.fullmatch(values["planner"]):
            raise ValueError(f"field 'planner' is {values['planner']!r}, not a planner name")
        if not _CONFIG_HASH.fullmatch(values["config_hash"]):
            raise ValueError(f"field 'config_hash' is {values['config_hash']!r}, not a configuration hash")
        return cls(**values)

    @property
    def key(self) -> tuple[str, str, str, int, str]:
        return record_key(self.task, self.planner, self.model, self.trial, self.config_hash)

    @property
    def case_id(self) -> str:
        """The id of the case this record is a trial of (:func:`mltb_core.config.case_id`)."""
        from mltb_core.config import case_id

        return case_id(self.task, self.planner, self.model, self.trial)


def _legacy_stop_kind(data: dict[str, Any]) -> StopKind:
    """The stop kind of a record written before planners returned one (schema 1), from the words mltb's own
    planners and runner wrote then, matched at the start of the reason only (so "the model ended its turn
    without a valid submission" is not a valid submission). Used by the migration alone: no current code
    reads a kind out of a reason."""
    if data.get("outcome") == Outcome.INFRA_ERROR:
        return StopKind.ERROR
    reason = str(data.get("stop_reason") or "").strip()
    reason = reason.removeprefix("no valid solution; ")   # AutoMind/MLE-STAR without one: what ended the loop
    for prefix, kind in _LEGACY_STOP_WORDS:
        if reason.startswith(prefix):
            return kind
    return StopKind.UNSPECIFIED


_LEGACY_STOP_WORDS: tuple[tuple[str, StopKind], ...] = (
    ("valid submission", StopKind.VALID_SUBMISSION),
    ("LLM-call budget", StopKind.LLM_CALL_BUDGET),
    ("token budget", StopKind.TOKEN_BUDGET),
    ("cost budget", StopKind.COST_BUDGET),
    ("time budget", StopKind.TIME_LIMIT),
    ("the conversation outgrew the model's context window", StopKind.CONTEXT_FULL),
    ("the model ended its turn", StopKind.MODEL_ENDED_TURN),
    ("model returned no reply", StopKind.NO_REPLY),
    ("step budget", StopKind.ITERATION_BUDGET),
    ("iteration budget", StopKind.ITERATION_BUDGET),
    ("action budget", StopKind.ITERATION_BUDGET),
    ("round budget", StopKind.ITERATION_BUDGET),
    ("tree exhausted", StopKind.TREE_EXHAUSTED),
    ("No Solution Found for subtask", StopKind.STAGE_FAILED),
    ("unit test of stage", StopKind.STAGE_FAILED),
    ("no valid initial solution", StopKind.NO_VALID_SOLUTION),
    ("every block refined", StopKind.SEARCH_COMPLETE),
    ("the tool worker failed", StopKind.WORKER_FAILED),
    ("the model's output could not be handled", StopKind.MODEL_FAULT),
)


def _from_1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "stop_kind": _legacy_stop_kind(data).value, "machine": None}


def _from_2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "load_per_core": None}


def _from_3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "endpoint": None}


# version n → the step that makes a record of version n one of version n + 1
_MIGRATIONS = {1: _from_1, 2: _from_2, 3: _from_3}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A parsed record brought to :data:`SCHEMA_VERSION` (one without ``schema_version`` is version 1)."""
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"field 'schema_version' is {version!r}, not a version number")
    if version > SCHEMA_VERSION:
        raise RecordVersionError(f"record of schema version {version}, written by a newer mltb (this one reads "
                                 f"up to {SCHEMA_VERSION}): upgrade mltb to read it")
    while version < SCHEMA_VERSION:
        data = _MIGRATIONS[version](data)
        version += 1
    return {**data, "schema_version": SCHEMA_VERSION}


def record_key(task: str, planner: str, model: str, trial: int, config_hash: str) -> tuple[str, str, str, int, str]:
    return (task, planner, model, int(trial), config_hash)


def _json_value(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars: a number stays a number (the reader checks types)
        return value.item()
    return str(value)


def record_json(record: TrialRecord) -> str:
    """One record as one JSON line's text (keys sorted, so equal records give equal lines)."""
    return json.dumps(record.to_dict(), sort_keys=True, default=_json_value)


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


def _sort_key(record: TrialRecord) -> tuple:
    return (record.task, record.model, record.planner, record.config_hash, record.trial, record.seed)


def sort_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Deterministic order independent of completion order (xdist finishes items in any order)."""
    return sorted(records, key=_sort_key)


def latest_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """One record per key: the last one written, except that a real outcome beats an infra error.

    An infra error followed by a resumed rerun leaves both lines in results.jsonl; the rerun counts.
    Output is sorted (see :func:`sort_records`).
    """
    chosen: dict[tuple, TrialRecord] = {}
    for record in records:
        previous = chosen.get(record.key)
        if previous is None or record.outcome != Outcome.INFRA_ERROR or previous.outcome == Outcome.INFRA_ERROR:
            chosen[record.key] = record
    return sort_records(chosen.values())


def counted_records(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Records that count towards consistency and percentiles: infra errors never do."""
    return [r for r in records if r.outcome != Outcome.INFRA_ERROR]


def consistency_values(records: Iterable[TrialRecord]) -> list[float]:
    """1.0 per valid trial and 0.0 per planner failure; their mean is the paper's consistency."""
    return [1.0 if r.valid else 0.0 for r in counted_records(records)]


def _has_leaderboard(records: list[TrialRecord]) -> bool:
    """Whether the task has a leaderboard at all (replica tasks have none)."""
    flags = [r.extra.get("leaderboard") for r in records if "leaderboard" in r.extra]
    if flags:
        return all(flags)
    return bool(records) and _task_has_leaderboard(records[0].task)


@lru_cache(maxsize=None)
def _task_has_leaderboard(slug: str) -> bool:
    """Fallback for records without the flag: ask the task spec (unknown tasks have none)."""
    try:
        from mltb_core.bench.tasks import load_tasks

        task = load_tasks().get(slug)
    except Exception:  # noqa: BLE001 - a broken spec directory must not break reading results
        return False
    return task is not None and task.has_leaderboard


NO_LEADERBOARD = "no leaderboard (schema replica or none given)"
NOT_COMPARABLE = "valid submissions got no comparable leaderboard percentile"


@dataclass
class PercentileCell:
    """The percentile (or normalized-score, :func:`normalized_cell`) figures of one cell's counted trials (the paper's rule: a trial without a
    valid submission counts as percentile 0).

    ``excluded`` says why the task has no comparable percentile (then ``values`` is empty).
    A valid trial whose grade has no percentile while others of the task have one is left out
    and counted in ``unscored``.
    """
    values: list[float] = field(default_factory=list)
    replicates: list[list[float | None] | None] = field(default_factory=list)
    row_seeds: list[int | None] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)      # trial seed of each value (pairs runs in the gate)
    counted: int = 0
    scored: int = 0          # valid trials with a percentile
    failed: int = 0          # counted trials without a valid submission (percentile 0)
    unscored: int = 0        # valid trials without a percentile (left out)
    excluded: str | None = None


def percentile_exclusion(records: Iterable[TrialRecord]) -> str | None:
    """Why these records' task has no comparable leaderboard percentile, or None when it has one.

    Decided by the valid trials: one with a percentile makes the task comparable; valid trials all
    without one mean the grader found no comparable board (its ``percentile_note`` says why, when
    the record has one). Without any valid trial the records' notes (every trial carries its task's
    note) or, for older records without one, the task's leaderboard flag decide.
    """
    counted = counted_records(records)
    valid = [r for r in counted if r.valid]
    if any(r.percentile is not None for r in valid):
        return None
    notes = sorted({str(getattr(r, "percentile_note", None) or r.extra.get("percentile_note") or "")
                    for r in (valid or counted)} - {""})
    if valid:
        return "; ".join(notes) if notes else NOT_COMPARABLE
    if notes:
        return "; ".join(notes)
    return None if _has_leaderboard(counted) else NO_LEADERBOARD


def percentile_cell(records: Iterable[TrialRecord]) -> PercentileCell:
    """Percentiles of counted trials with their row replicates (see :class:`PercentileCell`)."""
    counted = counted_records(records)
    cell = PercentileCell(counted=len(counted), excluded=percentile_exclusion(counted))
    if cell.excluded is not None:
        return cell
    for record in counted:
        if not record.valid:
            cell.failed += 1
            cell.values.append(0.0)
            cell.replicates.append(None)   # 0 on every row resample
        elif record.percentile is None:
            cell.unscored += 1
            continue
        else:
            cell.scored += 1
            cell.values.append(float(record.percentile))
            cell.replicates.append(record.percentile_samples)
        cell.row_seeds.append(record.row_seed)
        cell.seeds.append(record.seed)
    return cell


def percentile_values(records: Iterable[TrialRecord]) -> list[float]:
    """Leaderboard percentiles of counted trials (invalid → 0); empty when the task has no comparable one."""
    return percentile_cell(records).values


# The normalized score's floor: a valid submission no better than the trivial baseline counts as 0, as a
# failed trial does, so a valid submission never ranks under a failure (its raw value stays in the record).
QUALITY_FLOOR_NOTE = ("normalized score: 0 = the task's trivial constant baseline, 1 = a perfect prediction; a "
                      "failed trial, or a valid one below the baseline, counts 0")


def _floor(value: float | None) -> float | None:
    return None if value is None else max(float(value), 0.0)


def quality_value(record: TrialRecord) -> float | None:
    """A counted trial's normalized score on the benchmark's scale (see :data:`QUALITY_FLOOR_NOTE`);
    None for a valid trial whose task has no normalized score (its baseline is already perfect)."""
    if not record.valid:
        return 0.0
    return _floor(record.normalized)


def normalized_cell(records: Iterable[TrialRecord]) -> PercentileCell:
    """The normalized scores of a cell's counted trials, with their held-out-row replicates: every task
    has one (``excluded`` stays None), a valid trial without one is counted in ``unscored``."""
    counted = counted_records(records)
    cell = PercentileCell(counted=len(counted))
    for record in counted:
        value = quality_value(record)
        if value is None:
            cell.unscored += 1
            continue
        if record.valid:
            cell.scored += 1
            samples = record.normalized_samples
            cell.replicates.append(None if samples is None else [_floor(v) for v in samples])
        else:
            cell.failed += 1
            cell.replicates.append(None)
        cell.values.append(value)
        cell.row_seeds.append(record.row_seed)
        cell.seeds.append(record.seed)
    return cell


def normalized_values(records: Iterable[TrialRecord]) -> list[float]:
    """Normalized scores of counted trials (:func:`quality_value`), on every task with or without a leaderboard."""
    return normalized_cell(records).values


def group_by(records: Iterable[TrialRecord], *attrs: str) -> dict[tuple, list[TrialRecord]]:
    """Records grouped by the given attributes, keys in sorted order."""
    groups: dict[tuple, list[TrialRecord]] = {}
    for record in records:
        groups.setdefault(tuple(getattr(record, a) for a in attrs), []).append(record)
    return {k: groups[k] for k in sorted(groups)}


# one policy per output format lives in safety.py; the names tables and reports import from here
display_text = one_line
markdown_text = markdown_safe


def model_label(model: str, synthetic: bool) -> str:
    """The model name, marked when it is the synthetic policy."""
    return f"{model} {SYNTHETIC_LABEL}" if synthetic else model
