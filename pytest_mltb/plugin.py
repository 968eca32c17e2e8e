"""pytest plugin entry point (``pytest11: mltb``): hooks and fixtures only. The work is in options.py
(settings), collection.py (cases, ids, markers), running.py (one trial on a worker), transport.py
(records worker → controller), session.py (the controller) with bookkeeping.py (run directory,
resume), gating.py (baseline, regression exit) and servers.py (what the plan's backends need per worker and hold
for the session, e.g. model servers).
Extension hooks for conftest files and plugins: hookspec.py.

Process roles: without xdist one process is both controller and worker. With xdist the controller
(no ``config.workerinput``) owns the run directory, results.jsonl, the summary and the exit status;
workers collect and run items and send records back inside their reports.

This module is imported by every pytest run in the environment: it imports no mltb_core module
beyond what the options need; the rest is imported inside the hooks that run when benchmark items
are collected or an mltb option is given.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .collection import CASE_FIXTURE
from .options import add_options, add_planner_options, resolve_settings

if TYPE_CHECKING:
    from .collection import Case
    from .running import WorkerContext
    from .servers import WorkerCap  # noqa: F401  (named by WORKER_CAP below)
    from .session import Controller

CONTROLLER = pytest.StashKey["Controller"]()
CONTEXT = pytest.StashKey["WorkerContext"]()
WORKER_CAP = pytest.StashKey["WorkerCap"]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """``--planner`` and the planners' knobs, once the command line can say whether they are needed."""
    add_planner_options(parser, list(args), _ini_keys(early_config))


def _ini_keys(config: pytest.Config) -> list[str]:
    """The keys the ini file sets. pytest 9.2 deprecates ``config.inicfg`` (a warning on every run) and
    offers no public listing; its ``_inicfg`` holds the same mapping (before 9.2: ``inicfg`` itself)."""
    held = config.__dict__.get("_inicfg")
    return list(held if held is not None else config.inicfg)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from .running import WorkerContext

    settings = resolve_settings(config)
    if _is_worker(config):
        workerinput = config.workerinput  # type: ignore[attr-defined]  # set by xdist on its workers
        run_dir = Path(workerinput["mltb_run_dir"])
        skip = set(workerinput.get("mltb_skip", ()))
    else:
        from .progress import PLUGIN_NAME as PROGRESS_PLUGIN, ProgressReporter
        from .session import Controller

        mltb_run = _is_mltb_run(config, settings)
        controller = Controller(config, settings, mltb_run)   # its model preflight first: the file is on disk
        config.stash[CONTROLLER] = controller   # from here on, pytest_unconfigure frees its run directory
        if mltb_run:
            _size_workers(config, settings)
        config.pluginmanager.register(ControllerHooks(controller), "mltb-controller")
        config.pluginmanager.register(ProgressReporter(config, benchmark=lambda: controller.active), PROGRESS_PLUGIN)
        run_dir, skip = controller.run_dir, set(controller.skip)
    config.stash[CONTEXT] = WorkerContext(config, settings, run_dir, skip)


def _is_mltb_run(config: pytest.Config, settings) -> bool:
    """An mltb option given, or the benchmark suite named: the plugin leaves other test suites in the
    environment alone."""
    from .servers import names_the_suite

    return settings.engaged or names_the_suite(list(config.args), Path(config.invocation_params.dir),
                                               bool(config.option.pyargs))


def _size_workers(config: pytest.Config, settings) -> None:
    """Cap ``-n`` to the workers the machine holds for what the plan's backends need per worker (e.g. a
    llama.cpp server each: servers.worker_cap), before xdist starts its workers."""
    from .servers import cap_xdist_workers

    cap = cap_xdist_workers(config, settings.model_refs())
    if cap is not None:
        config.stash[WORKER_CAP] = cap


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist: hand every worker the controller's run directory and resume set (no shared state needed)."""
    controller = node.config.stash[CONTROLLER]
    node.workerinput["mltb_run_dir"] = str(controller.run_dir)
    node.workerinput["mltb_skip"] = sorted(controller.skip)


def pytest_report_header(config: pytest.Config) -> list[str]:
    controller = config.stash.get(CONTROLLER, None)
    return controller.header_lines() if controller else []


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    controller = session.config.stash.get(CONTROLLER, None)
    if controller is not None:
        controller.session = session
        controller.validate()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if CASE_FIXTURE not in metafunc.fixturenames:
        return
    plan = metafunc.config.stash[CONTEXT].plan()
    from .collection import case_marker_names

    metafunc.parametrize(CASE_FIXTURE, [
        pytest.param(case, id=case.id, marks=[getattr(pytest.mark, name) for name in case_marker_names(case)])
        for case in plan.cases])


