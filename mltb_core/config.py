"""Trial configuration and the one settings table.

``TrialConfig`` holds everything that changes a trial's result (hashed for resume and baselines); its
fields declared with :func:`option` are also the trial settings of both front ends. ``SESSION_SETTINGS``
adds how a run is organised. pytest (``pytest_mltb/options.py``) and ``mltb run`` (``cli.py``) register
their flags with :func:`add_settings` and resolve cli > env > ini > default with :func:`resolve_settings`.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from mltb_core import environment
from mltb_core.bench.tasks import BOARDS, DEFAULT_BOARD
from mltb_core.toolkit.registry import DEFAULT_TOOLSET, TOOLSETS
from mltb_core.llm.prompts import CHARS_PER_TOKEN
from mltb_core.llm.backends import DEFAULT_MODEL, ModelRef, as_model_ref, builtin_model_forms, model_id
# declared in mltb_core.environment (the lowest layer, so every module can read through it)
from mltb_core.environment import (ENVIRONMENT, PATH, PATH_LIST, EnvironmentVariable, Range, absolute_path, absolute_paths,
                                   parse_bool)

__all__ = ["TrialConfig", "trial_seed", "MAX_TRIAL", "SEED_RANGE", "Range", "OptionValueError", "FIELD_RANGES", "RUN_RANGES",
           "OPTION_FIELDS", "option_range", "parse_option", "check_option", "EnvironmentValueError",
           "check_environment", "Setting", "SettingValueError", "option", "SETTINGS", "TRIAL_SETTINGS",
           "SESSION_SETTINGS", "SETTINGS_BY_NAME", "settings_for", "add_settings", "read_environment",
           "resolve_settings", "trial_fields", "parse_bool", "knob", "declare_knobs", "PLANNER_KNOBS", "ENVIRONMENT", "EnvironmentVariable", "CONTEXT_MODES", "RUNS_DIR",
           "case_id", "is_case_id"]

# What each LLM request carries of the path: every tool result whole (the paper's behaviour) or older
# results cut to their first lines (fewer input tokens per call; see prompts.trim_observation).
CONTEXT_MODES = ("full", "trimmed")
# Where both front ends put a run by default: <RUNS_DIR>/<timestamp>.
RUNS_DIR = "mltb-runs"


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


class SettingValueError(ValueError):
    """A setting's value (from the command line, the environment or an ini file) is not allowed."""

    def __init__(self, where: str, detail: str):
        self.where, self.detail = where, detail
        super().__init__(f"bad value for {where}: {detail}")


VALUE, SWITCH, FLAG = "value", "switch", "flag"
BOTH, PYTEST_ONLY, RUN_ONLY = ("pytest", "run"), ("pytest",), ("run",)


