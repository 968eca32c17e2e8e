"""Trial configuration: everything that changes a trial's result, hashed for resume and baselines."""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from mltb_core.bench.tasks import DEFAULT_BOARD, check_board
from mltb_core.toolkit.limits import default_threads
from mltb_core.toolkit.registry import DEFAULT_TOOLSET

__all__ = ["TrialConfig", "trial_seed", "Range", "OptionValueError", "FIELD_RANGES", "RUN_RANGES",
           "OPTION_FIELDS", "option_range", "parse_option", "check_option", "EnvironmentValueError",
           "check_environment"]


class OptionValueError(ValueError):
    """A numeric option is outside its allowed range (or not a number of the right kind)."""

    def __init__(self, option: str, value: Any, allowed: str, typed: str | None = None):
        self.option, self.value, self.allowed = option, value, allowed
        self.typed = typed            # the text as the user typed it, when the value came from text
        super().__init__(f"{option}: {self.detail}")

    @property
    def detail(self) -> str:
        """The value and the allowed range, without the option's name (front ends add their own)."""
        shown = self.typed if self.typed is not None else repr(self.value)
        return f"{shown} is not allowed: expected {self.allowed}"


@dataclass(frozen=True)
class Range:
    """The allowed values of one numeric option: its kind (int or float) and bounds (None: unbounded)."""
    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False        # low itself excluded (a budget of 0 seconds makes no sense); no high then
    why: str = ""                 # shown with the range when the reason is not obvious

    def describe(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        kind = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            text = f"{kind} from {num(self.low)} to {num(self.high)}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {num(self.low)}"
        else:
            text = kind
        return text + (f" ({self.why})" if self.why else "")

    def allows(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (self.kind is int and not isinstance(value, int)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high


_AT_LEAST_1 = Range(int, 1)
_AT_LEAST_0 = Range(int, 0)
_POSITIVE = Range(float, 0, low_open=True)
_NON_NEGATIVE = Range(float, 0)

# The one home of every numeric option's range: TrialConfig checks its fields against FIELD_RANGES in
# __post_init__, and both front ends (the pytest options and ``mltb run``) check what the user typed
# against the same table, naming the flag. Optional budgets may also be None (unlimited).
FIELD_RANGES: dict[str, Range] = {
    "seed": Range(int, 0, 2**32 - 1, why="seeds numpy's generators"),
    "trial": _AT_LEAST_0,
    "max_iterations": _AT_LEAST_1,
    "max_depth": _AT_LEAST_1,
    # Each candidate is one LLM call per expansion: past 20 a single expansion costs more than a
    # whole default search, and a huge k (1e6) just hangs the trial.
    "expansion_k": Range(int, 1, 20, why="each candidate is one LLM call"),
    "exploration": _NON_NEGATIVE,
    "depth_penalty": _NON_NEGATIVE,
    "rollout_depth": _AT_LEAST_0,
    "subtask_depth": _AT_LEAST_1,
    "subtask_iterations": _AT_LEAST_1,
    "max_solutions": _AT_LEAST_1,
    "max_llm_calls": _AT_LEAST_1,
    "max_tokens": _AT_LEAST_1,
    "max_cost_usd": _POSITIVE,
    "max_seconds": _POSITIVE,
    "max_features": _AT_LEAST_1,
    "threads": _AT_LEAST_1,
    "tool_time_limit": _POSITIVE,
    "temperature": Range(float, 0, 2, why="the OpenAI API's range"),
}
# Session-level options of the pytest plugin (not part of a trial's configuration).
RUN_RANGES: dict[str, Range] = {
    "trials": _AT_LEAST_1,
    "run_max_cost": _POSITIVE,
    "run_max_seconds": _POSITIVE,
    "infra_retries": _AT_LEAST_0,
}
# Front-end option name -> TrialConfig field, where the two differ.
OPTION_FIELDS = {"max_cost": "max_cost_usd"}


def option_range(option: str) -> Range | None:
    """The range of a front-end option or TrialConfig field (None: not a numeric option)."""
    return RUN_RANGES.get(option) or FIELD_RANGES.get(OPTION_FIELDS.get(option, option))


def check_option(option: str, value: Any, label: str | None = None) -> Any:
    """``value`` if it is in ``option``'s range, else :class:`OptionValueError` naming ``label``."""
    allowed = option_range(option)
    if allowed is not None and not allowed.allows(value):
        raise OptionValueError(label or option, value, allowed.describe())
    return value


def parse_option(option: str, text: str, label: str | None = None) -> int | float:
    """Text typed by the user (flag, environment, ini) -> a number in ``option``'s range."""
    allowed = option_range(option)
    if allowed is None:
        raise KeyError(f"{option!r} is not a numeric option")
    typed = str(text).strip()
    try:
        value = allowed.kind(typed)
    except ValueError:
        value = None
    if value is None or not allowed.allows(value):
        raise OptionValueError(label or option, text, allowed.describe(), typed=repr(typed) if value is None else typed)
    return value


@dataclass(frozen=True)
class TrialConfig:
    planner: str
    model: str
    seed: int = 0                 # the run's base seed; the trial's seed is derived from it
    trial: int = 0
    # search budgets (None = unlimited); a budget hit ends the search cleanly
    max_iterations: int = 40      # MCTS iterations; ReAct steps
    max_depth: int = 40           # tool calls on one path
    expansion_k: int = 3          # candidates proposed per expansion
    exploration: float = 1.0      # UCT exploration weight w
    depth_penalty: float = 0.1    # per-level penalty on node values
    rollout_depth: int = 0        # 0 = the immediate reward (the paper's depth-0 rollouts)
    subtask_depth: int = 6        # hierarchical MCTS: max depth within one subtask
    subtask_iterations: int = 8   # hierarchical MCTS: iterations per subtask and seed node
    max_solutions: int = 3        # hierarchical MCTS: solution nodes carried into the next subtask
    max_llm_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_seconds: float | None = None
    # factorial ablation switches (None = the planner's own default)
    reward_shaping: bool | None = None
    feedback: bool | None = None
    tool_masking: bool | None = None
    decomposition: bool | None = None
    # state-aware JSON schema per LLM call (toolkit/constraints.py); None = on for local models only
    constrained_calls: bool | None = None
    # which tools the model is offered: "paper" (the paper's Table 9 toolset) or "extended" (adds helpers
    # such as create_submission); see registry.TOOLSETS
    toolset: str = DEFAULT_TOOLSET
    # execution
    max_features: int = 1000      # stage 5 bound on the feature count
    llm_cache: bool = True
    threads: int = field(default_factory=default_threads)   # per trial; MLTB_THREADS, default 1
    tool_time_limit: float | None = 300.0
    temperature: float = 0.7
    # grading: the Kaggle board percentiles and medals are read from (public as in the paper, or private)
    board: str = DEFAULT_BOARD

    def __post_init__(self) -> None:
        check_board(self.board)

    def __post_init__(self) -> None:
        for name in FIELD_RANGES:
            value = getattr(self, name)
            if value is not None or name not in _optional_fields():
                check_option(name, value)

    @property
    def trial_seed(self) -> int:
        return trial_seed(self.seed, self.trial)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown trial config field(s) {unknown}")
        return cls(**data)

    def with_(self, **changes: Any) -> TrialConfig:
        return replace(self, **changes)

    def config_hash(self) -> str:
        """Hash of the knobs shared by all trials of a configuration (not planner/model/trial/cache)."""
        data = {k: v for k, v in self.to_dict().items()
                if k not in ("planner", "model", "trial", "llm_cache", "threads")
                and not (k in _HASHED_WHEN_SET and v is None)}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


# Fields added after results were recorded: hashed only when set, so the hashes of earlier runs
# (resume, baselines) stay valid while a run that sets them gets a hash of its own.
_HASHED_WHEN_SET = frozenset({"constrained_calls"})


class EnvironmentValueError(ValueError):
    """An MLTB_* environment variable has a value its reader cannot parse."""


def _check_data_source() -> None:
    from mltb_core.bench.datasources import DATA_SOURCES, SOURCE_ENV

    raw = os.environ.get(SOURCE_ENV, "")
    if raw and raw not in DATA_SOURCES:
        raise ValueError(f"{SOURCE_ENV}={raw!r}: expected one of {', '.join(DATA_SOURCES)}")


def _environment_checks() -> list:
    """Each reader of an MLTB_* variable with a format, called once: ValueError naming variable and value."""
    from mltb_core.toolkit.limits import default_threads, tool_memory_limit
    from mltb_core.llm.openai_backend import check_retry_env

    return [tool_memory_limit, default_threads, check_retry_env, _check_data_source]


def check_environment() -> None:
    """Fail fast at start-up (not once per tool call or trial) on an MLTB_* variable that does not parse.

    The pytest plugin turns the error into a usage error (exit 4), ``mltb`` into exit 2. Paths
    (MLTB_TASKS_DIR, MLTB_PRICES, the caches) are checked where they are opened at start-up.
    """
    for check in _environment_checks():
        try:
            check()
        except ValueError as exc:
            raise EnvironmentValueError(f"bad environment variable {exc}") from None


def _optional_fields() -> frozenset[str]:
    """TrialConfig fields whose annotation allows None (no limit / the planner's default)."""
    return frozenset(f.name for f in fields(TrialConfig) if "None" in str(f.type))


def trial_seed(base_seed: int, trial: int) -> int:
    """Independent, reproducible seed for trial ``trial`` of a run seeded ``base_seed``."""
    digest = hashlib.sha256(f"{base_seed}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "little")
