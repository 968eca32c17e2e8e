"""The work behind the hooks: running one case on a worker, and the controller's bookkeeping.

Transport: a worker puts the trial record (JSON) and the trajectory text (zlib+base64 when big) into
the item's ``user_properties``; the controller reads them from the teardown report (the last report
of every item that ran, whatever its outcome), appends the record to ``<run>/results.jsonl`` and
writes the trajectory beside it. Nothing relies on a shared filesystem, so remote workers work.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from mltb_core.analysis.compare import compare_to_baseline, load_baseline, parse_regression_spec, save_baseline
from mltb_core.analysis.results import (RESULTS_FILE, TRAJECTORY_DIR, ResultsFileError, TrialRecord, UnreadableLine,
                               append_records, check_results_file, latest_records, problem_lines, record_json,
                               scan_records)
from mltb_core.analysis.tables import render_summary

from .collection import (Case, case_id, check_model_prices, check_task_inputs, resolve_models, resolve_planners,
                         resolve_tasks, trial_config)
from .options import Settings, default_run_dir

__all__ = ["RECORD_PROPERTY", "TRAJECTORY_PROPERTY", "Controller", "WorkerContext", "run_case",
           "failure_message", "encode_trajectory", "decode_trajectory", "InfraErrorOutcome", "FAULT_KILL_ENV",
           "inject_fault"]

RECORD_PROPERTY = "mltb_record"
TRAJECTORY_PROPERTY = "mltb_trajectory"
# Trajectories larger than this travel compressed (junitxml and execnet stay small).
COMPRESS_ABOVE = 16_000
INFRA_BACKOFF_SECONDS = 0.5
# Test-only fault hook: a worker about to run a case whose id contains this variable's value kills
# itself with SIGKILL (the crash tests use it; a crash is an infrastructure error, see record_crash).
FAULT_KILL_ENV = "MLTB_FAULT_KILL"


class InfraErrorOutcome(Exception):
    """Raised in the trial fixture so pytest reports an ERROR, not a failure."""


def encode_trajectory(text: str) -> str:
    """Trajectory text for a user property: as is when small, ``zlib+base64:...`` when big."""
    if len(text) <= COMPRESS_ABOVE:
        return text
    return "zlib+base64:" + base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def decode_trajectory(value: str) -> str:
    if value.startswith("zlib+base64:"):
        return zlib.decompress(base64.b64decode(value[len("zlib+base64:"):])).decode("utf-8")
    return value


def run_dir_config_hash(settings: Settings) -> str:
    """The configuration hash shared by every case of this run (planner/model/trial are not hashed)."""
    return trial_config(settings, "react", "sim", 0).config_hash()


def done_case_ids(records: list[TrialRecord], config_hash: str) -> set[str]:
    """Cases already recorded with a real outcome (infra errors are rerun) under this configuration."""
    return {case_id(r.task, r.planner, r.model, r.trial)
            for r in latest_records(records)
            if r.config_hash == config_hash and r.outcome != "infra_error"}


def trial_runner(task, config, out_dir: Path, split=None) -> TrialRecord:
    """``mltb_core.runner.trial.run_trial``, looked up at call time (tests replace this function)."""
    from mltb_core.runner.trial import run_trial

    return run_trial(task, config, out_dir, split=split)


def inject_fault(case: Case) -> None:
    """SIGKILL this process when ``MLTB_FAULT_KILL`` is a substring of the case id (tests only)."""
    pattern = os.environ.get(FAULT_KILL_ENV, "")
    if pattern and pattern in case.id:
        os.kill(os.getpid(), signal.SIGKILL)


def run_case(case: Case, settings: Settings, work_dir: Path, split=None) -> TrialRecord:
    """Run one trial, retrying infrastructure errors up to ``--infra-retries`` times."""
    from mltb_core.bench.tasks import get_task

    inject_fault(case)

    task = get_task(case.task, [settings.tasks_dir] if settings.tasks_dir else [])
    config = trial_config(settings, case.planner, case.model, case.trial)
    attempts = 1 + settings.infra_retries
    for attempt in range(1, attempts + 1):
        out_dir = work_dir / f"attempt{attempt}" if attempt > 1 else work_dir
        record = trial_runner(task, config, out_dir, split=split)
        record.extra["attempts"] = attempt
        # percentiles of invalid trials count as 0 only where a leaderboard exists (see results.py)
        record.extra.setdefault("leaderboard", bool(task.leaderboard) and task.source != "replica")
        if record.outcome != "infra_error":
            break
        if attempt < attempts:
            time.sleep(INFRA_BACKOFF_SECONDS * attempt)
    return record


def attach(item: pytest.Item, record: TrialRecord) -> None:
    """Put the record and its trajectory text into the item's user_properties (→ report → controller)."""
    item.user_properties.append((RECORD_PROPERTY, record_json(record)))
    if record.trajectory and Path(record.trajectory).is_file():
        text = Path(record.trajectory).read_text(encoding="utf-8")
        item.user_properties.append((TRAJECTORY_PROPERTY, encode_trajectory(text)))


