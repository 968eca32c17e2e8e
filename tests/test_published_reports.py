"""The project's published reports are written by `mltb report --markdown`, whose header gives the command:
running that command on the committed records gives the committed files, byte for byte."""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from mltb_core import cli

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ("reports/local-llm.md", "reports/local-llm-ablation.md", "reports/main-job.md",
             "reports/planner-comparison.md", "reports/archive/local-llm-superseded-5ec1040.md",
             "reports/archive/main-job-superseded-4ae025a.md", "reports/archive/main-job-superseded-5d5f4ac.md",
             "reports/archive/main-job-superseded-5062b22.md", "reports/archive/main-job-superseded-1f40a6b.md")
HEADER = re.compile(r"^Written by `(mltb report [^`]+)`", re.M)
INDEX = ROOT / "reports" / "README.md"


def header_command(path: Path) -> list[str]:
    match = HEADER.search(path.read_text(encoding="utf-8"))
    assert match, f"{path} does not say which `mltb report` command wrote it"
    return shlex.split(match.group(1))


@pytest.mark.parametrize("published", PUBLISHED)
def test_the_header_command_regenerates_the_committed_report(published, tmp_path, monkeypatch):
    committed = ROOT / published
    argv = header_command(committed)
    assert argv[argv.index("--markdown") + 1] == published
    target = tmp_path / Path(published).name
    argv[argv.index("--markdown") + 1] = str(target)
    monkeypatch.chdir(ROOT)            # the command runs from the checkout root, as the header's paths are
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(argv[1:]) == 0
    text = target.read_text(encoding="utf-8").replace(shlex.quote(str(target)), published, 1)
    assert text == committed.read_text(encoding="utf-8")
    for figure in tmp_path.glob("*.svg"):   # figures beside it (the critical-difference diagram)
        assert figure.read_bytes() == (committed.parent / figure.name).read_bytes()


def test_no_published_report_is_rendered_outside_the_product():
    """benchmarks/ drives runs; it renders no report of its own (issue 36)."""
    assert not (ROOT / "benchmarks" / "planner_ordering.py").exists()
    for driver in ("local_llm_table.py", "planner_comparison.py"):
        text = (ROOT / "benchmarks" / driver).read_text()
        assert "tabulate" not in text and "build_tables" not in text and '"report"' in text
    assert os.path.isdir(ROOT / "reports" / "archive" / "local-llm-superseded-5ec1040" / "trajectories")


def test_every_report_written_by_mltb_report_is_regenerated_here():
    written = {str(p.relative_to(ROOT)) for p in (ROOT / "reports").rglob("*.md")
               if HEADER.search(p.read_text(encoding="utf-8"))}
    assert written == set(PUBLISHED)


def test_the_reports_index_names_every_report_and_its_command():
    """reports/README.md (issue 61): each entry of reports/ and reports/archive/ has its line there, a report
    written by `mltb report` with the command of its own header, and no superseded or void run sits on top."""
    index = INDEX.read_text(encoding="utf-8")
    entries = [p for p in (ROOT / "reports").iterdir() if p.name not in ("README.md", "archive")]
    entries += list((ROOT / "reports" / "archive").iterdir())
    unnamed = sorted(str(p.relative_to(ROOT)) for p in entries
                     if not re.search(rf"(?<![\w/.-]){re.escape(str(p.relative_to(ROOT)))}(?![\w.-])", index))
    assert not unnamed, f"reports/README.md does not name {unnamed}"
    for published in PUBLISHED:
        command = HEADER.search((ROOT / published).read_text(encoding="utf-8")).group(1)
        assert f"`{command}`" in index, f"reports/README.md does not give the command of {published}"
    on_top = sorted(p.name for p in (ROOT / "reports").iterdir() if re.search(r"-(superseded|void)-", p.name))
    assert not on_top, f"superseded or void runs belong in reports/archive/: {on_top}"



def test_every_reports_path_the_docs_name_exists():
    """A report moved (to reports/archive/, say) leaves no dangling path in the prose that cites it."""
    texts = [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "reports").rglob("*.md")]
    missing = set()
    for text in texts:
        for named in re.findall(r"`(reports/[\w./*-]+)`", text.read_text(encoding="utf-8")):
            named = named.rstrip(".")
            if not (list(ROOT.glob(named)) if "*" in named else (ROOT / named).exists()):
                missing.add(f"{text.relative_to(ROOT)}: {named}")
    assert not missing, sorted(missing)
