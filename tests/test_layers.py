"""The import graph of mltb_core follows its layers: no module imports a higher layer, none imports pytest.

Layers, lowest first, as documented in mltb_core/__init__.py and docs/architecture.md. Modules at the
package root (``mltb_core.config``, ``mltb_core.cli``) are layers of their own.
"""
import ast
from pathlib import Path

import mltb_core

LAYERS = ["environment", "plugins", "bench", "toolkit", "llm", "config", "stages", "planners", "analysis", "runner", "cli"]
PACKAGE = Path(mltb_core.__file__).parent


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "mltb_core" or len(parts) < 2:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def _module_name(path: Path) -> str:
    parts = ["mltb_core", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, name: str, is_package: bool):
    """Absolute names of everything the source imports (relative imports resolved), with line numbers."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def _violations(source: str, name: str, is_package: bool = False):
    found = []
    own = _layer(name)
    for target, line in _imports(source, name, is_package):
        where = f"{name}:{line}"
        if target.split(".")[0] in ("pytest", "_pytest", "pytest_mltb", "xdist"):
            found.append(f"{where} imports {target} (the core never imports pytest)")
        theirs = _layer(target)
        if own is not None and theirs is not None and theirs > own:
            found.append(f"{where} ({LAYERS[own]}) imports {target} ({LAYERS[theirs]}, a higher layer)")
    return found


def _package_violations():
    return [v for path in sorted(PACKAGE.rglob("*.py"))
            for v in _violations(path.read_text(), _module_name(path), path.name == "__init__.py")]


def test_every_core_module_belongs_to_a_layer():
    orphans = [_module_name(p) for p in PACKAGE.rglob("*.py")
               if p.parent != PACKAGE and _layer(_module_name(p)) is None]
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert not orphans and top <= set(LAYERS), (orphans, top - set(LAYERS))


def test_no_module_imports_a_higher_layer():
    assert _package_violations() == []


def test_the_check_catches_upward_and_pytest_imports():
    # the checker itself can fail: relative and absolute upward imports and pytest are all reported
    probe = "from ..planners import base\nimport mltb_core.runner.trial\nimport pytest\n"
    found = _violations(probe, "mltb_core.bench.probe")
    assert len(found) == 3 and "planners" in found[0] and "runner" in found[1] and "pytest" in found[2]
    assert _violations("from . import tasks\nfrom ..toolkit import registry\n", "mltb_core.planners.probe") == []


def test_the_public_api_resolves_and_importing_the_package_stays_light():
    import subprocess
    import sys

    for name in mltb_core.__all__:
        assert getattr(mltb_core, name) is not None, name
    # a bare `import mltb_core` (what the pytest plugin pays in every run) loads none of the layers
    code = "import sys, mltb_core; print(sorted(m for m in sys.modules if m.startswith('mltb_core.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


LLM = PACKAGE / "llm"
LOCAL = LLM / "local"
# the only modules outside the fence that name the local package beyond its table of named models (a table,
# read by reports too): the backend spec, the settings that read its environment knobs
LOCAL_NAMED_BY = {"mltb_core.llm.backends", "mltb_core.config"}
LOCAL_TABLE = "mltb_core.llm.local.models"


def _python_files(*roots: Path) -> list[Path]:
    return [p for root in roots for p in sorted(root.rglob("*.py"))]


def test_the_local_model_is_fenced():
    """llama_cpp is imported only inside mltb_core/llm/local/, the package (beyond its model table) is named
    only by the backend spec and the settings, and the pytest plugin names no backend at all."""
    plugin = PACKAGE.parent / "pytest_mltb"
    leaks = []
    for path in _python_files(PACKAGE, plugin):
        inside = LOCAL in path.parents
        name = _module_name(path) if PACKAGE in path.parents else f"pytest_mltb.{path.stem}"
        for target, line in _imports(path.read_text(), name, path.name == "__init__.py"):
            if target.split(".")[0] == "llama_cpp" and not inside:
                leaks.append(f"{name}:{line} imports {target}")
            if (target.startswith("mltb_core.llm.local") and not target.startswith(LOCAL_TABLE) and not inside
                    and name not in LOCAL_NAMED_BY):
                leaks.append(f"{name}:{line} imports {target}")
    assert leaks == []
    assert [p.name for p in plugin.glob("*.py") if '"local"' in p.read_text() or "'local'" in p.read_text()] == []


def test_no_class_is_defined_inside_a_function_in_llm():
    """Classes at module level, taking what they need explicitly: a class made inside a function (a closure
    over an engine) cannot be imported or tested alone."""
    nested = []
    for path in _python_files(LLM):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested += [f"{path.relative_to(PACKAGE)}:{inner.lineno} {inner.name} in {node.name}"
                           for inner in ast.walk(node) if isinstance(inner, ast.ClassDef)]
    assert nested == []


def _imported_modules(path: Path) -> set[str]:
    return {target for target, _ in _imports(path.read_text(), _module_name(path), path.name == "__init__.py")}


def test_the_tool_worker_and_the_trial_environment_import_no_planner():
    # the worker runs the trial environment (stages/) and nothing of the search above it: a reply's walk goes
    # planners -> runner -> stages, one way
    worker = _imported_modules(PACKAGE / "runner" / "worker.py")
    assert not [m for m in worker if m.startswith("mltb_core.planners")]
    assert any(m.startswith("mltb_core.stages.workspace") for m in worker)
    for path in sorted((PACKAGE / "stages").glob("*.py")):
        found = [m for m in _imported_modules(path) if m.startswith(("mltb_core.planners", "mltb_core.runner"))]
        assert not found, (path.name, found)
