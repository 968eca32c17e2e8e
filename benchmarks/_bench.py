"""Shared helpers of the benchmark scripts: machine facts, sim trials, and figures with targets.

Every script prints a human-readable table; with ``--json`` it also prints one line
``FIGURES <json>`` that ``run_all.py`` collects into ``reports/benchmarks.md``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

FIGURES_PREFIX = "FIGURES "
ROOT = Path(__file__).resolve().parent.parent   # the checkout the scripts belong to
BUNDLED_SMALL_TASKS = ("spaceship-titanic", "playground-series-s4e1", "playground-series-s5e5")


@dataclass
class Figure:
    """One measured figure; ``met`` is None when the figure has no target."""
    name: str
    value: str
    target: str = ""
    met: bool | None = None
    note: str = ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, str]:
    """CPU model, cores, RAM, date and load average: the context every figure needs."""
    import psutil

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return {"cpu": cpu_model(), "cores": str(os.cpu_count()),
            "ram": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
            "python": platform.python_version(),
            "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "load": load}


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def sim_trial(task_slug: str, planner: str, out_dir: Path | None = None, **config):
    """One trial with the synthetic policy, no LLM cache (the figures must not depend on it)."""
    from mltb_core.config import TrialConfig
    from mltb_core.bench.tasks import get_task
    from mltb_core.runner.trial import run_trial

    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="mltb-bench-"))
    config = TrialConfig(planner=planner, model=config.pop("model", "sim"), llm_cache=False).with_(**config)
    return run_trial(get_task(task_slug), config, out_dir)   # config: fields or planner knobs


def count(text: str) -> int:
    """argparse ``type`` for a count of repetitions, trials or workers: a whole number of at least 1 (a
    benchmark of zero repetitions has nothing to report, and would fail later on an empty fit)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def mltb_at_root(command: list[str]) -> int:
    """``mltb COMMAND`` in this process from the checkout root, its output swallowed: the exit code. Reports
    name their regeneration command relative to the root, so it must run there to write the same text."""
    import contextlib
    import io

    from mltb_core import cli

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return cli.main(command)
    finally:
        os.chdir(cwd)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", action="store_true", help="also print a FIGURES line for run_all.py")
    return p


def emit(title: str, figures: list[Figure], as_json: bool) -> None:
    """Print the figures (and, for run_all.py, one machine-readable line)."""
    print(f"\n== {title} (load average {load_average()})")
    for f in figures:
        verdict = "" if f.met is None else (" [met]" if f.met else " [NOT met]")
        target = f" (target {f.target})" if f.target else ""
        print(f"{f.name}: {f.value}{target}{verdict}" + (f" - {f.note}" if f.note else ""))
    if as_json:
        print(FIGURES_PREFIX + json.dumps({"title": title, "load": load_average(),
                                           "figures": [asdict(f) for f in figures]}), flush=True)
