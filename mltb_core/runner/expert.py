"""Expert reference trajectories and the runner that replays any list of tool calls.

Every task with offline data has one fixed, tool-only trajectory in
``fixtures/experts/<slug>.jsonl`` (one paper-format tool call per line, no LLM):
load, combine, clean, engineer a few features, encode, split back, fit one solid
model, predict and write the submission. It proves the toolset suffices, gives
each task's toolset ceiling and is the golden integration test.

:func:`run_calls` runs a list of calls in a fresh sandbox (the agent's view of the
data: ``train.csv`` and ``test.csv`` only, never the labels), records each call's
result, the wall time and the peak memory, and grades the submission if one was
written. ``mltb replay`` and ``mltb expert`` both use it.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mltb_core.bench.documents import JSONShapeError, check_document_size, loads_bounded
from mltb_core.bench.fixtures import FIXTURES
from mltb_core.bench.grading import Grade
from mltb_core.toolkit.registry import ToolCall, ToolCallError
from mltb_core.bench.tasks import DEFAULT_BOARD, Task

__all__ = ["EXPERTS_DIR", "CallOutcome", "ReplayResult", "CallsFileError", "ReplayError", "load_expert", "load_calls",
           "parse_calls", "expert_slugs", "expert_toolset", "run_calls", "run_expert", "expert_markdown"]

EXPERTS_DIR = FIXTURES / "experts"


_DEFAULT: Any = object()   # run_calls: "the trial's default time limit"


class ReplayError(RuntimeError):
    """The replay's solver process died or sent no usable result."""


class CallsFileError(ValueError):
    """A calls file (or trajectory) that cannot be read as tool calls; names the file and line."""


@dataclass
class CallOutcome:
    """What one replayed call did."""

    index: int            # 1-based position in the call list
    tool_name: str
    ok: bool
    message: str
    seconds: float


@dataclass
class ReplayResult:
    """The result of running a list of calls: per-call outcomes, cost, and the grade (if any)."""

    task: str
    seed: int
    calls: list[CallOutcome]
    wall_seconds: float
    peak_mib: float
    memory_method: str                # "rss" (psutil, native allocations included) or "tracemalloc"
    submission_written: bool
    grade: Grade | None
    sandbox: str | None = None        # kept only when the caller gave an out_dir
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed_calls(self) -> list[CallOutcome]:
        return [c for c in self.calls if not c.ok]

    @property
    def all_ok(self) -> bool:
        return not self.failed_calls

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["grade"] = self.grade.to_dict() if self.grade is not None else None
        data["all_ok"] = self.all_ok
        return data


# ----------------------------------------------------------------------- reading calls
def _call_from_line(data: Any, where: str, check_tools: bool = False) -> ToolCall:
    try:
        call = ToolCall.from_dict(data)
        if check_tools:
            from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset)
            from mltb_core.toolkit.registry import REGISTRY

            REGISTRY.get(call.tool_name)  # raises ToolCallError naming close matches
        return call
    except ToolCallError as exc:
        raise CallsFileError(f"{where}: {exc}") from None


def parse_calls(lines: Iterable[str], source: str = "<calls>", check_tools: bool = False) -> list[ToolCall]:
    """Parse JSONL text: one paper-format call per line (blank lines and ``#`` comments skipped).

    A JSON list of calls on one line is accepted too. Errors name ``source`` and the line number;
    with ``check_tools`` an unknown tool name is such an error too.
    """
    calls: list[ToolCall] = []
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}:{lineno}"
        try:
            data = loads_bounded(text)
        except json.JSONDecodeError as exc:
            raise CallsFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except ValueError as exc:   # too deep, too large, an integer past the digit limit
            raise CallsFileError(f"{where}: refused: {exc}") from None
        items = data if isinstance(data, list) else [data]
        calls += [_call_from_line(item, where, check_tools) for item in items]
    return calls


def _is_trajectory(text: str) -> bool:
    """True when the text's first JSON line is a trajectory step (has ``step_type``)."""
    for line in text.split("\n"):   # not splitlines(): U+2028 inside a JSON string is no line break
        if line.strip():
            try:
                first = loads_bounded(line)
            except ValueError:
                return False
            return isinstance(first, dict) and "step_type" in first
    return False


def _read_calls_file(path: Path) -> str:
    """The text of a calls file; :class:`CallsFileError` (a usage error) when it is too large, unreadable or
    not UTF-8."""
    try:
        check_document_size(path)
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CallsFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except JSONShapeError as exc:
        raise CallsFileError(f"{path}: refused: {exc}") from None
    except OSError as exc:
        raise CallsFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None


