"""The ``mltb`` option group, generated from the one settings table (``mltb_core.config.SETTINGS``):
each setting is a command-line flag, an ini key and an environment variable.

Precedence: command line > environment (``MLTB_<NAME>``) > ini (``mltb_<name>`` in pyproject.toml /
pytest.ini) > default. :func:`resolve_settings` turns them into one validated :class:`Settings`.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mltb_core import environment
from mltb_core.config import (SETTINGS_BY_NAME, EnvironmentValueError, Setting, SettingValueError, add_settings,
                              check_environment, read_environment, settings_for)
from mltb_core.config import RUNS_DIR
from mltb_core.config import IMPLICIT_SOURCES
from mltb_core.config import resolve_settings as resolve

from mltb_core.llm.backends import DEFAULT_MODEL

__all__ = ["pytest_options", "Settings", "add_options", "add_planner_options", "resolve_settings", "DEFAULT_MODEL",
           "ALL_PLANNERS"]

ALL_PLANNERS = SETTINGS_BY_NAME["planner"].default   # "all": every registered planner
GROUP = "mltb"
# Settings read from the planner registry (its names, the planners' knobs): registered once it may be read.
_FROM_REGISTRY = ("planner",)


def pytest_options() -> tuple[Setting, ...]:
    """The pytest front end of the one settings table (mltb_core.config.SETTINGS), with the knobs of the
    planners registered so far."""
    return settings_for("pytest")


def _add(parser: pytest.Parser, settings: list[Setting]) -> None:
    group = parser.getgroup(GROUP, "ML-Tool-Bench: benchmark LLM tool-planning agents")
    add_settings(group.addoption, settings)
    for opt in settings:
        parser.addini(opt.ini, help=opt.help, default=None)


def add_options(parser: pytest.Parser) -> None:
    """Register every pytest setting in the ``mltb`` group, and its ini key, but those that read the
    planner registry: :func:`add_planner_options` adds them."""
    _add(parser, [s for s in pytest_options() if not s.knob and s.name not in _FROM_REGISTRY])


def add_planner_options(parser: pytest.Parser, args: list[str], ini_keys: list[str]) -> None:
    """Add ``--planner`` and the planners' knobs (pytest_load_initial_conftests, before the command line
    is parsed for good). The knobs are declared on the planner classes, and importing the planners loads
    pandas and scikit-learn, which a pytest run of another project must not pay: they are read only when
    this run may set one (--help, a flag not known yet, an ``mltb_*`` ini key, an undeclared ``MLTB_*``
    variable) or when they are already imported."""
    import sys

    wanted = ("-h" in args or "--help" in args or any(key.startswith("mltb_") for key in ini_keys)
              or environment.undeclared("MLTB_")
              or any(str(a).startswith("--") for a in parser.parse_known_and_unknown_args(args)[1]))
    if wanted or "mltb_core.planners" in sys.modules:
        from mltb_core.plugins import RegistryError

        try:
            from mltb_core.planners import planner_names

            planner_names()   # reads the mltb.planners entry points: their knobs join the table
        except RegistryError as exc:
            raise pytest.UsageError(f"mltb: {exc}") from None
    registered = {opt.dest for opt in parser.getgroup(GROUP).options}
    _add(parser, [s for s in pytest_options() if "mltb_" + s.name not in registered])


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
    _model_refs: list | None = field(default=None, repr=False, compare=False)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def explicit(self, name: str) -> bool:
        return self.sources.get(name, "default") not in IMPLICIT_SOURCES

    @property
    def engaged(self) -> bool:
        """Whether any mltb option was given (command line, environment or ini): this is an mltb run."""
        return any(self.explicit(name) for name in self.values)

    @property
    def planners(self) -> list[str]:
        return _split(self.values["planner"])

    @property
    def models(self) -> list[str]:
        return _split(self.values["model"])

    def model_refs(self) -> list:
        """The models parsed once (:class:`mltb_core.llm.backends.ModelRef`), for everything after the
        options; a malformed string is a usage error naming the valid forms."""
        if self._model_refs is None:
            from mltb_core.llm.backends import parse_models
            from mltb_core.llm.base import UnknownModelError

            if not self.models:
                raise pytest.UsageError("mltb: --model is empty")
            try:
                self._model_refs = parse_models(self.models)
            except UnknownModelError as exc:
                raise pytest.UsageError(f"mltb: {exc}") from None
        return self._model_refs

    @property
    def tasks(self) -> list[str]:
        return _split(self.values["task"])

    @property
    def task_dirs(self) -> list[str]:
        """--tasks-dir / MLTB_TASKS_DIR / mltb_tasks_dir: an os.pathsep list of directories, as load_tasks reads it."""
        return [part for part in str(self.values["tasks_dir"] or "").split(os.pathsep) if part.strip()]


def check_trial_environment() -> None:
    """MLTB_* environment variables that do not parse are usage errors. Called when a run uses the
    benchmark (the checks import the data layer: pandas), not in every pytest run of the environment."""
    try:
        check_environment()
    except EnvironmentValueError as exc:
        raise pytest.UsageError(f"mltb: {exc}") from None


def resolve_settings(config: pytest.Config) -> Settings:
    """Read every option (cli > env > ini > default) and convert it; bad values are usage errors (MLTB_*
    variables read by the core: :func:`check_trial_environment`)."""
    unset, options = object(), pytest_options()
    given = {opt.name: config.getoption("mltb_" + opt.name, unset) for opt in options}
    # A setting whose option was not added (the knob of a planner imported later, --planner when the plugin
    # is loaded after the initial conftests) has no flag or ini key: environment or default.
    added = {opt.ini for opt in options if given[opt.name] is not unset}
    try:
        values, sources = resolve(options, {name: None if value is unset else value for name, value in given.items()},
                                  read_environment(options), lambda key: config.getini(key) if key in added else None,
                                  ini_dir=config.inipath.parent if config.inipath else None)
    except SettingValueError as exc:
        raise pytest.UsageError(f"mltb: {exc}") from None
    _check_gate(values)
    return Settings(values, sources)


def _check_gate(values: dict[str, Any]) -> None:
    """Read the regression spec and the baseline now: a bad one is a usage error before anything runs,
    not a traceback at the end of the session."""
    if not (values["compare"] or values["fail_on_regression"]):
        return
    from mltb_core.analysis.compare import load_baseline, parse_regression_spec

    checks = (("--fail-on-regression", values["fail_on_regression"], parse_regression_spec),
              ("--compare", values["compare"], lambda path: load_baseline(Path(path))))
    for flag, value, check in checks:
        if value:
            try:
                check(value)
            except ValueError as exc:
                raise pytest.UsageError(f"mltb: bad value for {flag}: {exc}") from None


def default_run_dir(rootpath: Path, resume: bool) -> Path:
    """mltb-runs/<timestamp> under the rootdir; with --resume, the newest existing run there."""
    runs = rootpath / RUNS_DIR
    if resume and runs.is_dir():
        existing = sorted(p for p in runs.iterdir() if p.is_dir())
        if existing:
            return existing[-1]
    return runs / time.strftime("%Y%m%d-%H%M%S")

