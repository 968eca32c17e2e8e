"""Live progress of a benchmark run, beside pytest's own dots (controller only).

A full suite runs for hours; pytest's dots say neither what it costs nor when it ends. After every
trial this shows: items done / total, running cost ($ and tokens), valid trials so far and an ETA
(elapsed time per finished item × items left).

- On a terminal (and not under CI): one status line kept on the terminal's bottom row, apt-style:
  the scrolling region is shrunk by one row so pytest's output scrolls above it; the region is
  restored at the end of the session.
- Otherwise (a pipe, a log file, ``CI`` set): a plain line, at most every ``PLAIN_INTERVAL`` seconds
  and after the last item, so logs stay short.
- With ``-v``: also one line per trial with the stage it reached and what it cost.
- During a trial run in this process (no xdist: the main job), "call k/N, stage s/10, elapsed" from the
  episode (mltb_core/planners/progress.py): a line on the first call and then at most every
  ``CALL_INTERVAL`` seconds, on a terminal as off it; on a terminal the status line also shows it, first
  (a long line is cut at the terminal's width), at every call. A trial in an xdist worker is not heard
  (its process has no terminal).
- After Ctrl-C in a session that ran benchmark items, one line: how many trials were recorded, how many LLM
  calls the checkpoints of the trials it cut short keep (mltb_core/runner/checkpoint.py), and that
  ``--resume`` continues the run from there.

Hook point: ``pytest_runtest_logreport`` on the controller, reading the teardown report's
``mltb_record`` user property — the record each worker attaches (see session.attach) and that the
controller appends to results.jsonl from the same report (Controller.handle_report). Nothing is
shown until the first record arrives, so sessions without benchmark items print nothing.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest


from .transport import RECORD_PROPERTY

if TYPE_CHECKING:
    from mltb_core.analysis.records import TrialRecord

__all__ = ["ProgressReporter", "PLAIN_INTERVAL", "CALL_INTERVAL", "PLUGIN_NAME", "format_duration"]

PLAIN_INTERVAL = 30.0   # seconds between plain progress lines
CALL_INTERVAL = 15.0    # seconds between plain "call k/N" lines of one trial
PLUGIN_NAME = "mltb-progress"


def format_duration(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")


def _record(report: pytest.TestReport) -> "TrialRecord | None":
    for key, value in getattr(report, "user_properties", ()) or ():
        if key == RECORD_PROPERTY:
            try:
                from mltb_core.analysis.records import TrialRecord

                return TrialRecord.from_dict(json.loads(value))
            except (ValueError, TypeError):
                return None   # the controller reports a bad record; progress just does not count it
    return None


def _end_line(terminal) -> None:
    """End a line pytest left open (its dots) before a line of ours: its own check only knows its path prefix."""
    terminal.ensure_newline()
    writer = getattr(terminal, "_tw", None)
    if getattr(writer, "width_of_current_line", 0):
        terminal.write("\n")


class ProgressReporter:
    """Counts finished items and trial records; writes the status line (see the module docstring)."""

    def __init__(self, config: pytest.Config, *, interval: float = PLAIN_INTERVAL, clock=time.monotonic,
                 benchmark: Callable[[], bool] | None = None):
        self.config = config
        self.interval = interval
        self.clock = clock
        self.total: int | None = None
        self.done = 0
        self.trials = 0
        self.valid = 0
        self.infra = 0
        self.cost = 0.0
        self.tokens = 0
        self.started = clock()
        self.last_plain: float | None = None
        self.region_set = False
        self.current: str | None = None        # the running trial's "call k/N, stage s/10" (this process)
        self.interrupted = False
        # whether this session has benchmark items (the controller knows, with xdist too); by default: a record came
        self.benchmark: Callable[[], bool] = benchmark if benchmark is not None else (lambda: self.trials > 0)

    # ---- what is known ----------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not hasattr(self.config, "workerinput") and session.items:
            self.total = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self.total = max(self.total or 0, len(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        self.done += 1
        record = _record(report)
        if record is None:
            if self.trials:
                self._show(None)
            return
        from mltb_core.analysis.records import Outcome  # only once a trial ran: a plain test run stays light

        self.trials += 1
        self.valid += int(record.valid)
        self.infra += int(record.outcome == Outcome.INFRA_ERROR)
        self.cost += record.cost_usd
        self.tokens += record.tokens_in + record.tokens_out
        self._show(record)

    @contextmanager
    def trial(self, case_id: str) -> Iterator[None]:
        """Show the progress the trial ``case_id`` reports while it runs in this process."""
        from mltb_core.stages.specs import STAGE_COUNT
        from mltb_core.planners.progress import TrialProgress, listening

        last_line: float | None = None

        def heard(progress: TrialProgress) -> None:
            nonlocal last_line
            budget = f"/{progress.max_llm_calls}" if progress.max_llm_calls is not None else ""
            self.current = (f"{case_id}: call {progress.llm_calls}{budget}, stage {progress.stage}/{STAGE_COUNT}, "
                            f"elapsed {format_duration(progress.elapsed)}")
            terminal = self._terminal()
            if terminal is None:
                return
            live = self._live(terminal)
            now = self.clock()
            due = last_line is None or now - last_line >= CALL_INTERVAL
            if not (due or live):
                return
            # the trial runs inside the item, where pytest captures output: write past the capture
            capture = self.config.pluginmanager.get_plugin("capturemanager")
            with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
                if due:   # a line that stays, on a terminal as in a log
                    last_line = now
                    _end_line(terminal)
                    terminal.write_line(f"mltb: {self.current}", flush=True)
                if live:
                    self._bottom_line(terminal, self.status())

        try:
            with listening(heard):
                yield
        finally:
            self.current = None

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.interrupted = True

    # ---- what is shown ----------------------------------------------------------------------------
    def status(self) -> str:
        total = self.total if self.total is not None else "?"
        elapsed = self.clock() - self.started
        eta = "?"
        if self.total and self.done:
            eta = format_duration(elapsed / self.done * max(self.total - self.done, 0))
        infra = f" · {self.infra} infra error(s)" if self.infra else ""
        # the running trial first: the status line is cut at the terminal's width
        running = f"{self.current} · " if self.current else ""
        return (f"mltb: {running}{self.done}/{total} items · {self.valid}/{self.trials} trials valid{infra} · "
                f"${self.cost:.4f} · {self.tokens:,} tokens · elapsed {format_duration(elapsed)} · ETA {eta}")

    def _terminal(self):
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def _live(self, terminal) -> bool:
        from mltb_core.environment import read as read_environment

        return bool(getattr(terminal, "isatty", False)) and not read_environment("CI")

    def _show(self, record: "TrialRecord | None") -> None:
        terminal = self._terminal()
        if terminal is None:
            return
        if record is not None and self.config.getoption("verbose", 0) > 0:
            from mltb_core.stages.specs import stage_label

            stage = f"stage {stage_label(record.stage_reached)}"
            terminal.write_line(f"    mltb: {record.task} · {record.planner} · t{record.trial}: {record.outcome}, {stage}, "
                                f"${record.cost_usd:.4f}, {record.tokens_in + record.tokens_out:,} tokens, "
                                f"{record.wall_seconds:.1f} s")
        if self._live(terminal):
            self._bottom_line(terminal, self.status())
            return
        now = self.clock()
        finished = self.total is not None and self.done >= self.total
        if finished or self.last_plain is None or now - self.last_plain >= self.interval:
            self.last_plain = now
            _end_line(terminal)
            terminal.write_line(self.status())

    def _kept(self) -> str:
        """", 24 LLM calls of the unfinished trial kept": what the checkpoints of the trials the interrupt cut
        short keep for ``--resume`` to replay ('' when none)."""
        from mltb_core.analysis.runstore import RunStore
        from mltb_core.runner.checkpoint import kept_for_resume

        from .plugin import CONTEXT

        context = self.config.stash.get(CONTEXT, None)
        if context is None:
            return ""
        calls, trials = kept_for_resume(RunStore(context.run_dir).checkpoints())
        if not calls:
            return ""
        which = "the unfinished trial" if trials == 1 else f"{trials} unfinished trials"
        return f", {calls} LLM call{'s' if calls != 1 else ''} of {which} kept"

    def _bottom_line(self, terminal, text: str) -> None:
        """Write ``text`` on the reserved bottom row (reserving it on first use), cursor restored."""
        cols, rows = shutil.get_terminal_size()
        if rows < 3:
            return
        if not self.region_set:
            # two newlines leave an empty row above the reserved one; the cursor goes back to it
            terminal.write("\n\n\x1b7" + f"\x1b[1;{rows - 1}r" + "\x1b8\x1b[1A", flush=True)
            self.region_set = True
        terminal.write(f"\x1b7\x1b[{rows};1H\x1b[2K{text[:cols - 1]}\x1b8", flush=True)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_terminal_summary(self, terminalreporter) -> Any:
        """Give the bottom row back before the summary, and leave the final figures as a plain line."""
        if self.region_set:
            _, rows = shutil.get_terminal_size()
            terminalreporter.write(f"\x1b7\x1b[r\x1b[{rows};1H\x1b[2K\x1b8", flush=True)
            self.region_set = False
        if self.trials:
            terminalreporter.write_line(self.status().replace(" · ETA 0s", ""))
        if self.interrupted and self.benchmark():
            total = self.total if self.total is not None else "?"
            terminalreporter.write_line(f"mltb: interrupted: {self.trials} of {total} trials recorded{self._kept()}; "
                                        "continue with `--resume` (and the same options)", yellow=True, bold=True)
        yield