@dataclass(frozen=True)
class Setting:
    """One user-facing setting, declared once: both front ends, the ini key and the environment
    variable are generated from it (see ``add_settings`` and ``resolve_settings``).

    Spellings: flag ``--name-with-dashes`` (``flag`` overrides it; a ``switch`` also gets ``--no-...``),
    ini key ``mltb_name``, environment variable ``MLTB_NAME``. Precedence: cli > env > ini > default.
    """
    name: str
    help: str
    default: Any = None           # None: unset (no limit, the planner's own choice, or "not given")
    range: Range | None = None    # numeric settings: parsed and range-checked
    choices: tuple[str, ...] | None = None
    kind: str = VALUE             # VALUE (--x V), SWITCH (--x / --no-x, tri-state), FLAG (--x only)
    field: str | None = None      # the TrialConfig field it sets (part of the hash); None: session-level
    front_ends: tuple[str, ...] = BOTH   # "pytest", "run" (mltb run)
    flag_name: str | None = None
    unset_text: str = "none"      # how the help shows a None default
    knob: bool = False            # a planner's own setting (see :func:`knob`)
    planners: tuple[str, ...] = ()   # a knob's planners, named in its help
    listing: Callable[[], Iterable[str]] | None = None   # registered names the help lists (planners)
    path: str | None = None       # PATH or PATH_LIST: parsed to absolute paths, once, here (see :meth:`parse`)

    @property
    def flag(self) -> str:
        return self.flag_name or "--" + self.name.replace("_", "-")

    @property
    def no_flag(self) -> str:
        return "--no-" + self.flag[2:]

    @property
    def ini(self) -> str:
        return "mltb_" + self.name

    @property
    def env(self) -> str:
        return "MLTB_" + self.name.upper()

    @property
    def default_text(self) -> str:
        if self.default is None:
            return self.unset_text
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return str(self.default)

    def help_text(self, ini: bool = True) -> str:
        """The help line both front ends print: what, allowed values, default, env (and ini) spelling."""
        allowed = (f"; {self.range.describe()}" if self.range
                   else f"; one of {', '.join(self.choices)}" if self.choices else "")
        where = f"env {self.env}, ini {self.ini}" if ini else f"env {self.env}"
        users = f"{'/'.join(self.planners)}: " if self.planners else ""
        listed = ", ".join(self.listing()) if self.listing is not None else ""
        listed = f" ({listed})" if listed else ""
        return f"{users}{self.help}{listed}{allowed} [default: {self.default_text}] [{where}]"

    def check(self, value: Any, label: str | None = None) -> Any:
        """``value`` if this setting allows it (a typed value, not text), else OptionValueError naming
        ``label`` (default: the setting's name)."""
        if self.range is not None and not self.range.allows(value):
            raise OptionValueError(label or self.name, value, self.range.describe())
        if self.choices is not None and value not in self.choices:
            raise OptionValueError(label or self.name, value, f"one of {', '.join(self.choices)}")
        return value

    def parse(self, raw: Any, where: str, base: str | Path | None = None) -> Any:
        """A typed-in value (text from the environment, an ini file or a flag) -> a checked value. A path
        setting's value becomes absolute here, relative to ``base`` (an ini file's directory) or else the working
        directory, so that no later reader (a run directory's trials, their tool worker in ``/``) sees a
        relative one."""
        if raw is None or (isinstance(raw, bool) and self.kind != VALUE):
            return raw
        if self.path is not None:
            return self.absolute(raw, base)
        try:
            if self.range is not None:
                return parse_option(self.name, raw, where)
            if self.kind != VALUE:
                return parse_bool(raw)
            text = str(raw).strip()
            if self.choices is not None and text not in self.choices:
                raise ValueError(f"{text!r} is not allowed: expected one of {', '.join(self.choices)}")
            return text
        except OptionValueError as exc:
            raise SettingValueError(where, exc.detail) from None
        except ValueError as exc:
            raise SettingValueError(where, str(exc)) from None


    def absolute(self, raw: Any, base: str | Path | None = None) -> str:
        """This path setting's text as absolute path(s) (a ``--tasks-dir`` list: each entry)."""
        return absolute_paths(str(raw), base) if self.path == PATH_LIST else absolute_path(str(raw), base)


def option(default: Any = MISSING, help: str = "", *, range: Range | None = None,
           choices: tuple[str, ...] | None = None, switch: bool = False, name: str | None = None,
           front_ends: tuple[str, ...] = BOTH, unset_text: str = "none", hashed: bool | str = True) -> Any:
    """A TrialConfig field that is also a setting of both front ends: declare it here and nothing else.

    ``name`` is the flag/env/ini name when it differs from the field's; ``hashed=False`` keeps a field
    that cannot change a trial's result (the cache, threads) out of :meth:`TrialConfig.config_hash`;
    ``hashed=HASHED_WHEN_SET`` hashes it only when it differs from its default (a setting added after runs
    were recorded: their hashes, resumes and baselines stay valid while it is left unset).
    """
    meta = {SETTING_META: dict(help=help, range=range, choices=choices, kind=SWITCH if switch else VALUE,
                               name=name, front_ends=front_ends, unset_text=unset_text), HASHED_META: hashed}
    return field(default=default, metadata=meta)


SETTING_META, HASHED_META = "mltb_setting", "mltb_hashed"
HASHED_WHEN_SET = "when set"
_AT_LEAST_1 = Range(int, 1)
_AT_LEAST_0 = Range(int, 0)
# Trial numbers stay small enough for a file name (case_id) and a record's range (analysis/records.py).
MAX_TRIAL = 99_999
SEED_RANGE = Range(int, 0, 2**32 - 1, why="seeds numpy's generators")
_POSITIVE = Range(float, 0, low_open=True)
_UNLIMITED = "unlimited"
_PLANNERS_OWN = "the planner's own"


