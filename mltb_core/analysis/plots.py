"""One home for the reports' figures: a headless pyplot and SVG text that is the same for the same figure.

matplotlib stamps an SVG with the time it was written and gives its clip paths random ids, so a report
re-rendered from unchanged records would differ in every plot; a fixed salt and no date keep re-renders
byte-identical, and a diff of a regenerated report shows only what changed.
"""
from __future__ import annotations

import io
import re
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["pyplot", "figure_svg", "inline_svg"]

SVG_SALT = "mltb"   # seeds matplotlib's SVG ids (svg.hashsalt)


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend (no display), labels kept as SVG text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"   # labels stay text: searchable, selectable, smaller
    # labels hold model names from records files: a '$' pair there is text, never a formula to parse (or fail on)
    plt.rcParams["text.parse_math"] = False
    return plt


def figure_svg(fig: Figure) -> str:
    """The figure as a standalone SVG document (XML prolog included); closes the figure."""
    import matplotlib

    plt = pyplot()
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": SVG_SALT}):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    # a label from a records file may hold control characters, which XML forbids: the file would not parse
    return _NOT_XML.sub(" ", buffer.getvalue())


_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def inline_svg(text: str) -> str:
    """An SVG document without its XML prolog, to embed in HTML."""
    return text[text.index("<svg"):]