def _case_of(item: pytest.Item) -> Case | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(CASE_FIXTURE) if callspec is not None else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--resume: deselect cases already recorded for this configuration."""
    skip = config.stash[CONTEXT].skip
    if not skip:
        return
    keep: list[pytest.Item] = []
    done: list[pytest.Item] = []
    for item in items:
        case = _case_of(item)
        (done if case is not None and getattr(case, "id", None) in skip else keep).append(item)
    if done:
        config.hook.pytest_deselected(items=done)
        items[:] = keep


@pytest.hookimpl(trylast=True)
def pytest_mltb_run_trial(case, task, config, out_dir, split):
    """The default trial: ``mltb_core.runner.trial.run_trial`` (conftests may wrap or replace it)."""
    from mltb_core.runner.trial import run_trial

    return run_trial(task, config, out_dir, split=split)


class ControllerHooks:
    """Hooks that only the controller implements, registered on it alone (workers never record)."""

    def __init__(self, controller: Controller):
        self.controller = controller

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.controller.handle_report(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The worker/server line at session start, written even under -q (which hides the header)."""
        cap = session.config.stash.get(WORKER_CAP, None)
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        if cap is not None and terminal is not None:
            terminal.write_line(cap.line())

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        self.controller.record_crash(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self.controller.note_collected(ids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.controller.note_collected([item.nodeid for item in session.items if _case_of(item) is not None])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    controller = session.config.stash.get(CONTROLLER, None)
    if controller is not None:
        controller.session = session


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    controller = session.config.stash.get(CONTROLLER, None)
    if controller is not None:
        try:
            controller.finish(session)
        finally:
            controller.servers.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    controller = config.stash.get(CONTROLLER, None)
    if controller is not None:
        controller.book.release()   # the run directory is free for the next session


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    controller = config.stash.get(CONTROLLER, None)
    if controller is not None and controller.active and not config.option.collectonly:
        controller.summary(terminalreporter)


# ---- fixtures -------------------------------------------------------------------------------------------
@pytest.fixture
def mltb_context(request: pytest.FixtureRequest) -> WorkerContext:
    """Settings and run directory of this run."""
    return request.config.stash[CONTEXT]


@pytest.fixture
def mltb_task(mltb_case: Case, mltb_context: WorkerContext):
    """The case's Task."""
    from mltb_core.bench.tasks import get_task

    settings = mltb_context.settings
    return get_task(mltb_case.task, settings.task_dirs)


@pytest.fixture
def mltb_split(mltb_task, mltb_context: WorkerContext):
    """The benchmark split, prepared once per machine (file-locked across xdist workers)."""
    from mltb_core.bench.splits import prepare_split

    return prepare_split(mltb_task, mltb_context.settings.seed)


@pytest.fixture
def mltb_record(request: pytest.FixtureRequest, mltb_case: Case, mltb_task, mltb_split,
                mltb_context: WorkerContext):
    """Run the trial (in setup, so an infrastructure error makes the item ERROR, not fail) and attach
    its record and trajectory to the report."""
    from mltb_core.analysis.records import Outcome

    from .running import InfraErrorOutcome, failure_message, run_case
    from .transport import attach

    from .progress import PLUGIN_NAME as PROGRESS_PLUGIN

    reporter = request.config.pluginmanager.get_plugin(PROGRESS_PLUGIN)   # None in an xdist worker
    with reporter.trial(mltb_case.id) if reporter is not None else contextlib.nullcontext():
        record = run_case(request.config, mltb_case, mltb_context.plan().config(mltb_case), mltb_task,
                          mltb_context.run_dir, mltb_context.settings.infra_retries, mltb_split)
    attach(request.node, record)
    if record.outcome == Outcome.INFRA_ERROR:
        raise InfraErrorOutcome(failure_message(record))
    return record


@pytest.fixture
def mltb_check():
    """``mltb_check(record)`` fails the test with a few-line message unless the submission is valid."""
    from .running import failure_message

    def check(record) -> None:
        if not record.valid:
            pytest.fail(failure_message(record), pytrace=False)
    return check