MATCHED_LLM_CALLS = 40      # LLM calls per trial when one run compares planners and sets no budget


@dataclass(frozen=True)
class TrialConfig:
    """Everything that changes a trial's result. A field declared with :func:`option` is also a setting
    of ``pytest`` and ``mltb run`` (flag, ini key, environment variable, range, help): one entry each."""
    planner: str
    model: ModelRef    # a model string is parsed here (library callers); the front ends pass a parsed one
    seed: int = option(0, "base seed of the run (each trial derives its own)", range=SEED_RANGE)
    trial: int = option(0, "trial number", range=Range(int, 0, MAX_TRIAL), front_ends=RUN_ONLY)
    # search budgets (None = unlimited); a budget hit ends the search cleanly
    max_iterations: int = option(40, "search iterations / ReAct steps per trial", range=_AT_LEAST_1)
    max_depth: int = option(40, "max tool calls on one path", range=_AT_LEAST_1)
    max_llm_calls: int | None = option(None, f"LLM calls per trial (a run of several planners: {MATCHED_LLM_CALLS}, "
                                       "matched)",
                                       range=_AT_LEAST_1, unset_text=_UNLIMITED)
    max_tokens: int | None = option(None, "tokens per trial", range=_AT_LEAST_1, unset_text=_UNLIMITED)
    max_cost_usd: float | None = option(None, "dollars per trial", range=_POSITIVE, name="max_cost",
                                        unset_text=_UNLIMITED)
    max_seconds: float | None = option(None, "wall seconds per trial", range=_POSITIVE, unset_text=_UNLIMITED)
    # factorial ablation switches (None = the planner's own default)
    reward_shaping: bool | None = option(None, "shaped rewards on/off", switch=True, unset_text=_PLANNERS_OWN)
    feedback: bool | None = option(None, "stage feedback to the model on/off", switch=True,
                                   unset_text=_PLANNERS_OWN)
    tool_masking: bool | None = option(None, "tool masking on/off", switch=True, unset_text=_PLANNERS_OWN)
    decomposition: bool | None = option(None, "subtask decomposition on/off", switch=True,
                                        unset_text=_PLANNERS_OWN)
    # state-aware JSON schema per LLM call (toolkit/constraints.py); None = on for local models only
    constrained_calls: bool | None = option(None, "state-aware constrained tool calls (a per-node JSON schema: "
                                                  "existing objects, columns and files only)", switch=True,
                                            unset_text="on for local models, off otherwise")
    # which tools the model is offered; see registry.TOOLSETS
    toolset: str = option(DEFAULT_TOOLSET, "tools offered to the model: 'paper' is the paper's Table 9 set, "
                                           "'extended' adds helpers such as create_submission",
                          choices=tuple(TOOLSETS))
    # what each LLM request carries of the path (see prompts.trim_observation)
    context: str = option("full", "what each LLM request carries: 'full' (every tool result whole, the paper's) "
                                  "or 'trimmed' (older tool results cut to their first lines, tool descriptions "
                                  "to their first paragraph)", choices=CONTEXT_MODES)
    # a bound on the tool results a request carries whole (see Episode.compacted_steps)
    context_budget: int | None = option(None, "tokens of older tool results (all but the last three) a request "
                                              f"carries whole (at {CHARS_PER_TOKEN} characters a token); beyond it "
                                              "the oldest are cut to their first lines, in blocks that keep the "
                                              "cached prefix; not with --context trimmed",
                                        range=Range(int, 500, why="a few tool results"),
                                        unset_text="unbounded: every result whole, the paper's",
                                        hashed=HASHED_WHEN_SET)
    # execution
    max_features: int = option(1000, "stage 5 bound on the feature count", range=_AT_LEAST_1)
    llm_cache: bool = option(True, "on-disk LLM response cache", switch=True, hashed=False)
    unconfined: bool = option(False, "run tool workers without Landlock where the kernel lacks it (they could "
                                     "read held-out labels; every record and table says so)", switch=True,
                              hashed=False)
    threads: int = option(1, "threads per trial", range=_AT_LEAST_1, hashed=False)
    tool_time_limit: float | None = option(300.0, "seconds one tool call may run", range=_POSITIVE)
    temperature: float = option(0.7, "sampling temperature", range=Range(float, 0, 2, why="the OpenAI API's range"))
    # grading: the Kaggle board percentiles and medals are read from
    board: str = option(DEFAULT_BOARD, "Kaggle leaderboard for percentiles and medals: public (as in the "
                                       "paper) or private", choices=tuple(BOARDS))
    # Planner knobs (each planner's own settings, declared next to its class: ``Planner.knobs``) by name;
    # an unset knob takes its default. Only the running planner's knobs enter config_hash().
    knobs: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_model_ref(self.model))   # UnknownModelError (a ValueError) names it
        object.__setattr__(self, "knobs", dict(self.knobs))
        for name, value in self.knobs.items():
            setting = _KNOBS.get(name)
            if setting is None:
                raise ValueError(f"unknown planner knob {name!r}; known knobs: {', '.join(sorted(_KNOBS)) or 'none'}")
            if not (value is None and setting.default is None):
                setting.check(value)
        if self.context == "trimmed" and self.context_budget is not None:
            raise ValueError("context_budget: a budget has no effect with context 'trimmed' (every result but "
                             "the last three is cut already); set one or the other")
        for setting in TRIAL_SETTINGS:
            value = getattr(self, setting.field)
            if not (value is None and setting.field in _optional_fields()):
                setting.check(value, setting.field)

    @property
    def trial_seed(self) -> int:
        return trial_seed(self.seed, self.trial)

    def to_dict(self) -> dict[str, Any]:
        # the model as its string, as records and trajectories keep it (every other field is plain data)
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "model": self.model.text}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown trial config field(s) {unknown}")
        return cls(**data)

    def with_(self, **changes: Any) -> TrialConfig:
        """A copy with ``changes``; a planner knob may be given by its name (``with_(num_drafts=5)``)."""
        knobs = {name: changes.pop(name) for name in list(changes) if name in _KNOBS}
        if knobs:
            changes["knobs"] = {**changes.get("knobs", self.knobs), **knobs}
        return replace(self, **changes)

    def knob(self, name: str) -> Any:
        """The value of the planner knob ``name``: as set, else its declared default."""
        if name not in _KNOBS:
            raise KeyError(f"unknown planner knob {name!r}")
        return self.knobs.get(name, _KNOBS[name].default)

    def planner_knobs(self) -> dict[str, Any]:
        """The running planner's knobs and their values (set or default)."""
        names = PLANNER_KNOBS.get(self.planner)
        if names is None:
            raise ValueError(f"planner {self.planner!r} has not declared its knobs: it is not registered "
                             f"(mltb_core.planners registers the built-ins and the mltb.planners entry points)")
        return {name: self.knob(name) for name in names}

    def config_hash(self) -> str:
        """Hash of what all trials of a configuration share (not planner/model/trial, nor the execution
        knobs declared ``hashed=False``), with the running planner's own knobs only: a knob added to one
        planner leaves every other planner's hash (its ``--resume``, its baselines) unchanged."""
        data = {k: v for k, v in self.to_dict().items()
                if k not in _UNHASHED and not (k in _HASHED_WHEN_SET and v == _DEFAULTS[k])}
        own = self.planner_knobs()
        if own:
            data["knobs"] = own
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def _trial_settings() -> tuple[Setting, ...]:
    out = []
    for f in fields(TrialConfig):
        meta = f.metadata.get(SETTING_META)
        if meta is None:
            continue
        meta = dict(meta)
        name = meta.pop("name") or f.name
        out.append(Setting(name=name, default=f.default, field=f.name, **meta))
    return tuple(out)


