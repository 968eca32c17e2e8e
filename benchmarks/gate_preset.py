"""What the CI gate's preset catches, and (with ``--run``) how long it takes.

The behaviour rule (mltb_core/analysis/compare.py, ``_behaviour``) fails a synthetic-policy planner that
keeps none of a cell's valid submissions, or at most 1 - ``--gate-lost-share`` of them over its tasks. For the
preset's trials and tasks this prints, exactly (``compare.behaviour_fire_probability``): how often the rule
fires on a change that moves no rate but draws the outcomes afresh (its cost), on a planner that stops
submitting, and the smallest drop of the rate it flags with 80 % power. ``--run`` times the preset's baseline
run (``pytest suites/ --gate-preset=ci -n 2 --save-baseline``) and counts its valid trials per cell.

    python benchmarks/gate_preset.py [--run [--baseline-out benchmarks/baseline-sim.json]] [--json]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import ROOT, Figure, emit, parser

from mltb_core.analysis.compare import behaviour_fire_probability
from mltb_core.config import GATE_LOST_SHARE, GATE_PRESETS

POWER = 0.8
DROP = 0.05          # the documented spec's consistency drop (docs/gating.md)


def smallest_flagged_drop(trials: int, tasks: int, before: float) -> float | None:
    """The smallest drop of the rate (to 0.01) that the rule flags with probability POWER, or None."""
    for hundredths in range(1, int(round(before * 100)) + 1):
        drop = hundredths / 100
        if behaviour_fire_probability(trials, tasks, before, before - drop, DROP) >= POWER:
            return drop
    return None


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--run", action="store_true", help="also time the preset's baseline run")
    p.add_argument("--baseline-out", type=Path, help="with --run: keep its baseline here (the workflow's is "
                                                     "benchmarks/baseline-sim.json)")
    args = p.parse_args()
    preset = GATE_PRESETS["ci"]
    trials, tasks = int(preset["trials"]), len(preset["task"].split(","))
    figures = []
    print(f"preset: {trials} trials per cell, {tasks} tasks, --gate-lost-share {GATE_LOST_SHARE:g}, drop {DROP:g}")
    print(f"{'baseline rate':>14} {'fires, no rate moved':>21} {'fires, stopped':>15} {'80 % power from a drop of':>26}")
    for before in (0.25, 0.5, 0.75, 1.0):
        null = behaviour_fire_probability(trials, tasks, before, before, DROP)
        stopped = behaviour_fire_probability(trials, tasks, before, 0.0, DROP)
        flagged = smallest_flagged_drop(trials, tasks, before)
        print(f"{before:>14.2f} {null:>21.3f} {stopped:>15.3f} {('none' if flagged is None else f'{flagged:.2f}'):>26}")
        figures.append(Figure(f"rate {before:g}: fires with no rate moved / stopped / 80 % power drop",
                              f"{null:.3f} / {stopped:.3f} / {flagged}"))
    if args.run:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "MLTB_CACHE": str(Path(tmp) / "cache")}     # fresh caches, as on a CI runner
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "pytest", "suites/", "--gate-preset=ci", "-n", "2", "-q",
                                   "-p", "no:cacheprovider", f"--mltb-out={tmp}/run",
                                   f"--save-baseline={tmp}/baseline.json"], cwd=ROOT, env=env,
                                  capture_output=True, text=True)
            wall = time.monotonic() - start
            cells = json.loads(Path(f"{tmp}/baseline.json").read_text())["cells"]
            if args.baseline_out:
                args.baseline_out.write_text(Path(f"{tmp}/baseline.json").read_text())
        valid = sum(c["consistency"]["valid"] for c in cells.values())
        n = sum(c["n"] for c in cells.values())
        never = sorted(name for name, c in cells.items() if c["consistency"]["valid"] == 0)
        print(f"baseline run: {wall / 60:.1f} min (exit {done.returncode}), {valid} of {n} trials valid; "
              f"cells with no valid trial (nothing to lose): {len(never)} of {len(cells)}")
        figures.append(Figure("preset baseline run, minutes", f"{wall / 60:.1f}", "<= 10", wall <= 600))
        figures.append(Figure("valid trials / trials", f"{valid}/{n}", note=f"{len(never)} cells with none"))
    emit("the CI gate's preset", figures, args.json)


if __name__ == "__main__":
    main()
