"""Environment variables are declared in one table and read in one place (mltb_core/environment.py).

Static checks over the source: no other module of the core or the plugin reads ``os.environ`` /
``os.getenv`` (writes such as the runner's TMPDIR are allowed), every name passed to the accessor is
declared, and the table's ``used_by`` says who really reads each variable.
"""
import ast
import importlib
from pathlib import Path

import pytest

import mltb_core
import pytest_mltb
from mltb_core import environment

CORE = Path(mltb_core.__file__).parent
PLUGIN = Path(pytest_mltb.__file__).parent
ACCESSOR = CORE / "environment.py"


def _module_name(path: Path) -> str:
    root = CORE if CORE in path.parents else PLUGIN
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources():
    for root in (CORE, PLUGIN):
        for path in sorted(root.rglob("*.py")):
            yield path, _module_name(path), path.read_text(encoding="utf-8")


# ------------------------------------------------------------------ no os.environ reads outside the accessor
def _environ_reads(source: str) -> list[int]:
    """Lines that read the process environment: os.environ / os.getenv / os.environb in any form except
    assigning or deleting one item (``os.environ["TMPDIR"] = ...``) or ``os.environ.update(...)``."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                any(a.name in ("environ", "environb", "getenv", "getenvb") for a in node.names):
            lines.append(node.lineno)
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"):
            continue
        if node.attr in ("getenv", "getenvb"):
            lines.append(node.lineno)
        elif node.attr in ("environ", "environb"):
            parent = parents.get(node)
            if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, (ast.Store, ast.Del)):
                continue
            if isinstance(parent, ast.Attribute) and parent.attr == "update":
                continue
            lines.append(node.lineno)
    return lines


def test_only_the_accessor_reads_the_environment():
    found = [f"{name}:{line}" for path, name, source in _sources() if path != ACCESSOR
             for line in _environ_reads(source)]
    assert found == [], f"read environment variables through mltb_core.environment.read: {found}"


def test_the_read_check_can_fail_and_allows_writes():
    probe = ("import os\nfrom os import getenv\na = os.environ.get('X')\nb = os.getenv('Y')\n"
             "c = 'Z' in os.environ\nd = dict(os.environ)\n"
             "os.environ['TMPDIR'] = '/tmp'\ndel os.environ['TMPDIR']\nos.environ.update(A='1')\n")
    assert sorted(_environ_reads(probe)) == [2, 3, 4, 5, 6]
    assert _environ_reads(ACCESSOR.read_text(encoding="utf-8"))   # the accessor itself is found (and exempt)


# ------------------------------------------------------------------ every name read is declared, used_by is true
def _accessor_names(tree: ast.Module) -> set[str]:
    """Local names bound to mltb_core.environment.read (``from ... import read as x``) or to the module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "mltb_core.environment":
            names |= {a.asname or a.name for a in node.names if a.name == "read"}
        elif isinstance(node, ast.ImportFrom) and node.module == "mltb_core":
            names |= {f"{a.asname or a.name}.read" for a in node.names if a.name == "environment"}
    return names


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return None


def _accessor_calls(module: str, source: str):
    """(line, argument) of each call of the accessor; the argument resolved to its text where it is a
    literal or a module-level / imported constant, else None (a name only known at run time)."""
    tree = ast.parse(source)
    accessors = _accessor_names(tree)
    imported = {a.asname or a.name: (node.module, a.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mltb_core")
                for a in node.names}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _call_name(node.func) in accessors and node.args):
            continue
        arg = node.args[0]
        value = None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            value = arg.value
        elif isinstance(arg, ast.Name):
            owner, attr = imported.get(arg.id, (module, arg.id))
            candidate = getattr(importlib.import_module(owner), attr, None)
            value = candidate if isinstance(candidate, str) else None
        yield node.lineno, value


def _reads():
    """(module, variable) for every read of the accessor, and the calls whose name is only known at run time."""
    pairs, dynamic = set(), set()
    for path, module, source in _sources():
        if path == ACCESSOR:
            continue
        for _, name in _accessor_calls(module, source):
            if name is None:
                dynamic.add(module)
            else:
                pairs.add((module, name))
    return pairs, dynamic


