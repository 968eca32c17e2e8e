"""Plugin cost for projects that never use it: ``pytest --co -q`` on an empty project, with and without mltb.

Run: ``python benchmarks/plugin_import.py [--runs 7]``. The mltb plugin is loaded through its
``pytest11`` entry point in every pytest run of the environment (the entry point names the module,
and PYTHONPATH makes it this checkout's); that is compared with ``-p no:mltb`` on a project holding
one trivial test. Figures: median wall
seconds of N runs each (interleaved, so load drifts hit both), their difference, and the modules the
plugin pulls in (``python -X importtime``), largest first.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import Figure, emit, parser

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.1


def pytest_command(with_plugin: bool) -> list[str]:
    plugin = [] if with_plugin else ["-p", "no:mltb"]
    return [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *plugin]


def wall_seconds(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed


def heaviest_imports(cwd: Path, env: dict[str, str], top: int = 5) -> list[tuple[str, float]]:
    """Top-level modules imported in a ``pytest --co`` run with the plugin and not without it, by
    cumulative import time (ms)."""
    def imported(with_plugin: bool) -> dict[str, float]:
        done = subprocess.run([sys.executable, "-X", "importtime", *pytest_command(with_plugin)[1:]],
                              cwd=cwd, env=env, capture_output=True, text=True)
        times: dict[str, float] = {}
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit():
                times[name.strip()] = int(cumulative) / 1000
        return times

    without = imported(False)
    extra = {name: ms for name, ms in imported(True).items() if name not in without and "." not in name}
    return sorted(extra.items(), key=lambda kv: -kv[1])[:top]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory(prefix="mltb-empty-project-") as tmp:
        project = Path(tmp)
        (project / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
        (project / "pytest.ini").write_text("[pytest]\n")
        wall_seconds(pytest_command(True), project, env)   # warm the file cache once for both
        with_plugin, without = [], []
        for _ in range(args.runs):
            with_plugin.append(wall_seconds(pytest_command(True), project, env))
            without.append(wall_seconds(pytest_command(False), project, env))
        imports = heaviest_imports(project, env)
    cost = statistics.median(with_plugin) - statistics.median(without)
    note = f"median of {args.runs} runs each, empty project (1 trivial test), pytest --co -q"
    figures = [
        Figure("pytest --co with mltb", f"{statistics.median(with_plugin):.3f} s", note=note),
        Figure("pytest --co with -p no:mltb", f"{statistics.median(without):.3f} s", note=note),
        Figure("plugin cost per pytest run", f"{cost:+.3f} s", f"<= {TARGET_SECONDS} s", cost <= TARGET_SECONDS,
               note=f"spread with: {min(with_plugin):.3f}-{max(with_plugin):.3f} s, "
                    f"without: {min(without):.3f}-{max(without):.3f} s"),
        Figure("top-level modules the plugin imports", ", ".join(f"{n} {ms:.0f} ms" for n, ms in imports) or "none",
               note="python -X importtime, cumulative"),
    ]
    emit("Plugin cost when no benchmark item is collected", figures, args.json)


if __name__ == "__main__":
    main()
