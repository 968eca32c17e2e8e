"""The controller of a run (the only process with xdist's results): it composes the run book
(bookkeeping.py), the regression gate (gating.py) and the local model servers (servers.py), counts
outcomes, enforces run-level budgets and prints the summary.

Nothing heavy happens for a pytest run that never collects a benchmark item: the controller is
*engaged* up front only when an mltb option was given (command line, environment or ini); otherwise
it wakes up when benchmark items are collected.
"""
from __future__ import annotations

import json
import time
from collections.abc import KeysView
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .bookkeeping import RunBook
from .collection import Case, Plan, case_id_of_nodeid, plan_for
from .gating import Gate
from .options import Settings, default_run_dir
from .servers import SessionHolds
from .transport import RECORD_PROPERTY, TRAJECTORY_PROPERTY, decode_trajectory, report_property

if TYPE_CHECKING:
    from mltb_core.analysis.records import TrialRecord

__all__ = ["Controller"]


class Controller:
    """Controller-side state: the run book, the gate, the servers, counters and run budgets."""

    def __init__(self, config: pytest.Config, settings: Settings, mltb_run: bool):
        self.config = config
        self.settings = settings
        out = settings.out   # absolute: path settings are resolved where they are read (mltb_core.config)
        self.run_dir = run_dir = Path(out) if out else default_run_dir(config.rootpath, bool(settings.resume))
        self.book = RunBook(run_dir)
        self.gate = Gate(settings)
        self.servers = SessionHolds()
        self.engaged = settings.engaged
        self.resumed: dict[str, TrialRecord] = {}   # --resume: the records of the cases it skips, by case id
        self.session: pytest.Session | None = None
        self.started = time.monotonic()
        self.spent_usd = 0.0
        self.received = 0
        self.saw_cases = False
        self.models_checked = False
        self.model_notes: list[str] = []
        self.planner_failures = 0
        self.other_failures = 0    # errors (infra included) and failures of anything but a trial
        self.nothing_left = False  # --resume found every selected trial recorded
        self.report_paths: dict[str, Path] = {}   # --mltb-report: what was written
        try:
            self._start(config, settings, mltb_run)
        except BaseException:
            self.book.release()   # a session refused at start-up holds no run directory
            raise

    def _start(self, config: pytest.Config, settings: Settings, mltb_run: bool) -> None:
        if self.engaged:
            # Build the plan now (unknown names are usage errors, and its markers are registered
            # for --markers and --strict-markers), read the results file (a directory or unreadable
            # file is a usage error before anything runs) and, for --resume, what to skip (xdist
            # hands it to the workers).
            plan = self.plan()
            if not config.option.help:
                self.book.claim()   # before anything reads or writes the run directory
            if settings.explicit("task") or settings.explicit("tasks_dir"):
                # the selected tasks' data files and boards, in pytest_configure: before xdist
                # starts its workers, let alone a trial
                from .collection import check_task_inputs, resolve_tasks

                check_task_inputs(resolve_tasks(settings))
            self.book.read_existing()
            if settings.resume:
                self.resumed = self.book.done_records(plan)
        if mltb_run and not (config.option.help or config.option.collectonly):
            # The models' preflight (a local model's file assembled and hash-checked) here, in pytest_configure,
            # before xdist starts its workers: a usage error raised once they run leaves them running trials.
            self.check_models(self.plan())

    def plan(self) -> Plan:
        return plan_for(self.config, self.settings)

    @property
    def skip(self) -> KeysView[str]:
        """The case ids --resume skips (those of :attr:`resumed`)."""
        return self.resumed.keys()

    @property
    def active(self) -> bool:
        """Whether this session involved benchmark items (the summary is printed only then)."""
        return self.saw_cases or self.received > 0 or bool(self.skip)

    def note_collected(self, nodeids: list[str]) -> None:
        """Notice benchmark items among collected ids (start the embedded model server if needed)."""
        # only node ids shaped like a case id make an un-engaged controller build its plan (imports the core)
        if self.saw_cases or not any(case_id_of_nodeid(n) for n in nodeids):
            return
        try:
            plan = self.plan()
        except pytest.UsageError:
            return
        if any(plan.case_of_nodeid(n) for n in nodeids):
            self.saw_cases = True
            self.book.claim()
            from mltb_core.runner.trial import write_prompts

            write_prompts(self.run_dir)  # the exact prompts travel with the results
            if self.config.option.collectonly:
                return                   # nothing runs: no model to check, no server to start
            self.check_models(plan)      # a run that became an mltb run only by what it collected
            self.write_model_notes()
            dist = getattr(self.config.option, "dist", "no")
            workers = len(self.config.option.tx or ()) if dist != "no" else 0
            self.servers.start(plan.models, workers, say=self._say)

    def check_models(self, plan) -> None:
        """The models' preflight (keys, prices, packages; a local model's file assembled and hash-checked),
        once per session, whether the model was named or is the default: a bad model file is a usage error
        before any server or trial starts, never an internal error when the server is started. Its notes
        are written by :meth:`write_model_notes` once the terminal is up."""
        if self.models_checked:
            return
        from .collection import check_models

        self.model_notes = check_models(list(plan.models))
        self.models_checked = True

    def _say(self, line: str) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(line, flush=True)

    def write_model_notes(self) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            for note in self.model_notes:
                terminal.write_line(f"mltb: note: {note}")
        self.model_notes = []

    def validate(self) -> None:
        """Usage errors for names and files the user gave, before collection. The models were checked in
        ``__init__`` (an engaged run is an mltb run); their notes are written here, now the terminal is up."""
        if not self.engaged:
            return
        self.plan()    # unknown planner/model/task names are usage errors
        from .collection import check_confinement_here

        self.write_model_notes()
        check_confinement_here(self.settings.unconfined)
        # task inputs are checked in __init__ (before xdist starts workers); --compare and
        # --fail-on-regression are read when the settings are resolved (options.py)

    def header_lines(self) -> list[str]:
        if not self.engaged:
            return []
        from mltb_core.analysis.resultsfile import problem_lines

        lines = [f"mltb: run directory {self.run_dir}"]
        lines += [f"mltb: warning: {line}" for line in problem_lines(self.book.unreadable)]
        if self.settings.resume:
            lines.append(f"mltb: --resume: {len(self.skip)} trial(s) already recorded for this configuration "
                         f"will be skipped")
            lines += self.other_code_lines()
        estimate = self.cost_estimate()
        if estimate is not None:
            lines.append(f"mltb: {estimate.line()}")
        return lines

    def other_code_lines(self) -> list[str]:
        """A warning when recorded trials that --resume keeps ran on other code than this session: the
        config hash pins the settings, not the code, so the tables would mix code versions."""
        from mltb_core.analysis.provenance import code_version, trial_code

        here = code_version()
        other = [record for record in self.resumed.values() if record.code != here]
        if not other:
            return []
        return [f"mltb: warning: --resume: {len(other)} of the {len(self.resumed)} recorded trial(s) kept ran on other "
                f"code ({trial_code(other)}) than this session ({here}): the tables will mix code versions; "
                f"a new --mltb-out runs every trial on this code"]

    def cost_estimate(self):
        """The run's estimated dollar cost from its budgets (None for free models), printed before it starts."""
        from mltb_core.analysis.estimate import estimate_cost

        from .collection import resolve_tasks

        try:
            plan = self.plan()
            tasks = {task.slug: task for task in resolve_tasks(self.settings)}
        except pytest.UsageError:
            return None
        return estimate_cost((tasks[c.task], plan.config(c)) for c in plan.cases if c.id not in self.skip)

    # ---- records -------------------------------------------------------------------------------------
    def handle_report(self, report: pytest.TestReport) -> None:
        """Append the record carried by an item's teardown report; enforce run-level budgets."""
        raw = report_property(report, RECORD_PROPERTY)
        if report.failed:
            if raw is not None and report.when == "call":
                self.planner_failures += 1
            else:
                self.other_failures += 1
        if report.when != "teardown" or raw is None:
            return
        from mltb_core.analysis.records import TrialRecord

        record = TrialRecord.from_dict(json.loads(raw))
        trajectory = report_property(report, TRAJECTORY_PROPERTY)
        self._write(record, None if trajectory is None else decode_trajectory(trajectory))
        self.spent_usd += record.cost_usd
        self._check_run_budget()

    def _write(self, record, trajectory_text: str | None) -> None:
        self.book.write(record, trajectory_text, bool(self.settings.keep_work))
        self.received += 1
        self.config.hook.pytest_mltb_record_written(record=record, run_dir=self.run_dir)

    def record_crash(self, report: pytest.TestReport) -> None:
        """xdist lost a worker while it ran ``report``'s item: record an infra error for that case and
        turn the crash report into a setup error (an ERROR, tabled apart like any infra error)."""
        if case_id_of_nodeid(report.nodeid) is None:
            return
        plan = self.plan()
        case: Case | None = plan.case_of_nodeid(report.nodeid)
        if case is None:      # not a benchmark item: leave xdist's report as it is
            return
        why = str(report.longrepr).strip().splitlines()[0] if report.longrepr else "worker crashed"
        self._write(self.book.crash_record(case, plan.config(case), why), None)
        report.when = "setup"  # xdist's crash reports say "???"
        report.longrepr = f"{why}: recorded as an infrastructure error (not counted against the planner)"

    def _check_run_budget(self) -> None:
        reason = None
        max_cost, max_seconds = self.settings.run_max_cost, self.settings.run_max_seconds
        if max_cost is not None and self.spent_usd >= max_cost:
            reason = f"mltb: run cost budget ${max_cost:g} spent (${self.spent_usd:.4f})"
        elif max_seconds is not None and time.monotonic() - self.started >= max_seconds:
            reason = f"mltb: run time budget {max_seconds:g}s used"
        if reason is None or self.session is None:
            return
        self.session.shouldstop = reason
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None and not dsession.shouldstop:
            dsession.shouldstop = reason

    def run_records(self) -> list:
        """This run's records: the selected cases under their configuration, deduplicated."""
        try:
            plan = self.plan()
        except pytest.UsageError:
            plan = None
        return self.book.run_records(plan)

    # ---- end of session --------------------------------------------------------------------------------
    def finish(self, session: pytest.Session) -> None:
        if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and self.skip and not self.received:
            # --resume of a finished run: nothing failed, there is just nothing left to do (the summary says so)
            session.exitstatus = pytest.ExitCode.OK
            self.nothing_left = True
        if self.active or (self.engaged and self.gate.requested):
            self.gate.finish(session, self.run_records(), self.other_failures)
        if self.settings.report and self.book.results_path.is_file():
            self.write_report()

    def write_report(self) -> None:
        """``--mltb-report``: the run directory's report, its sections as the conftest hook leaves them."""
        from mltb_core.analysis.reports import build_report
        from mltb_core.analysis.sections import pick_sections

        sections = pick_sections(None)
        self.config.hook.pytest_mltb_report_sections(sections=sections, config=self.config)
        self.report_paths = build_report([self.run_dir], report_sections=sections)

    def summary(self, terminal) -> None:
        from mltb_core.analysis.tables import render_summary

        records = self.run_records()
        hashes = sorted({r.config_hash for r in records}) or self.plan().config_hashes()
        terminal.section("mltb summary")
        terminal.write_line(f"run directory: {self.run_dir} ({len(records)} record(s) for config "
                            f"{', '.join(hashes)}; {self.received} new)")
        for error in self.servers.errors:
            terminal.write_line(error, red=True)
        if self.nothing_left:
            terminal.write_line(f"--resume: nothing left to run: all {len(self.skip)} selected trial(s) of this "
                                f"configuration are recorded (exit 0)", bold=True)
        # compact unless -v: consistency and the funnel; every table with -v, or in `mltb report`
        compact = self.config.getoption("verbose", 0) <= 0
        terminal.write_line(render_summary(records, compact=compact, run_dir=_as_typed(self.run_dir)))
        if self.report_paths:
            terminal.write_line(f"report: {self.report_paths['index']}")
        self.gate.summary(terminal)


def _as_typed(path: Path) -> str:
    """A run directory as a command line names it: relative to the working directory when inside it, quoted
    for a shell."""
    import shlex

    path = Path(path).resolve()
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.quote(str(path))
