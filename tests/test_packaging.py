"""A normal (non-editable) install holds everything mltb reads: the code, the suite, and every file of
fixtures/ as package data; and the confined solver cannot read that data once it sits in site-packages."""
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import setuptools

from mltb_core.bench.fixtures import FIXTURES
from mltb_core.runner.confine import _excluding

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
# Where each distributed package's files come from in the repository.
SOURCES = {"mltb_fixtures": "fixtures", "mltb_suites": "suites", "mltb_core": "mltb_core", "pytest_mltb": "pytest_mltb"}


def _files(top: Path) -> set[str]:
    return {p.relative_to(top).as_posix() for p in top.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_every_package_of_the_code_is_listed_for_the_distribution():
    found = set(setuptools.find_packages(str(ROOT), include=["mltb_core*", "pytest_mltb*"]))
    missing = found - set(SETUPTOOLS["packages"])
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"
    assert {"mltb_fixtures", "mltb_suites"} <= set(SETUPTOOLS["packages"])
    assert SETUPTOOLS["package-dir"]["mltb_fixtures"] == "fixtures" and SETUPTOOLS["package-dir"]["mltb_suites"] == "suites"


def test_a_checkout_reads_its_own_fixtures():
    assert FIXTURES == ROOT / "fixtures"


def test_the_built_package_ships_every_file_and_runs_from_elsewhere(tmp_path):
    """setuptools' build_py (what a wheel holds for pure-Python code) on a copy of the sources, then
    the built tree alone on the path, from another directory: tasks, leaderboards and prices load."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in SOURCES.values():
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = tmp_path / "build"
    done = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py", "-d", str(build)],
                          cwd=src, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    for package, source in SOURCES.items():
        missing = _files(ROOT / source) - _files(build / package)
        assert not missing, f"{package} lacks {sorted(missing)[:10]}: widen [tool.setuptools.package-data] globs"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("from mltb_core.bench.fixtures import FIXTURES; from mltb_core.bench.tasks import load_tasks; "
             "from mltb_core.llm.prices import DEFAULT_PRICES; tasks = load_tasks(); "
             "from mltb_core.analysis.treeview import tree_from_steps, tree_page; "
             "print(FIXTURES); print(len(tasks)); print(DEFAULT_PRICES.is_file()); "
             "print('tv-detail' in tree_page(tree_from_steps([])))")   # the report's templates are package data
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(build)}
    ran = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    where, count, prices, templates = ran.stdout.split()
    assert Path(where) == build / "mltb_fixtures"
    assert int(count) == len(list((ROOT / "fixtures" / "tasks").glob("*.toml"))) and prices == "True"
    assert templates == "True"


def test_confined_reads_leave_out_the_bundled_data_even_through_links(tmp_path):
    """Landlock only grants: site-packages is split so the fixtures directory is never granted;
    a venv's lib64 -> lib link (Landlock follows links) and a link loop are handled."""
    site = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    (site / "mltb_fixtures" / "data").mkdir(parents=True)
    (site / "pandas").mkdir()
    (site / "loop").symlink_to(tmp_path / "venv")
    (tmp_path / "venv" / "bin").mkdir()
    (tmp_path / "venv" / "lib64").symlink_to(tmp_path / "venv" / "lib")
    hidden = site / "mltb_fixtures"
    granted = _excluding([str(tmp_path / "venv"), str(tmp_path / "venv" / "lib64"), str(hidden / "data")], hidden)
    assert sorted(granted) == sorted([str(tmp_path / "venv" / "bin"), str(site / "pandas")])
    assert not any(Path(p).resolve().is_relative_to(hidden) or hidden.is_relative_to(Path(p).resolve()) for p in granted)
    assert _excluding(["/usr"], hidden) == ["/usr"]


def test_each_named_models_extra_pins_exactly_its_parts():
    """The model-part pins have one meaning in two files: pyproject.toml's extra (what pip installs) and
    llm/local/models.py's parts (what mltb hashes and assembles). Each model's extra must pin every part at the
    version models.py checks, and hold no other package but llama-cpp-python, pinned to the tested range."""
    import re

    from mltb_core.llm.local.models import LLAMA_CPP_REQUIREMENT, MODELS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for model in MODELS.values():
        requirements = {re.split(r"[<>=!~\[;\s]", req, maxsplit=1)[0]: req for req in extras[model.extra]}
        assert set(requirements) - {"llama-cpp-python"} == {part.package for part in model.parts}, model.extra
        assert requirements["llama-cpp-python"] == LLAMA_CPP_REQUIREMENT, model.extra
        for part in model.parts:
            assert requirements[part.package] == part.requirement, (model.extra, part.package)
