"""The front door: the README fits a screen, its two commands are the ones CI runs, its links resolve, and
the generated option and command references match the settings table and the parser."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAIN_JOB = ('source .ci/llama_cpp_env.sh && python -m pip install -e ".[local]" && '
            "pytest suites/ --planner=mcts_shaped --task=spaceship-titanic --max-llm-calls=36")
TESTS = ('source .ci/llama_cpp_env.sh && python -m pip install -e ".[dev,local,local-smoke]" && '
         "python -m pytest tests -n 2")


def _commands(script: str, program: str) -> list[list[str]]:
    """The argument lists of each line of a shell script that runs ``program`` (quiet flags dropped)."""
    out = []
    for line in (ROOT / script).read_text(encoding="utf-8").splitlines():
        if program in line and not line.lstrip().startswith("#"):
            out.append([w for w in shlex.split(line, comments=True) if w != "-q"])
    return out


def test_the_readme_fits_a_screen_or_two():
    assert len(README.splitlines()) <= 120


def test_the_readme_keeps_the_two_commands_ci_runs():
    assert MAIN_JOB in README and TESTS in README
    # .ci/run: the test command's install and pytest, word for word (less -q)
    install, pytest_line = _commands(".ci/run", "pip install"), _commands(".ci/run", "pytest tests")
    assert install == [shlex.split('python -m pip install -e ".[dev,local,local-smoke]"')]
    assert pytest_line == [["python", "-m", "pytest", "tests", "-n", "2"]]
    assert "source .ci/llama_cpp_env.sh" in (ROOT / ".ci/run").read_text()
    # .ci/main_job_smoke.sh: the main job's install and selection (a shorter budget, in a scratch venv)
    smoke = (ROOT / ".ci/main_job_smoke.sh").read_text()
    assert 'pip install -q -e ".[local]"' in smoke and "source .ci/llama_cpp_env.sh" in smoke
    assert "-m pytest suites/" in smoke
    for word in ("--planner=mcts_shaped", "--task=spaceship-titanic"):
        assert word in smoke and word in MAIN_JOB


def test_every_path_the_readme_names_exists():
    named = set(re.findall(r"`((?:docs|reports|fixtures|\.ci)/[\w./-]+)`", README))
    named |= set(re.findall(r"\]\(((?:docs)/[\w./-]+)\)", README))
    assert "docs/options.md" in named and "docs/tree-viewer.png" in named
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, missing


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MODULE_PATH = re.compile(r"(?<![\w./-])((?:mltb_core|pytest_mltb)(?:/[\w*-][\w.*-]*)*/?)")
MODULE_NAME = re.compile(r"(?<![\w./-])((?:mltb_core|pytest_mltb)(?:\.\w+)+)")


def _named(pattern: re.Pattern) -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for doc in DOCS:
        for match in pattern.finditer(doc.read_text(encoding="utf-8")):
            named.setdefault(match.group(1).rstrip("."), set()).add(doc.name)
    return named


def test_every_module_path_the_docs_name_exists():
    """Issue 59: docs/local-model.md named mltb_core/llm/local.py after it had become a package."""
    named = _named(MODULE_PATH)
    assert "mltb_core/llm/sim.py" in named and "pytest_mltb/options.py" in named
    missing = {path: sorted(docs) for path, docs in named.items() if "*" not in path and not (ROOT / path).exists()}
    assert not missing, missing


def test_every_dotted_module_name_the_docs_name_exists():
    """``mltb_core.bench.metrics.METRICS`` and the like: the longest module found (not imported: a module whose
    optional dependency is missing still exists), then its attributes."""
    import importlib
    import importlib.util

    def exists(name: str) -> bool:
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                spec = importlib.util.find_spec(".".join(parts[:cut]))
            except ModuleNotFoundError:   # a parent is a module, not a package
                spec = None
            if spec is None:
                continue
            if cut == len(parts):
                return True
            found = importlib.import_module(".".join(parts[:cut]))
            for attr in parts[cut:]:
                if not hasattr(found, attr):
                    return False
                found = getattr(found, attr)
            return True
        return False

    named = _named(MODULE_NAME)
    assert "mltb_core.bench.metrics.METRICS" in named
    missing = {name: sorted(docs) for name, docs in named.items() if not exists(name)}
    assert not missing, missing


def test_the_generated_references_are_up_to_date():
    done = subprocess.run([sys.executable, "docs/generate.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_options_reference_lists_every_setting_and_knob():
    from mltb_core.config import SETTINGS
    from mltb_core.planners import planner_names

    planner_names()
    options = (ROOT / "docs/options.md").read_text(encoding="utf-8")
    for setting in SETTINGS:
        assert f"`{setting.flag}`" in options and f"`{setting.env}`" in options, setting.name
    assert "`--num-drafts`" in options   # a planner's knob (automind), declared on its class


def _own_planner_example() -> tuple[str, str, str]:
    """docs/extending.md's planner: the module's text, and the entry point its header declares (name, value)."""
    section = (ROOT / "docs/extending.md").read_text(encoding="utf-8").split("## Your own planner", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    name, value = re.search(r'^#\s+(\w+) = "([\w.]+:\w+)"$', code, re.M).groups()
    return code, name, value


def test_the_own_planner_example_runs_a_sim_trial_to_a_valid_submission(tmp_path):
    """The example is complete: installed as the docs say (a module and its mltb.planners entry point) and run with
    the command they give, it reaches the valid submission they promise."""
    from mltb_core.analysis.resultsfile import read_records
    from mltb_core.planners import ENTRY_POINT_GROUP

    code, name, value = _own_planner_example()
    module = value.split(":")[0]
    site = tmp_path / "site"
    info = site / f"{module}-0.1.dist-info"
    info.mkdir(parents=True)
    (site / f"{module}.py").write_text(code, encoding="utf-8")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {value}\n")
    command = re.search(r"`mltb (run [^`]+)` reaches a valid submission", (ROOT / "docs/extending.md").read_text())
    assert command and f"--planner {name}" in command.group(1)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": f"{site}:{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "mltb_core.cli", *shlex.split(command.group(1)),
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (record,) = read_records(tmp_path / "run" / "results.jsonl")
    assert (record.planner, record.outcome, record.stop_kind) == (name, "valid", "valid_submission"), record.error