def failure_message(record: TrialRecord) -> str:
    """A few lines: what the trial reached and why it stopped."""
    lines = [f"{record.outcome}: reached stage {record.stage_reached}/10"
             + (f" ({record.stage_name})" if record.stage_name else "")
             + f"; stopped: {record.stop_reason or 'unknown'}"]
    if record.feedback:
        feedback = record.feedback.strip().splitlines()
        lines.append("feedback: " + " / ".join(feedback[:3])[:300])
    if record.error:
        lines.append("error: " + record.error.strip().splitlines()[-1][:300])
    lines.append(f"{record.tool_calls} tool calls, {record.llm_calls} LLM calls, {record.wall_seconds:.1f}s")
    return "\n".join(lines)


def _property(report: pytest.TestReport, name: str) -> Any:
    for key, value in getattr(report, "user_properties", ()) or ():
        if key == name:
            return value
    return None


class WorkerContext:
    """What every process that runs items needs: settings, the run directory, the cases to skip."""

    def __init__(self, config: pytest.Config, settings: Settings, run_dir: Path, skip: set[str]):
        self.config = config
        self.settings = settings
        self.run_dir = run_dir
        self.skip = skip

    def cases(self) -> list[Case]:
        from .collection import build_cases

        return build_cases(resolve_tasks(self.settings), resolve_planners(self.settings),
                           resolve_models(self.settings), self.settings.trials)

    def work_dir(self, case: Case) -> Path:
        return self.run_dir / "work" / case.id


