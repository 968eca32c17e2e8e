"""Wall time and heavy imports of the `mltb` commands that should start at once (issue 35): each command in a
fresh interpreter, the best of REPEATS runs, and whether pandas / scikit-learn / a booster got imported.

    python benchmarks/cli_startup.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from _bench import count

COMMANDS = (["--version"], ["--help"], ["tasks"], ["models"], ["run", "--help"])
HEAVY = ("pandas", "sklearn", "xgboost", "lightgbm", "catboost")
PROBE = ("import sys\nfrom mltb_core.cli import main\nimport contextlib, io\n"
         "with contextlib.redirect_stdout(io.StringIO()): main(sys.argv[1:])\n"
         f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")


def measure(command: list[str], repeats: int) -> tuple[float, str]:
    best, heavy = float("inf"), ""
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", PROBE, *command], capture_output=True, text=True, check=True)
        best = min(best, time.perf_counter() - start)
        heavy = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return best, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=count, default=5)
    args = parser.parse_args()
    print("| command | best of %d (s) | heavy modules imported |\n|---|---|---|" % args.repeats)
    for command in COMMANDS:
        seconds, heavy = measure(command, args.repeats)
        print(f"| `mltb {' '.join(command)}` | {seconds:.2f} | {heavy or 'none'} |")


if __name__ == "__main__":
    main()
