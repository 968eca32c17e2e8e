"""Per-task wall time and peak memory of the expert reference trajectories.

    python benchmarks/expert.py                  # every offline task, one fresh process each
    python benchmarks/expert.py spaceship-titanic --seed 1
    python benchmarks/expert.py --in-process     # faster; peak memory is then RSS growth only

Each task runs in its own Python process (``mltb expert TASK --json``) so its peak-memory figure
(resident-set growth sampled every 20 ms while the calls run) is not hidden by memory an earlier
task left allocated. Wall time covers the tool calls only, not the interpreter start or the split.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from tabulate import tabulate


def run_in_subprocess(slug: str, seed: int) -> dict[str, Any]:
    """One task's expert run in a fresh interpreter; returns the `mltb expert --json` document."""
    done = subprocess.run([sys.executable, "-m", "mltb_core.cli", "expert", slug, "--seed", str(seed), "--json"],
                          capture_output=True, text=True)
    if not done.stdout.strip():
        raise RuntimeError(f"{slug}: mltb expert failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def run_in_process(slug: str, seed: int) -> dict[str, Any]:
    from mltb_core.runner.expert import run_expert
    from mltb_core.bench.tasks import get_task

    return run_expert(get_task(slug), seed=seed).to_dict()


def row(document: dict[str, Any]) -> list[Any]:
    grade = document.get("grade") or {}
    failed = sum(not c["ok"] for c in document["calls"])

    def number(value: Any, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    return [document["task"], len(document["calls"]), failed, "yes" if grade.get("valid") else "NO",
            grade.get("metric") or "-", number(grade.get("score"), 4), number(grade.get("percentile"), 1),
            number(grade.get("normalized"), 3), f"{document['wall_seconds']:.2f}", f"{document['peak_mib']:.0f}"]


def main(argv: list[str] | None = None) -> int:
    from mltb_core.runner.expert import expert_slugs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="*", help="task slugs (default: every task with an expert)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--in-process", action="store_true", help="run all tasks in this process")
    parser.add_argument("--json", action="store_true", help="print the per-task documents as one JSON list")
    args = parser.parse_args(argv)
    slugs = args.tasks or expert_slugs()
    runner = run_in_process if args.in_process else run_in_subprocess
    documents = []
    for slug in slugs:
        documents.append(runner(slug, args.seed))
        if not args.json:
            print(f"{slug}: {documents[-1]['wall_seconds']:.2f}s", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(documents, indent=2))
    else:
        headers = ["task", "calls", "failed", "valid", "metric", "score", "percentile", "normalized", "wall s",
                   "peak MiB"]
        print(tabulate([row(d) for d in documents], headers=headers, tablefmt="github", disable_numparse=True))
        total = sum(d["wall_seconds"] for d in documents)
        print(f"\n{len(documents)} tasks, {total:.1f}s of tool calls in all (seed {args.seed}, 1 thread)")
    bad = [d["task"] for d in documents if not d.get("all_ok") or not (d.get("grade") or {}).get("valid")]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
