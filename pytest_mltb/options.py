"""The ``mltb`` option group: each option is a command-line flag, an ini key and an environment variable.

Precedence: command line > environment (``MLTB_<NAME>``) > ini (``mltb_<name>`` in pyproject.toml /
pytest.ini) > default. :func:`resolve_settings` turns them into one validated :class:`Settings`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from mltb_core.config import EnvironmentValueError, OptionValueError, check_environment, option_range, parse_option
from mltb_core.bench.tasks import DEFAULT_BOARD, check_board
from mltb_core.toolkit.registry import check_toolset

__all__ = ["OPTIONS", "Option", "Settings", "add_options", "resolve_settings", "validate_model_name",
           "DEFAULT_MODEL", "ALL_PLANNERS"]

DEFAULT_MODEL = "local"
ALL_PLANNERS = "all"
RUNS_DIR = "mltb-runs"


def _bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


@dataclass(frozen=True)
class Option:
    """One setting. ``switch`` options are tri-state booleans with a ``--no-`` twin (None = planner default)."""
    name: str                        # dest; flag --name-with-dashes, ini mltb_name, env MLTB_NAME
    help: str
    convert: Callable[[str], Any] = str   # numeric options: parsed and range-checked by mltb_core.config
    default: Any = None
    switch: bool = False             # --x / --no-x
    flag: bool = False               # --x only (store_true)
    flag_name: str | None = None     # overrides the flag spelling

    @property
    def flag_text(self) -> str:
        return self.flag_name or "--" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "mltb_" + self.name

    @property
    def env(self) -> str:
        return "MLTB_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("planner", "planner(s): comma list of react, lats, mcts_outcome, mcts_shaped, hierarchical_mcts, or "
                      "'all'", default=ALL_PLANNERS),
    Option("model", "model(s), comma list: local, local:/x.gguf, openai:<model>, sim, sim:<skill>",
           default=DEFAULT_MODEL),
    Option("task", "task slug(s), comma list (default: every task whose data is available offline)"),
    Option("tasks_dir", "extra directory of task specs"),
    Option("trials", "trials per (task, planner, model)", default=1),
    Option("seed", "base seed of the run (each trial derives its own)", default=0),
    Option("max_iterations", "search iterations / ReAct steps per trial"),
    Option("max_depth", "max tool calls on one path"),
    Option("expansion_k", "candidates proposed per expansion"),
    Option("max_llm_calls", "LLM calls per trial"),
    Option("max_tokens", "tokens per trial"),
    Option("max_cost", "dollars per trial"),
    Option("max_seconds", "wall seconds per trial"),
    Option("run_max_cost", "dollars for the whole run: no new trial starts after it is spent"),
    Option("run_max_seconds", "wall seconds for the whole run: no new trial starts after"),
    Option("toolset", "tools offered to the model: 'paper' (the paper's Table 9 set, default) or 'extended' "
                      "(adds helpers such as create_submission)", check_toolset),
    Option("reward_shaping", "shaped rewards on/off (default: the planner's own)", _bool, switch=True),
    Option("feedback", "stage feedback to the model on/off", _bool, switch=True),
    Option("tool_masking", "tool masking on/off (default: the planner's own)", _bool, switch=True),
    Option("decomposition", "subtask decomposition on/off (default: the planner's own)", _bool, switch=True),
    Option("constrained_calls", "state-aware constrained calls on/off (default: on for local models)", _bool,
           switch=True),
    Option("llm_cache", "on-disk LLM response cache on/off", _bool, True, switch=True),
    Option("out", "run directory (default mltb-runs/<timestamp>, or the newest one with --resume)",
           flag_name="--mltb-out"),
    Option("resume", "skip trials whose record already exists for the same configuration", _bool, False,
           flag=True),
    Option("save_baseline", "write the run's per-task figures to FILE"),
    Option("compare", "compare the run with a baseline FILE"),
    Option("fail_on_regression", "fail (exit 1) on a drop beyond noise, e.g. 'consistency:-0.05,percentile:-2'"),
    Option("board", "Kaggle leaderboard for percentiles and medals: public (as in the paper) or private",
           check_board, DEFAULT_BOARD),
    Option("infra_retries", "retries of a trial that hit an infrastructure error", default=1),
)


def add_options(parser: pytest.Parser) -> None:
    """Register every option in the ``mltb`` group and as an ini key."""
    group = parser.getgroup("mltb", "ML-Tool-Bench: benchmark LLM tool-planning agents")
    for opt in OPTIONS:
        allowed = option_range(opt.name)
        help_text = f"{opt.help}{f' ({allowed.describe()})' if allowed else ''} [env {opt.env}, ini {opt.ini}]"
        if opt.switch:
            group.addoption(opt.flag_text, dest="mltb_" + opt.name, action="store_const", const=True,
                            default=None, help=help_text)
            group.addoption("--no-" + opt.flag_text[2:], dest="mltb_" + opt.name, action="store_const",
                            const=False, default=None, help=f"turn {opt.flag_text[2:]} off")
        elif opt.flag:
            group.addoption(opt.flag_text, dest="mltb_" + opt.name, action="store_const", const=True,
                            default=None, help=help_text)
        else:
            group.addoption(opt.flag_text, dest="mltb_" + opt.name, default=None, metavar=opt.name.upper(),
                            help=help_text)
        parser.addini(opt.ini, help=opt.help, default=None)


def _raw_value(config: pytest.Config, opt: Option) -> tuple[Any, str]:
    """The option's raw value and where it came from ("cli", "env", "ini" or "default")."""
    value = config.getoption("mltb_" + opt.name, None)
    if value is not None:
        return value, "cli"
    if os.environ.get(opt.env, "") != "":
        return os.environ[opt.env], "env"
    ini = config.getini(opt.ini)
    if ini not in (None, "", []):
        return ini, "ini"
    return opt.default, "default"


