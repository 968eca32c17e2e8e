"""The trial record: its fields, the ranges a read checks, its format version and the migrations from older ones.

One record per (task, planner, model, trial). Records are plain JSON so they can travel inside pytest
reports (``user_properties``) to the xdist controller and be appended there (:func:`record_json`); the
results.jsonl store (:mod:`mltb_core.analysis.resultsfile`) writes and reads them. A record of an older
format version is migrated when read (:func:`migrate`), one of a newer one refused
(:class:`RecordVersionError`).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from mltb_core.bench.tasks import is_slug
from mltb_core.stages.specs import STAGE_COUNT
from mltb_core.bench.stops import StopKind
from mltb_core.config import FIELD_RANGES, SEED_RANGE
from mltb_core.environment import Range

if TYPE_CHECKING:
    from mltb_core.config import TrialConfig

__all__ = ["TrialRecord", "Outcome", "record_key", "record_json", "migrate", "SCHEMA_VERSION", "RecordVersionError",
           "INT_RANGES", "MAX_COUNT", "MAX_TOKENS"]

# The record format's version. Raise it when a field is added, removed or changes meaning, and add a step
# to _MIGRATIONS that turns a record of the version before into one of this version: old runs keep loading
# (--resume, --compare and mltb report read runs of any age) and never pass for the new meaning.
#   1 (no schema_version field): the records before it
#   2: schema_version, stop_kind (bench/stops.py), machine (provenance.machine_facts)
#   3: load_per_core (provenance.LoadMeter)
#   4: endpoint (LLMBackend.endpoint: what answered the trial's model calls)
SCHEMA_VERSION = 4


class Outcome(StrEnum):
    """How a trial ended. The value is what results.jsonl stores, and an ``Outcome`` is a ``str``: records
    written before the enum, and code comparing with the plain words, keep working."""

    VALID = "valid"                       # a valid submission (pass)
    PLANNER_FAILURE = "planner_failure"   # searched and failed, whatever the model's fault was (fail)
    INFRA_ERROR = "infra_error"           # API outage, server crash, OOM... (error; never counted, rerun)

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


class RecordVersionError(ValueError):
    """A record written by a newer mltb (a higher schema_version than this code reads)."""


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