# Plain arguments that hold a file path (read_data, save_model, load_model, save_dataframe_to_csv, ...).
_PATH_ARGUMENTS = ("filepath",)


def _relocate_paths(call: ToolCall) -> ToolCall:
    """Make a trajectory's absolute file paths relative: they pointed into the trial's own data dir or
    sandbox, which a replay replaces with fresh ones (the resolver finds the file name there)."""
    kwargs = dict(call.func_kwargs)
    for name in _PATH_ARGUMENTS:
        value = kwargs.get(name)
        if isinstance(value, str) and Path(value).is_absolute():
            kwargs[name] = Path(value).name
    return ToolCall(call.tool_name, dict(call.bindings), kwargs, call.output)


def load_calls(path: Path | str, check_tools: bool = False) -> list[ToolCall]:
    """Tool calls from a calls JSONL file or from a trajectory JSONL written by ``run_trial``.

    ``check_tools`` rejects unknown tool names in a calls file (a trajectory is replayed as
    recorded: its failed calls, unknown tools included, fail again).
    """
    path = Path(path)
    if not path.is_file():
        raise CallsFileError(f"{path}: no such file")
    text = _read_calls_file(path)
    if _is_trajectory(text):
        from mltb_core.planners.trajectory import tool_calls_from_trajectory

        try:
            raw = tool_calls_from_trajectory(path)
        except (ValueError, KeyError, TypeError) as exc:
            raise CallsFileError(f"{path}: not a readable trajectory: {exc}") from None
        return [_relocate_paths(_call_from_line(item, f"{path}: trajectory call {i}"))
                for i, item in enumerate(raw, 1)]
    return parse_calls(text.split("\n"), str(path), check_tools)


def expert_slugs() -> list[str]:
    """Slugs that have an expert trajectory file."""
    return sorted(p.stem for p in EXPERTS_DIR.glob("*.jsonl"))


def _expert_path(slug: str) -> Path:
    path = EXPERTS_DIR / f"{slug}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no expert trajectory for task {slug!r} ({path}); "
                                f"tasks with one: {', '.join(expert_slugs()) or '(none)'}")
    return path


def load_expert(slug: str) -> list[ToolCall]:
    """The expert trajectory of task ``slug``; a missing file names the tasks that have one."""
    path = _expert_path(slug)
    with open(path, encoding="utf-8") as handle:
        return parse_calls(handle, str(path), check_tools=True)


_TOOLSET_LINE = re.compile(r"^#\s*toolset:\s*(\w+)")


def expert_toolset(slug: str) -> str:
    """The toolset an expert file declares on a ``# toolset: NAME`` comment line (it is replayed under it)."""
    from mltb_core.toolkit.registry import check_toolset

    path = _expert_path(slug)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            match = _TOOLSET_LINE.match(line.strip())
            if match:
                return check_toolset(match.group(1))
    raise CallsFileError(f"{path}: no '# toolset: NAME' line declaring the toolset the expert uses")