# Case identity (set per case, never hashed) and the execution knobs declared hashed=False.
_UNHASHED = frozenset({"planner", "model", "trial", "knobs"} | {f.name for f in fields(TrialConfig)
                                                       if f.metadata.get(HASHED_META) is False})
_HASHED_WHEN_SET = frozenset(f.name for f in fields(TrialConfig) if f.metadata.get(HASHED_META) == HASHED_WHEN_SET)
_DEFAULTS = {f.name: f.default for f in fields(TrialConfig)}
TRIAL_SETTINGS: tuple[Setting, ...] = _trial_settings()

# Gate presets (``--gate-preset NAME``): run options a preset fills in where the user set none (command line,
# environment and ini still win, so ``--planner=react`` narrows a preset to the planner that changed). Values are
# typed as on the command line and checked by each setting's own parser. "ci" fits a 2-core CI job: the
# synthetic policy, one task per kind (binary, regression, multiclass), every planner at one matched LLM-call
# budget, a fixed seed so a baseline and its comparison pair trial by trial. docs/gating.md.
GATE_PRESETS: dict[str, dict[str, str]] = {
    "ci": {"model": "sim", "planner": "all",
           "task": "spaceship-titanic,playground-series-s3e1,costa-rican-household-poverty-prediction",
           "trials": "4", "seed": "0", "max_llm_calls": str(MATCHED_LLM_CALLS)},
}
# The share of a planner's baseline level (valid submissions, median score) over its synthetic-policy cells whose
# loss on the paired seeds is a REGRESSION at any n (--gate-lost-share; mltb_core.analysis.compare._behaviour).
GATE_LOST_SHARE = 0.5

