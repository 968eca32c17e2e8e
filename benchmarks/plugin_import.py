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

from _bench import Figure, ROOT, count, emit, parser

TARGET_SECONDS = 0.1


def pytest_command(with_plugin: bool) -> list[str]:
    plugin = [] if with_plugin else ["-p", "no:mltb"]
    return [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *plugin]


def timed_run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+sys) of one run; CPU time is the steadier figure on a loaded box."""
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({child.returncode}):\n{output.decode(errors='replace')}")
    return elapsed, usage.ru_utime + usage.ru_stime


def extra_imports(cwd: Path, env: dict[str, str]) -> tuple[float, list[str]]:
    """Self import time (ms, ``python -X importtime``) summed over the modules a ``pytest --co`` run imports
    with the plugin and not without it, and the top-level packages among them."""
    def imported(with_plugin: bool) -> dict[str, int]:
        done = subprocess.run([sys.executable, "-X", "importtime", *pytest_command(with_plugin)[1:]],
                              cwd=cwd, env=env, capture_output=True, text=True)
        times: dict[str, int] = {}
        for line in done.stderr.splitlines():
            if line.startswith("import time:") and line.count("|") == 2:
                self_us, _, name = line[len("import time:"):].split("|")
                if self_us.strip().isdigit():
                    times[name.strip()] = int(self_us)
        return times

    without = imported(False)
    extra = {name: us for name, us in imported(True).items() if name not in without}
    return sum(extra.values()) / 1000, sorted({name.split(".")[0] for name in extra})


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=count, default=7)
    args = p.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory(prefix="mltb-empty-project-") as tmp:
        project = Path(tmp)
        (project / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
        (project / "pytest.ini").write_text("[pytest]\n")
        timed_run(pytest_command(True), project, env)   # warm the file cache once for both
        runs = {True: [], False: []}
        for _ in range(args.runs):
            for with_plugin in (True, False):
                runs[with_plugin].append(timed_run(pytest_command(with_plugin), project, env))
        import_ms, packages = extra_imports(project, env)
    note = f"median of {args.runs} interleaved runs each, empty project (1 trivial test), pytest --co -q"
    figures = []
    for index, what in ((1, "CPU"), (0, "wall")):
        with_plugin = statistics.median(r[index] for r in runs[True])
        without = statistics.median(r[index] for r in runs[False])
        cost = with_plugin - without
        figures.append(Figure(f"plugin cost per pytest run ({what})", f"{cost:+.3f} s", f"<= {TARGET_SECONDS} s",
                              cost <= TARGET_SECONDS,
                              note=f"{with_plugin:.3f} s with mltb, {without:.3f} s with -p no:mltb; {note}"))
    figures.append(Figure("import time the plugin adds", f"{import_ms:.0f} ms",
                          note=f"python -X importtime, self times of the modules only the mltb run imports; "
                               f"packages: {', '.join(packages) or 'none'}"))
    emit("Plugin cost when no benchmark item is collected", figures, args.json)


if __name__ == "__main__":
    main()
