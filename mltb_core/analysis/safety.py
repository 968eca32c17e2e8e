"""Making untrusted text safe, one policy per output format (the only home of these rules).

A record's ``stop_reason``, ``feedback``, ``error``, ``stage_name``, trajectory steps and the like were
written under a solver the model drives: they are hostile input for every report. Each output format has
one function here, and the renderers call it (HTML templates escape every value by themselves: Jinja2's
autoescape, :func:`html`):

- :func:`one_line`: one line of text cut to a width (encodable, no control characters);
- :func:`terminal_text`: text shown whole on a terminal (a line, or a cell tabulate sizes to fit):
  :func:`one_line`, bounded only against a runaway record;
- :func:`markdown`: Markdown (every active character backslash-escaped);
- :func:`html`: HTML (``markupsafe.escape``, what autoescape applies);
- :func:`markdown_to_html`: our own trusted Markdown prose (report sections) as HTML: escaped first, then
  the few constructs mltb's prose uses (headings, bullets, numbered lists, tables, ``code``, **bold**) turned into tags.
"""
from __future__ import annotations

import re

from markupsafe import Markup, escape

__all__ = ["one_line", "terminal_text", "markdown", "html", "markdown_to_html", "markdown_line_to_html", "Markup"]

# CommonMark: any ASCII punctuation may be escaped; '$' opens math on GitHub
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]{}()#+!|~<>&$])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")     # C0, DEL and C1 (a terminal reads \x9b as CSI)
LINE_LIMIT = 10_000     # text shown whole: long enough never to cut a real label, short enough to bound a hostile one


def one_line(text: object, limit: int = 120) -> str:
    """Untrusted text made fit for a one-line table cell: encodable (lone surrogates escaped), one line
    (control characters and newlines become a space), at most ``limit`` characters."""
    value = str(text or "").encode("utf-8", "backslashreplace").decode("utf-8")
    value = _CONTROL.sub(" ", value).strip()
    return value if len(value) <= limit else value[:limit - 1] + "…"


def terminal_text(text: object) -> str:
    """Untrusted text shown whole on a terminal (a cell name, feedback, a warning, a table cell tabulate
    sizes to fit): :func:`one_line` without a chosen width."""
    return one_line(text, LINE_LIMIT)


def markdown(text: object) -> str:
    """Untrusted text for Markdown: :func:`one_line`, then every active character (links, images, emphasis,
    headings, table pipes, tags, entities) backslash-escaped, so it renders as the same text."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", one_line(text, LINE_LIMIT))


def html(text: object) -> Markup:
    """Untrusted text for HTML (the escaping Jinja2's autoescape applies to every template value)."""
    return escape(str(text if text is not None else ""))


_CODE = re.compile(r"(?<!\\)`([^`\n]{1,400})(?<!\\)`")     # an escaped backtick is text, not a code span
_BOLD = re.compile(r"\*\*([^*\n]{1,400})\*\*")
_NUMBERED = re.compile(r"(\d{1,3})\. ")             # an item of a numbered list: "3. text", continued indented
_NEXT_NUMBERED = re.compile(r"\n(?=\d{1,3}\. )")
_ESCAPED = re.compile(r"\\([\\`*_\[\]{}()#+!|~<>&$])")


def _inline(text: str) -> str:
    """One line of trusted Markdown as HTML: escaped, then `code` and **bold**, then Markdown escapes undone."""
    out = str(escape(text))
    out = _CODE.sub(r"<code>\1</code>", out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    return _ESCAPED.sub(r"\1", out)


def markdown_line_to_html(text: str) -> Markup:
    """One line of mltb's own Markdown (a table's note) as inline HTML: no block markup, however it starts."""
    return Markup(_inline(" ".join(str(text).split())))


def markdown_to_html(text: str) -> Markup:
    """mltb's own Markdown prose (blocks split by blank lines) as HTML; every character of it is escaped
    before the few tags are made, so untrusted text escaped for Markdown inside it stays text."""
    blocks = []
    for part in text.strip().split("\n\n"):
        lines = part.splitlines()
        if not lines:
            continue
        if part.startswith("#"):
            level = min(len(part) - len(part.lstrip("#")) + 1, 6)
            blocks.append(f"<h{level}>{_inline(part.lstrip('#').strip())}</h{level}>")
        elif part.startswith("|"):
            rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))] for line in lines
                    if not set(line) <= set("|-: ")]
            head = "".join(f"<th>{_inline(c)}</th>" for c in rows[0])
            body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in rows[1:])
            blocks.append(f"<table><tr>{head}</tr>{body}</table>")
        elif all(line.startswith(("- ", "  ")) for line in lines):
            items = re.split(r"\n- ", "\n" + part)[1:]
            blocks.append("<ul>" + "".join(f"<li>{_inline(' '.join(i.split()))}</li>" for i in items) + "</ul>")
        elif (numbered := _NUMBERED.match(part)) and all(_NUMBERED.match(line) or line.startswith("   ")
                                                         for line in lines):
            items = [_NUMBERED.sub("", item, count=1) for item in _NEXT_NUMBERED.split(part)]
            blocks.append(f"<ol start='{int(numbered.group(1))}'>" + "".join(
                f"<li>{_inline(' '.join(i.split()))}</li>" for i in items) + "</ol>")
        elif part.startswith("!["):
            continue   # an image link (a figure written beside the Markdown): the HTML has it inline
        else:
            blocks.append(f"<p>{_inline(' '.join(lines))}</p>")
    return Markup("".join(blocks))