# Session-level settings: how a run is organised, not what a trial does (never hashed).
SESSION_SETTINGS: tuple[Setting, ...] = (
    Setting("planner", "planner(s): comma list of registered planners, or 'all'", default="all",
            front_ends=PYTEST_ONLY, listing=lambda: list(PLANNER_KNOBS)),   # every planner declares its knobs
    # the built-in backends' forms (a plug-in's are listed by `mltb run --help`, which loads the plug-ins)
    Setting("model", "model(s), comma list: " + ", ".join(builtin_model_forms()),
            default=DEFAULT_MODEL, front_ends=PYTEST_ONLY),
    Setting("task", "task slug(s), comma list", front_ends=PYTEST_ONLY, unset_text="every offline task"),
    # mltb's subcommands share their own repeatable --tasks-dir (same spelling, a list)
    Setting("tasks_dir", "extra directories of task specs (an os.pathsep list, like MLTB_TASKS_DIR)",
            front_ends=PYTEST_ONLY, path=PATH_LIST),
    Setting("trials", "trials per (task, planner, model)", default=1, range=Range(int, 1, MAX_TRIAL + 1),
            front_ends=PYTEST_ONLY),
    Setting("out", "run directory (with --resume: the newest one under mltb-runs)",
            flag_name="--mltb-out", unset_text="mltb-runs/<timestamp>", path=PATH),
    Setting("run_max_cost", "dollars for the whole run: no new trial starts after it is spent",
            range=_POSITIVE, front_ends=PYTEST_ONLY, unset_text=_UNLIMITED),
    Setting("run_max_seconds", "wall seconds for the whole run: no new trial starts after",
            range=_POSITIVE, front_ends=PYTEST_ONLY, unset_text=_UNLIMITED),
    Setting("infra_retries", "retries of a trial that hit an infrastructure error", default=1,
            range=_AT_LEAST_0, front_ends=PYTEST_ONLY),
    Setting("keep_work", "keep each trial's work directory (sandbox, agent data, graded submission) after its "
                         "record is written; without it only an infrastructure error's is kept",
            default=False, kind=FLAG),
    Setting("resume", "skip trials whose record already exists for the same configuration", default=False,
            kind=FLAG, front_ends=PYTEST_ONLY),
    Setting("report", "at the end, write the run's report (as `mltb report RUN_DIR`) into RUN_DIR/report/; a "
                      "conftest changes its sections with the pytest_mltb_report_sections hook",
            default=False, kind=FLAG, front_ends=PYTEST_ONLY, flag_name="--mltb-report"),
    Setting("gate_preset", "fill in the options of a gate run sized for CI (those not given): "
                           + "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in preset.items())
                                       for name, preset in GATE_PRESETS.items()),
            choices=tuple(GATE_PRESETS), front_ends=PYTEST_ONLY),
    Setting("save_baseline", "write the run's per-task figures to FILE", front_ends=PYTEST_ONLY, path=PATH),
    Setting("compare", "compare the run with a baseline FILE", front_ends=PYTEST_ONLY, path=PATH),
    Setting("fail_on_regression", "fail on a drop beyond noise, e.g. 'consistency:-0.05,percentile:-2' "
                                  "(needs --compare)", front_ends=PYTEST_ONLY),
    # docs/gating.md: a synthetic-policy cell is deterministic per seed, so what its paired trials show is a fact
    Setting("gate_lost_share", "with --compare, a planner whose paired synthetic-policy trials over the tasks keep "
                               "at most (1 - this share) of the baseline's valid submissions, or of its median "
                               "percentile or normalized score, is a REGRESSION at any n (a behaviour check for "
                               "the seeds run; a cell regresses when it keeps none)",
            default=GATE_LOST_SHARE, range=Range(float, 0, 1, low_open=True), front_ends=PYTEST_ONLY),
)