# ----------------------------------------------------------------------- running
def run_calls(task: Task, calls: Iterable[ToolCall | dict], seed: int = 0, out_dir: Path | str | None = None,
              threads: int = 1, split: Any = None, time_limit: float | None = _DEFAULT,
              board: str = DEFAULT_BOARD, toolset: str | None = None, unconfined: bool = False) -> ReplayResult:
    """Run ``calls`` in a fresh sandbox with a fresh scratchpad, then grade the submission if written.

    The data dir holds only ``train.csv`` and ``test.csv`` of the task's split for ``seed``.
    With ``out_dir`` the sandbox and data dir are kept there (``out_dir/sandbox``); otherwise a
    temporary directory is used and removed afterwards. The calls run as a trial's do, through the
    same step (:func:`~mltb_core.runner.solve.solve_and_grade`): one after the other in a fresh confined
    tool worker, within the trial memory budget and disk quota, each call under the trial's tool time
    limit (``time_limit``; default: TrialConfig's); a failing call is recorded and the next one still
    runs. This process grades; a submission the grader refuses is an invalid grade with the reason.
    With ``toolset`` only that toolset's tools may be called (the others fail with an error naming
    the toolset). Peak memory is the worker's peak resident size above its size when ready.
    """
    from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset)
    from mltb_core.bench.splits import prepare_split
    from mltb_core.runner.solve import WorkerSettings, prepare_agent_data, solve_and_grade, trial_default

    calls = list(calls)
    if time_limit is _DEFAULT:
        time_limit = trial_default("tool_time_limit")
    split = split or prepare_split(task, seed=seed)
    temporary = out_dir is None
    root = Path(tempfile.mkdtemp(prefix=f"mltb-replay-{task.slug}-")) if temporary else Path(out_dir)
    settings = WorkerSettings(toolset=toolset, threads=threads, seed=seed, tool_time_limit=time_limit,
                              unconfined=unconfined)
    try:
        solved = solve_and_grade(task, split, prepare_agent_data(split, root), root / "sandbox",
                                 root / "submission.graded.csv", settings, lambda worker: _replay(worker, calls),
                                 board)
        if solved.worker_failure is not None:
            raise ReplayError(f"the replay's tool worker failed: {solved.worker_failure}")
        return ReplayResult(task=task.slug, seed=seed, calls=solved.result, wall_seconds=solved.solve_seconds,
                            peak_mib=solved.peak_mib if solved.peak_mib is not None else 0.0,
                            memory_method="worker VmHWM" if solved.peak_mib is not None else "unavailable",
                            submission_written=solved.submission is not None, grade=solved.grade,
                            sandbox=None if temporary else str(root / "sandbox"),
                            extra={"confinement": solved.confinement})
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def _replay(workspace: Any, calls: list[ToolCall | dict]) -> tuple[list[CallOutcome], bytes | None]:
    """Each call below the previous one (the root is node 0); a failing call is recorded and the next
    one still runs. Returns the calls' outcomes and the last submission written."""
    outcomes: list[CallOutcome] = []
    submission: bytes | None = None
    parent = 0
    for index, raw in enumerate(calls, 1):
        name = raw.tool_name if isinstance(raw, ToolCall) else str(raw.get("tool_name", "?"))
        try:
            call = raw if isinstance(raw, ToolCall) else ToolCall.from_dict(raw)
        except ToolCallError as exc:
            outcomes.append(CallOutcome(index, name, False, f"Error: {exc}", 0.0))
            continue
        facts = workspace.step(parent, index, call, None)
        parent = index
        submission = facts.submission if facts.submission is not None else submission
        outcomes.append(CallOutcome(index, name, facts.ok, facts.message, facts.seconds))
    return outcomes, submission


def run_expert(task: Task, seed: int = 0, out_dir: Path | str | None = None, threads: int = 1,
               board: str = DEFAULT_BOARD) -> ReplayResult:
    """Run the expert trajectory of ``task`` (see :func:`run_calls`)."""
    return run_calls(task, load_expert(task.slug), seed=seed, out_dir=out_dir, threads=threads, board=board,
                     toolset=expert_toolset(task.slug))


def expert_markdown(results: list[ReplayResult], tasks: dict[str, Task], seed: int, board: str) -> str:
    """A markdown report of expert runs: per task its data origin, metric, score, percentile or why
    none, medal, normalized score and the held-out rows the score was computed over."""
    lines = ["# Expert reference trajectories", "",
             f"`mltb expert all --seed {seed} --board {board} --markdown <file>`: one fixed tool-only "
             "trajectory per task (fixtures/experts/), graded on the task's held-out split (seed "
             f"{seed}). Percentiles are read from the **{board}** Kaggle leaderboard and given only where "
             "the held-out rows are comparable with the rows that board was scored on; every task gets the "
             "normalized score (0 = trivial constant baseline, 1 = perfect). Brackets: 95 % interval of the "
             "percentile over 200 resamples of the held-out rows (the split's own noise).", "",
             "| task | data origin | metric | score | percentile | medal | normalized | scored rows | board |",
             "|---|---|---|---|---|---|---|---|---|"]
    placed = 0
    for result in results:
        task, grade = tasks[result.task], result.grade
        if grade is None or not grade.valid:
            reason = grade.reason if grade else "no submission written"
            lines.append(f"| {result.task} | {task.active_data_origin or '-'} | {task.metric} | invalid: "
                         f"{reason[:80]} | - | - | - | - | {board} |")
            continue
        if grade.percentile is not None:
            placed += 1
            percentile = grade.percentile_text(1)
        else:
            percentile = f"none: {grade.percentile_note}"
        normalized = "-" if grade.normalized is None else f"{grade.normalized:.3f}"
        lines.append(f"| {result.task} | {task.active_data_origin or '-'} | {grade.metric} | {grade.score:.4f} | "
                     f"{percentile} | {grade.medal or '-'} | {normalized} | {grade.scored_rows} | {board} |")
    lines += ["", f"Percentile on {placed} of {len(results)} tasks. Scored rows: held-out rows the metric "
              "is computed over (costa-rican: heads of household only, as Kaggle scored it; "
              "forest-cover: accuracy weighted to the real test set's class shares).", ""]
    return "\n".join(lines)