class Controller:
    """Controller-side state (the only process with xdist's results): records, summary, baseline, gating."""

    def __init__(self, config: pytest.Config, settings: Settings):
        self.config = config
        self.settings = settings
        out = settings.out
        self.run_dir = Path(out) if out else default_run_dir(config.rootpath, bool(settings.resume))
        if not self.run_dir.is_absolute():
            self.run_dir = Path(config.invocation_params.dir) / self.run_dir
        self.config_hash = run_dir_config_hash(settings)
        # An existing results.jsonl is read now: a directory or an unreadable file is a usage error
        # before anything runs, and lines that are not records are reported (then skipped, so
        # --resume reruns their trials) instead of crashing the run.
        try:
            check_results_file(self.results_path)
            records, unreadable = scan_records(self.results_path)
        except ResultsFileError as exc:
            raise pytest.UsageError(f"mltb: {exc}") from None
        self.unreadable: list[UnreadableLine] = unreadable
        self.skip: set[str] = done_case_ids(records, self.config_hash) if settings.resume else set()
        self.session: pytest.Session | None = None
        self.started = time.monotonic()
        self.spent_usd = 0.0
        self.received = 0
        self.comparison = None
        self.baseline_written: Path | None = None
        self.servers: list = []
        self.server_errors: list[str] = []
        self.saw_cases = False
        self.planner_failures = 0
        self.other_failures = 0    # errors (infra included) and failures of anything but a trial

    @property
    def active(self) -> bool:
        """Whether this session involved benchmark items (the summary is printed only then)."""
        return self.saw_cases or self.received > 0 or bool(self.skip)

    def note_collected(self, nodeids: list[str]) -> None:
        """Notice benchmark items among collected ids (start the embedded model server if needed)."""
        if self.saw_cases or not any("[" in n for n in nodeids):
            return
        try:
            case_ids = {c.id for c in WorkerContext(self.config, self.settings, self.run_dir, set()).cases()}
        except pytest.UsageError:
            return
        if any(n.rsplit("[", 1)[-1].rstrip("]") in case_ids for n in nodeids):
            self.saw_cases = True
            from mltb_core.runner.trial import write_prompts

            write_prompts(self.run_dir)  # the exact prompts travel with the results
            self.start_local_server(resolve_models(self.settings))

    @property
    def results_path(self) -> Path:
        return self.run_dir / RESULTS_FILE

    def validate_names(self) -> None:
        """Usage errors for unknown names the user gave (defaults are valid by construction)."""
        if self.settings.explicit("planner"):
            resolve_planners(self.settings)
        if self.settings.explicit("model"):
            check_model_prices(resolve_models(self.settings))
        if self.settings.explicit("task") or self.settings.explicit("tasks_dir"):
            check_task_inputs(resolve_tasks(self.settings))
        for name in ("compare",):
            path = self.settings.values[name]
            if path and not Path(path).is_file():
                raise pytest.UsageError(f"mltb: --{name} file {path} does not exist")
        if self.settings.fail_on_regression:
            try:
                parse_regression_spec(self.settings.fail_on_regression)
            except ValueError as exc:
                raise pytest.UsageError(f"mltb: --fail-on-regression: {exc}") from None

    def header_lines(self) -> list[str]:
        lines = [f"mltb: run directory {self.run_dir} (config {self.config_hash})"]
        lines += [f"mltb: warning: {line}" for line in problem_lines(self.unreadable)]
        if self.settings.resume:
            lines.append(f"mltb: --resume: {len(self.skip)} trial(s) already recorded for this configuration "
                         f"will be skipped")
        return lines

    # ---- records -------------------------------------------------------------------------------------
    def handle_report(self, report: pytest.TestReport) -> None:
        """Append the record carried by an item's teardown report; enforce run-level budgets."""
        raw = _property(report, RECORD_PROPERTY)
        if report.failed:
            if raw is not None and report.when == "call":
                self.planner_failures += 1
            else:
                self.other_failures += 1
        if report.when != "teardown" or raw is None:
            return
        record = TrialRecord.from_dict(json.loads(raw))
        trajectory = _property(report, TRAJECTORY_PROPERTY)
        if trajectory is not None:
            relative = Path(TRAJECTORY_DIR) / record.config_hash / f"{case_id(record.task, record.planner, record.model, record.trial)}.jsonl"
            target = self.run_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(decode_trajectory(trajectory), encoding="utf-8")
            record.trajectory = relative.as_posix()
        append_records(self.results_path, [record])
        self.received += 1
        self.spent_usd += record.cost_usd
        self._check_run_budget()

    def record_crash(self, report: pytest.TestReport) -> None:
        """xdist lost a worker while it ran ``report``'s item: record an infra error for that case and
        turn the crash report into a setup error (an ERROR, tabled apart like any infra error)."""
        case_ids = {c.id: c for c in WorkerContext(self.config, self.settings, self.run_dir, set()).cases()}
        case = case_ids.get(report.nodeid.rsplit("[", 1)[-1].rstrip("]"))
        if case is None:      # not a benchmark item: leave xdist's report as it is
            return
        config = trial_config(self.settings, case.planner, case.model, case.trial)
        why = str(report.longrepr).strip().splitlines()[0] if report.longrepr else "worker crashed"
        record = TrialRecord(task=case.task, planner=case.planner, model=case.model, trial=case.trial,
                             seed=config.trial_seed, config_hash=config.config_hash(), outcome="infra_error",
                             stop_reason="worker crashed", synthetic=case.model.partition(":")[0] == "sim",
                             error=f"{why} (killed, segfault or out of memory)")
        append_records(self.results_path, [record])
        self.received += 1
        report.when = "setup"  # type: ignore[assignment] - xdist's crash reports say "???"
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

    def run_records(self) -> list[TrialRecord]:
        """This run's records: this configuration and the selected tasks/planners/models/trials, deduplicated."""
        try:
            wanted = {c.id for c in WorkerContext(self.config, self.settings, self.run_dir, set()).cases()}
        except pytest.UsageError:
            wanted = None
        # Unreadable lines were reported at start-up; lines this run appended are whole.
        return [r for r in latest_records(scan_records(self.results_path)[0])
                if r.config_hash == self.config_hash
                and (wanted is None or case_id(r.task, r.planner, r.model, r.trial) in wanted)]

    # ---- end of session --------------------------------------------------------------------------------
    def finish(self, session: pytest.Session) -> None:
        """Write the baseline and run the comparison; a regression sets exit status 1 (an underpowered
        comparison does not: the summary says so loudly, see mltb_core.analysis.compare)."""
        records = self.run_records()
        if self.settings.save_baseline and records:
            self.baseline_written = Path(self.settings.save_baseline)
            save_baseline(self.baseline_written, records, seed=self.settings.seed)
        if self.settings.compare:
            thresholds = (parse_regression_spec(self.settings.fail_on_regression)
                          if self.settings.fail_on_regression else {})
            self.comparison = compare_to_baseline(load_baseline(Path(self.settings.compare)), records, thresholds,
                                                  seed=self.settings.seed)
            # Under --compare the gate decides: planner failures are benchmark results (they are
            # in consistency), so they alone do not fail the session; errors and other failures do.
            if self.comparison.failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            elif session.exitstatus == pytest.ExitCode.TESTS_FAILED and not self.other_failures:
                session.exitstatus = pytest.ExitCode.OK

    def summary(self, terminal) -> None:
        records = self.run_records()
        terminal.section("mltb summary")
        terminal.write_line(f"run directory: {self.run_dir} ({len(records)} record(s) for config "
                            f"{self.config_hash}; {self.received} new)")
        for error in self.server_errors:
            terminal.write_line(error, red=True)
        terminal.write_line(render_summary(records, seed=self.settings.seed))
        if self.baseline_written:
            terminal.write_line(f"\nbaseline written to {self.baseline_written}")
        if self.comparison is not None:
            # red: a regression beyond noise (exit 1); yellow: the gate could not measure some drops (exit 0)
            failed, underpowered = self.comparison.failed, bool(self.comparison.underpowered)
            terminal.write_line("")
            terminal.write_line(self.comparison.render(), red=failed, yellow=underpowered and not failed,
                                bold=failed or underpowered)

    # ---- embedded model server ---------------------------------------------------------------------------
    def start_local_server(self, models: list[str]) -> None:
        """Hold the llama.cpp servers for the whole run when a ``local`` model is selected: one per
        xdist worker (each keeps its own warm prompt prefix), or one without xdist.

        LocalServer is refcounted through a state file, so the workers' backends join these servers
        instead of starting and stopping one per trial; the last release stops each. A failure to start
        is not fatal here: the trials then report it as an infrastructure error.
        """
        local = sorted({m.partition(":")[2] for m in models if m.partition(":")[0] == "local"})
        if not local:
            return
        from mltb_core.llm.local import default_model_path, worker_servers

        workers = len(self.config.option.tx or ()) if getattr(self.config.option, "dist", "no") != "no" else 0
        for path, server in [(p, s) for p in local for s in worker_servers(p or default_model_path(), workers)]:
            try:
                server.acquire()
            except Exception as exc:  # noqa: BLE001 - reported, and every trial will say it again
                self.server_errors.append(f"local model server for {path or 'local'} failed to start: {exc}")
                continue
            self.servers.append(server)

    def stop_local_server(self) -> None:
        for server in self.servers:
            server.release()
        self.servers.clear()