# Every setting, session ones first, then the planners' knobs as planners register (declare_knobs); names
# are unique (plugins.claim refuses a knob that takes a setting's name).
SETTINGS: list[Setting] = [*SESSION_SETTINGS, *TRIAL_SETTINGS]
SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
# Each setting's MLTB_<NAME> is declared with the other variables mltb reads (environment.read refuses others).
environment.declare_settings(environment.EnvironmentVariable(s.env, s.help, s.default_text, (__name__,), path=s.path)
                             for s in SETTINGS)

# Derived views for callers that check one number (FIELD_RANGES is keyed by TrialConfig field).
FIELD_RANGES: dict[str, Range] = {s.field: s.range for s in TRIAL_SETTINGS if s.range is not None}
RUN_RANGES: dict[str, Range] = {s.name: s.range for s in SESSION_SETTINGS if s.range is not None}
# Setting name -> TrialConfig field, where the two differ.
OPTION_FIELDS: dict[str, str] = {s.name: s.field for s in TRIAL_SETTINGS if s.field != s.name}


def knob(name: str, default: Any, help: str, *, range: Range | None = None, choices: tuple[str, ...] | None = None,
         switch: bool = False, unset_text: str = "none") -> Setting:
    """A planner's own setting, declared next to its class (``knobs = (knob(...), ...)`` on a Planner
    subclass). Once the planner is registered it is a setting of both front ends like any other (flag,
    ini key, ``MLTB_<NAME>``, range, help naming its planners) and reaches ``TrialConfig.knob(name)``;
    it enters the config hash of its own planners only."""
    return Setting(name=name, help=help, default=default, range=range, choices=choices,
                   kind=SWITCH if switch else VALUE, unset_text=unset_text, knob=True)


# Declared knobs (as their planners' help shows them), their origins, and each planner's knob names.
_KNOBS: dict[str, Setting] = {}
_DECLARED: dict[str, Setting] = {s.name: s for s in SETTINGS}   # every name as first declared
_ORIGINS: dict[str, str] = {s.name: "the settings table (mltb_core.config)" for s in SETTINGS}
PLANNER_KNOBS: dict[str, tuple[str, ...]] = {}


def declare_knobs(planner: str, knobs: Iterable[tuple[Setting, str]]) -> None:
    """The planner registry declares each planner's knobs (``(knob, origin)``) here, so both front ends
    offer them and ``config_hash`` knows them. A knob another planner declared elsewhere, or that takes
    a setting's name, is refused naming both origins; the same declaration (inherited) is shared."""
    from mltb_core.plugins import claim

    names, staged, origins = [], dict(_DECLARED), dict(_ORIGINS)   # all or nothing
    for declared, origin in knobs:
        if not declared.knob:
            raise TypeError(f"{origin}: a planner knob is declared with config.knob(...), got {declared!r}")
        claim(staged, "setting", declared.name, declared, origin=origin, origins=origins,
              hint="a planner knob needs a name of its own")
        names.append(declared.name)
    _DECLARED.update(staged)
    _ORIGINS.update(origins)
    PLANNER_KNOBS[planner] = tuple(names)
    for name in names:
        users = tuple(p for p, own in PLANNER_KNOBS.items() if name in own)
        setting = replace(_DECLARED[name], planners=users)
        if name in SETTINGS_BY_NAME:
            SETTINGS[SETTINGS.index(SETTINGS_BY_NAME[name])] = setting
        else:
            SETTINGS.append(setting)
        SETTINGS_BY_NAME[name] = _KNOBS[name] = setting
    environment.declare_settings(environment.EnvironmentVariable(_KNOBS[n].env, _KNOBS[n].help, _KNOBS[n].default_text,
                                                                 (__name__,)) for n in names)


