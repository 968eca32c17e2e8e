"""One policy per output format for untrusted text (mltb_core/analysis/safety.py), and HTML only from
autoescaped templates: no renderer of mltb_core/analysis escapes HTML by hand."""
from __future__ import annotations

from pathlib import Path

from mltb_core.analysis import safety

ANALYSIS = Path(__file__).resolve().parents[1] / "mltb_core" / "analysis"


def test_each_format_has_its_rule():
    hostile = "<script>alert(1)</script> | [x](http://e) **b**\n\x00next"
    assert safety.one_line(hostile, 30) == "<script>alert(1)</script> | […"   # one line, cut at 30
    assert "\n" not in safety.one_line(hostile) and "\x00" not in safety.one_line(hostile)
    assert "\\<script\\>" in safety.markdown(hostile) and "\\|" in safety.markdown(hostile)
    assert str(safety.html(hostile)).startswith("&lt;script&gt;")


def test_markdown_prose_becomes_html_with_every_character_escaped_first():
    prose = f"- a `tool` and **bold**\n- {safety.markdown('<img src=x onerror=1>')}\n\n| a | b |\n|---|---|\n| <i> | 2 |"
    out = str(safety.markdown_to_html(prose))
    assert "<code>tool</code>" in out and "<strong>bold</strong>" in out
    assert "<img" not in out and "&lt;img src=x onerror=1&gt;" in out and "<td>&lt;i&gt;</td>" in out


def test_no_hand_escaping_left_in_the_analysis_package():
    for path in ANALYSIS.rglob("*.py"):
        text = path.read_text()
        assert "html.escape" not in text and "import html\n" not in text, path


def test_comparisons_warn_when_runs_mix_machines():
    from mltb_core.analysis.reports import _machine_warnings
    from mltb_core.analysis.records import TrialRecord

    def record(machine):
        return TrialRecord(task="spaceship-titanic", planner="react", model="sim", trial=0, seed=0,
                           config_hash="h", outcome="valid", machine=machine)

    one, other = {"cpu": "A", "cores": 2}, {"cpu": "B", "cores": 8}
    assert _machine_warnings([record(one)], [record(one)]) == []
    assert "mix machines" in _machine_warnings([record(one)], [record(other)])[0]
    assert "do not record their machine" in _machine_warnings([record(one)], [record(None)])[0]


def test_escaped_backticks_and_underscores_stay_text():
    from mltb_core.analysis.safety import markdown, markdown_line_to_html
    from mltb_core.analysis.tables import markdown_label

    # a records file's text escaped for Markdown, shown in HTML: no code span, no emphasis made of it
    assert markdown_line_to_html(markdown("`code` **big**")) == "`code` **big**"
    assert markdown_line_to_html("mltb's `own` code") == "mltb&#39;s <code>own</code> code"
    assert markdown_label("_x_") == "\\_x\\_" and markdown_label("org/_m") == "org/\\_m"
    assert markdown_label("mcts_shaped@abc123 · qwen2.5-coder-1.5b") == "mcts_shaped@abc123 · qwen2.5-coder-1.5b"