def _split(text: str | None) -> list[str]:
    if text is None:
        return []
    seen: list[str] = []
    for part in str(text).split(","):
        part = part.strip()
        if part and part not in seen:
            seen.append(part)
    return seen


@dataclass
class Settings:
    """Resolved options (raw, before name validation, which needs the core registries)."""
    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def explicit(self, name: str) -> bool:
        return self.sources.get(name, "default") != "default"

    @property
    def planners(self) -> list[str]:
        return _split(self.values["planner"])

    @property
    def models(self) -> list[str]:
        return _split(self.values["model"])

    @property
    def tasks(self) -> list[str]:
        return _split(self.values["task"])


def resolve_settings(config: pytest.Config) -> Settings:
    """Read every option (cli > env > ini > default) and convert it; bad values (and MLTB_* environment
    variables that do not parse) are usage errors."""
    try:
        check_environment()
    except EnvironmentValueError as exc:
        raise pytest.UsageError(f"mltb: {exc}") from None
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        raw, source = _raw_value(config, opt)
        if raw is not None and source != "default" and not isinstance(raw, bool):
            where = {"cli": opt.flag_text, "env": opt.env, "ini": opt.ini}[source]
            try:
                raw = parse_option(opt.name, raw, where) if option_range(opt.name) else opt.convert(raw)
            except OptionValueError as exc:
                raise pytest.UsageError(f"mltb: bad value for {where}: {exc.detail}") from None
            except ValueError as exc:
                raise pytest.UsageError(f"mltb: bad value for {where}: {exc}") from None
        values[opt.name] = raw
        sources[opt.name] = source
    if values["fail_on_regression"] and not values["compare"]:
        raise pytest.UsageError("mltb: --fail-on-regression needs --compare FILE")
    return Settings(values, sources)


def default_run_dir(rootpath: Path, resume: bool) -> Path:
    """mltb-runs/<timestamp> under the rootdir; with --resume, the newest existing run there."""
    runs = rootpath / RUNS_DIR
    if resume and runs.is_dir():
        existing = sorted(p for p in runs.iterdir() if p.is_dir())
        if existing:
            return existing[-1]
    return runs / time.strftime("%Y%m%d-%H%M%S")


def validate_model_name(model: str) -> str | None:
    """Why ``model`` is not a valid model string, or None when it is (checked without building a backend)."""
    kind, sep, arg = model.partition(":")
    if kind == "local":
        return None
    if kind == "openai":
        return None if arg.strip() else "'openai:' needs a model id, e.g. openai:gpt-4o"
    if kind == "sim":
        if not sep:
            return None
        try:
            skill = float(arg)
        except ValueError:
            return f"sim skill {arg!r} is not a number"
        return None if 0.0 <= skill <= 1.0 else f"sim skill {skill} is outside [0, 1]"
    return f"no backend called {kind!r}"