def test_every_variable_read_is_declared_and_its_readers_are_listed():
    from mltb_core.config import SETTINGS
    from mltb_core.llm.openai_backend import RETRY_ENV

    pairs, dynamic = _reads()
    # the two readers that take the name from a table: the retry policy and the settings
    assert dynamic == {"mltb_core.llm.openai_backend", "mltb_core.config"}, dynamic
    pairs |= {("mltb_core.llm.openai_backend", name) for name in RETRY_ENV}
    pairs |= {("mltb_core.config", s.env) for s in SETTINGS}
    declared = environment.declared()
    undeclared = sorted(f"{module} reads {name}" for module, name in pairs if name not in declared)
    unlisted = sorted(f"{module} reads {name}" for module, name in pairs
                      if name in declared and module not in declared[name].used_by)
    assert not undeclared and not unlisted, (undeclared, unlisted)
    # and the other way: each reader the table names does read the variable (no stale entries)
    stale = sorted(f"{v.name}: {module}" for v in environment.ENVIRONMENT for module in v.used_by
                   if (module, v.name) not in pairs)
    assert stale == [], stale


def test_the_table_names_each_variable_once_and_marks_third_party_names():
    names = [v.name for v in environment.ENVIRONMENT]
    assert len(names) == len(set(names))
    third = {v.name for v in environment.ENVIRONMENT if v.third_party}
    assert third == {"OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "CI"}
    assert all(v.name.startswith("MLTB_") for v in environment.ENVIRONMENT if not v.third_party)
    assert all(v.meaning and v.default and v.used_by for v in environment.ENVIRONMENT)


# ------------------------------------------------------------------ the accessor
def test_read_returns_the_value_or_none_and_refuses_an_undeclared_name(monkeypatch):
    monkeypatch.setenv("MLTB_PRICES", "/somewhere/prices.toml")
    assert environment.read("MLTB_PRICES") == "/somewhere/prices.toml"
    monkeypatch.delenv("MLTB_PRICES")
    assert environment.read("MLTB_PRICES") is None
    monkeypatch.setenv("MLTB_NOT_A_VARIABLE", "x")
    with pytest.raises(KeyError, match="MLTB_NOT_A_VARIABLE is not a declared environment variable"):
        environment.read("MLTB_NOT_A_VARIABLE")


def test_the_settings_variables_are_declared_by_config_and_config_reexports_the_table(monkeypatch):
    from mltb_core import config

    assert config.ENVIRONMENT is environment.ENVIRONMENT and config.EnvironmentVariable is environment.EnvironmentVariable
    assert all(environment.is_declared(s.env) for s in config.SETTINGS)
    # MLTB_TASKS_DIR is both a setting's variable and bench.tasks' own: the table's entry is kept
    assert "mltb_core.bench.tasks" in environment.declared()["MLTB_TASKS_DIR"].used_by
    monkeypatch.setenv("MLTB_MAX_ITERATIONS", "7")
    assert config.read_environment(config.SETTINGS)["max_iterations"] == "7"
    assert config.read_environment(config.SETTINGS, {"MLTB_MAX_ITERATIONS": "3"}) == {"max_iterations": "3"}


@pytest.mark.parametrize("name, value, message", [
    ("MLTB_LLM_TIMEOUT", "soon", "bad environment variable MLTB_LLM_TIMEOUT must be a number, got 'soon'"),
    ("MLTB_DATA_SOURCE", "cloud", "bad environment variable MLTB_DATA_SOURCE='cloud': expected one of"),
    ("MLTB_TOOL_MEMORY_LIMIT", "lots", "bad environment variable MLTB_TOOL_MEMORY_LIMIT: not a size: 'lots'"),
    ("MLTB_THREADS", "many", "bad value for MLTB_THREADS='many'"),
    ("MLTB_DRAFT_TOKENS", "lots", "bad environment variable MLTB_DRAFT_TOKENS must be a whole number from 0 to 64"),
    ("MLTB_DRAFT_TOKENS", "-1", "bad environment variable MLTB_DRAFT_TOKENS must be a whole number from 0 to 64"),
])
def test_the_start_up_check_reads_through_the_accessor(monkeypatch, name, value, message):
    from mltb_core.config import EnvironmentValueError, check_environment

    monkeypatch.setenv(name, value)
    with pytest.raises(EnvironmentValueError) as caught:
        check_environment()
    assert str(caught.value).startswith(message), str(caught.value)


def test_every_start_up_check_runs_when_its_variable_is_set():
    # a check keyed by a module no variable names as its reader never runs (the MLTB_DRAFT_TOKENS slip)
    from mltb_core import config
    from mltb_core.environment import ENVIRONMENT

    readers = {module for variable in ENVIRONMENT for module in variable.used_by}
    assert {module for module, _ in config._ENVIRONMENT_CHECKS} - readers == set()