def settings_for(front_end: str) -> tuple[Setting, ...]:
    """The settings one front end ("pytest" or "run") offers, in table order."""
    return tuple(s for s in SETTINGS if front_end in s.front_ends)


def add_settings(add_option: Callable[..., Any], settings: Iterable[Setting], dest_prefix: str = "mltb_",
                 ini: bool = True) -> None:
    """Register ``settings`` with an ``add_option(*flags, **kwargs)`` callable: pytest's
    ``parser.getgroup(...).addoption`` and argparse's ``add_argument`` take the same arguments.

    Every parsed default is None, so :func:`resolve_settings` can tell a flag given on the command
    line from one left to the environment, the ini file or the table's default. ``ini=False``: the
    front end reads no ini file (``mltb run``), so the help does not mention one.
    """
    for s in settings:
        dest = dest_prefix + s.name
        if s.kind == SWITCH:
            add_option(s.flag, dest=dest, action="store_const", const=True, default=None, help=s.help_text(ini))
            add_option(s.no_flag, dest=dest, action="store_const", const=False, default=None,
                       help=f"turn {s.flag[2:]} off")
        elif s.kind == FLAG:
            add_option(s.flag, dest=dest, action="store_const", const=True, default=None, help=s.help_text(ini))
        else:
            add_option(s.flag, dest=dest, default=None, metavar=s.name.upper(), help=s.help_text(ini))


