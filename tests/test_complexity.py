"""No function or method in mltb_core above cyclomatic complexity 30, as radon measures it (issue 60).

radon comes with the ``dev`` extra (pinned there: another release may count differently)."""
from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mltb_core"
LIMIT = 30


def too_complex(source: str, path: str, limit: int = LIMIT) -> list[str]:
    """``path:line name (complexity)`` of each function, method or closure in ``source`` above ``limit``."""
    return [f"{path}:{block.lineno} {block.fullname} ({block.complexity})" for block in cc_visit(source)
            if isinstance(block, Function) and block.complexity > limit]


def test_no_function_or_method_in_mltb_core_is_above_the_limit():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50, modules   # the walk found the package, not an empty directory
    offenders = [found for path in modules
                 for found in too_complex(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())]
    assert not offenders, (f"{len(offenders)} function(s) above cyclomatic complexity {LIMIT} (radon); split them:\n"
                           + "\n".join(offenders))


def _branchy(name: str, branches: int, indent: str = "") -> str:
    """A function of complexity ``branches`` + 1: one ``if`` per branch."""
    body = "".join(f"{indent}    if x == {i}:\n{indent}        return {i}\n" for i in range(branches))
    return f"{indent}def {name}(x):\n{body}{indent}    return -1\n"


def test_the_check_names_each_function_and_method_above_the_limit_with_its_line_and_score():
    source = "\n".join([_branchy("at_the_limit", LIMIT - 1), _branchy("dispatch", LIMIT),
                        "class Policy:", _branchy("act", LIMIT + 4, indent="    ")])
    lines = source.splitlines()
    line_of = {name: lines.index(line) + 1 for name, line in (("dispatch", "def dispatch(x):"),
                                                              ("act", "    def act(x):"))}
    assert too_complex(source, "synthetic.py") == [f"synthetic.py:{line_of['dispatch']} dispatch ({LIMIT + 1})",
                                                  f"synthetic.py:{line_of['act']} Policy.act ({LIMIT + 5})"]
    assert too_complex(_branchy("at_the_limit", LIMIT - 1), "synthetic.py") == []
