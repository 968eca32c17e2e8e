"""HTML from templates: Jinja2 with autoescape on, the templates, CSS and script as package files
(``mltb_core/analysis/templates/``). Every value a template shows is escaped unless it is marked safe;
only mltb's own markup is (tables tabulate escaped, SVG matplotlib wrote, prose :func:`safety.markdown_to_html`
escaped first)."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

__all__ = ["render", "TEMPLATES", "asset"]

TEMPLATES = Path(__file__).resolve().parent / "templates"


@functools.lru_cache(maxsize=None)
def asset(name: str) -> str:
    """A package file of the templates directory (the report's CSS, the tree viewer's script)."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    try:
        import jinja2
    except ImportError:  # pragma: no cover - a dependency; named when missing
        raise ImportError("mltb report writes HTML with Jinja2: pip install 'jinja2>=3.1'") from None
    from mltb_core.analysis.safety import markdown_line_to_html, markdown_to_html

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["markdown"] = markdown_to_html
    env.filters["markdown_line"] = markdown_line_to_html
    env.globals["asset"] = asset
    return env


def render(template: str, **context: Any) -> str:
    """``template`` rendered with ``context`` (a missing name is an error, never an empty string)."""
    return _environment().get_template(template).render(**context)