def read_environment(settings: Iterable[Setting], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``MLTB_*`` variables of ``settings`` that are set (and not empty), read through
    :func:`mltb_core.environment.read` (``environ``: a mapping to read instead, for callers that have one)."""
    get = environment.read if environ is None else environ.get
    values = {s.name: get(s.env) for s in settings}
    return {name: raw for name, raw in values.items() if raw is not None and raw != ""}


IMPLICIT_SOURCES = ("default", "matched")    # values the user did not give


def _compares_planners(values: Mapping[str, Any]) -> bool:
    planners = values.get("planner")
    return isinstance(planners, str) and (planners.strip() == "all" or "," in planners)


def resolve_settings(settings: Iterable[Setting], cli: Mapping[str, Any], env: Mapping[str, str],
                     ini: Callable[[str], Any] | None = None,
                     ini_dir: str | Path | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Values and their sources ("cli", "env", "ini", "default") by precedence cli > env > ini > default.

    ``cli`` maps setting names to what the parser stored (None: not given); ``env`` is
    :func:`read_environment`'s result; ``ini(key)`` returns an ini value or None. A bad value raises
    :class:`SettingValueError` naming the flag, variable or key it came from. Path settings come back
    absolute: an ini file's relative to ``ini_dir`` (its directory, as pytest reads its own paths), the
    others relative to the working directory.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for s in settings:
        candidates = (("cli", cli.get(s.name), s.flag, None), ("env", env.get(s.name), s.env, None),
                      ("ini", ini(s.ini) if ini else None, s.ini, ini_dir))
        for source, raw, where, base in candidates:
            if raw is not None and not (isinstance(raw, (str, list)) and not raw):
                values[s.name], sources[s.name] = s.parse(raw, where, base), source
                break
        else:
            values[s.name], sources[s.name] = s.default, "default"
    _apply_preset(values, sources)
    if _compares_planners(values) and sources.get("max_llm_calls") == "default":
        # planners compared at the same compute unless the user says otherwise (issue 18): a table of
        # planners at their own budgets compares different amounts of LLM calls
        values["max_llm_calls"], sources["max_llm_calls"] = MATCHED_LLM_CALLS, "matched"
    if values.get("fail_on_regression") and not values.get("compare"):
        raise SettingValueError("--fail-on-regression", "needs --compare FILE")
    return values, sources


def _apply_preset(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Fill in ``--gate-preset``'s options that are still at their default (their source becomes "preset")."""
    name = values.get("gate_preset")
    if not name:
        return
    for option, raw in GATE_PRESETS[name].items():
        if sources.get(option, "default") == "default" and option in values:
            values[option], sources[option] = SETTINGS_BY_NAME[option].parse(raw, f"--gate-preset {name}"), "preset"


def trial_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """TrialConfig keyword arguments from resolved setting values (unset ones keep the field default;
    planner knobs go into ``knobs``)."""
    out = {s.field: values[s.name] for s in TRIAL_SETTINGS if values.get(s.name) is not None}
    knobs = {name: values[name] for name in _KNOBS if values.get(name) is not None}
    return {**out, "knobs": knobs} if knobs else out


def option_range(option: str) -> Range | None:
    """The range of a setting (by name) or TrialConfig field (None: not a numeric option)."""
    setting = SETTINGS_BY_NAME.get(option)
    if setting is not None:
        return setting.range
    return FIELD_RANGES.get(option)


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


class EnvironmentValueError(ValueError):
    """An MLTB_* environment variable has a value its reader cannot parse."""


def _check_data_source() -> None:
    from mltb_core.bench.datasources import DATA_SOURCES, SOURCE_ENV

    raw = environment.read(SOURCE_ENV)
    if raw and raw not in DATA_SOURCES:
        raise ValueError(f"{SOURCE_ENV}={raw!r}: expected one of {', '.join(DATA_SOURCES)}")


# Each reader of an MLTB_* variable with a format: (its module, the check there). A check, and the import of its
# module, runs only when a variable that module reads (ENVIRONMENT's used_by) is set: mltb_core.llm.local imports
# the toolkit (pandas, scikit-learn), which `mltb --version`, `--help`, `tasks` and `models` must not pay.
_ENVIRONMENT_CHECKS = (("mltb_core.toolkit.limits", "tool_memory_limit"), ("mltb_core.toolkit.limits", "sandbox_quota"),
                       ("mltb_core.llm.openai_backend", "check_retry_env"),
                       ("mltb_core.llm.openai_backend", "check_server_env"),
                       ("mltb_core.llm.local.backend", "draft_tokens_override"),
                       ("mltb_core.llm.local.backend", "fast_forward_setting"),
                       ("mltb_core.llm.local.backend", "prefix_store_bytes"), (__name__, "_check_data_source"))


def _environment_checks() -> list:
    """The checks of the variables that are set, each called once: ValueError naming variable and value."""
    import importlib

    readers = {module for variable in ENVIRONMENT if not variable.third_party
               and environment.read(variable.name) is not None for module in variable.used_by}
    return [getattr(importlib.import_module(module), name) for module, name in _ENVIRONMENT_CHECKS
            if module in readers]


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
    # every setting's MLTB_* variable too, whichever front end (or subcommand) is running
    for setting in SETTINGS:
        raw = environment.read(setting.env)
        if raw:
            try:
                setting.parse(raw, setting.env)
            except SettingValueError as exc:
                raise EnvironmentValueError(f"bad value for {setting.env}={raw!r}: {exc.detail}") from None


def _optional_fields() -> frozenset[str]:
    """TrialConfig fields whose annotation allows None (no limit / the planner's default)."""
    return frozenset(f.name for f in fields(TrialConfig) if "None" in str(f.type))


def trial_seed(base_seed: int, trial: int) -> int:
    """Independent, reproducible seed for trial ``trial`` of a run seeded ``base_seed``."""
    digest = hashlib.sha256(f"{base_seed}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


# ---- case identity --------------------------------------------------------------------------------
# One trial is a case: (task, planner, model, trial). Its id names the pytest item, the trajectory, the
# sandbox and the submission file, the report page, and matches records to cases for --resume.
_CASE_ID = re.compile(r"[^\[\]\s/]+-t(\d{2,})")


def case_id(task: str, planner: str, model: ModelRef | str, trial: int) -> str:
    """The id of a case: ``spaceship-titanic-react-openai-gpt-4o-t03``. ``model`` is a parsed ModelRef
    (front ends) or a model string read back from a record (see :func:`mltb_core.llm.backends.model_id`)."""
    return f"{task}-{planner}-{model_id(model)}-t{trial:02d}"


def is_case_id(text: str) -> bool:
    """Whether ``text`` has the shape :func:`case_id` gives (a cheap test before a plan is built)."""
    return _CASE_ID.fullmatch(text) is not None
