"""Peak resident memory of a worker per bundled task: one sim trial per task in its own process.

Run: ``python benchmarks/peak_memory.py [--planner mcts_shaped] [--tasks a,b]``. The child's max RSS
comes from ``os.wait4`` (that child's own rusage, not the running maximum over all children).
Target < 2 GiB.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _bench import Figure, emit, parser

TARGET_BYTES = 2 * 2**30
CHILD = ("import sys; sys.path.insert(0, {here!r}); from _bench import sim_trial; "
         "r = sim_trial({slug!r}, {planner!r}, {out!r}); print(r.outcome, r.tree_nodes)")


def child_peak_rss(slug: str, planner: str, out: str) -> tuple[int, str]:
    """Run one trial in a fresh interpreter; (max RSS in bytes, its printed outcome)."""
    code = CHILD.format(here=str(Path(__file__).parent), slug=slug, planner=planner, out=out)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    output = proc.stdout.read().strip()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"trial on {slug} exited with {proc.returncode}")
    return usage.ru_maxrss * 1024, output  # Linux reports KiB


def main() -> None:
    from mltb_core.bench.tasks import load_tasks

    p = parser(__doc__.splitlines()[0])
    p.add_argument("--planner", default="mcts_shaped")
    p.add_argument("--tasks", help="comma list of slugs (default: every bundled task)")
    args = p.parse_args()
    tasks = load_tasks()
    slugs = args.tasks.split(",") if args.tasks else sorted(s for s, t in tasks.items() if t.source == "bundled")
    out = tempfile.mkdtemp(prefix="mltb-peak-")
    figures, worst = [], (0, "")
    for slug in slugs:
        rss, outcome = child_peak_rss(slug, args.planner, out)
        worst = max(worst, (rss, slug))
        figures.append(Figure(f"peak RSS {slug}", f"{rss / 2**20:.0f} MiB", note=f"{args.planner}: {outcome}"))
    figures.insert(0, Figure("largest worker peak RSS", f"{worst[0] / 2**20:.0f} MiB ({worst[1]})", "< 2 GiB",
                             worst[0] < TARGET_BYTES, note=f"one sim {args.planner} trial per process"))
    emit("Peak memory per worker", figures, args.json)


if __name__ == "__main__":
    main()
