"""CHANGELOG.md keeps the Keep a Changelog form (issue 61): what changed for users, release by release, with
the measurements in reports/."""
from __future__ import annotations

import re
from pathlib import Path

import mltb_core

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$")
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")   # keepachangelog.com/en/1.1.0


def _sections() -> list[tuple[str, list[str]]]:
    """(the `## ` heading, its `### ` headings) in file order."""
    out: list[tuple[str, list[str]]] = []
    for line in CHANGELOG.splitlines():
        if line.startswith("## "):
            out.append((line, []))
        elif line.startswith("### "):
            assert out, f"{line!r} comes before any release heading"
            out[-1][1].append(line[4:])
    return out


def test_the_changelog_stays_short_and_holds_no_measurements():
    assert len(CHANGELOG.splitlines()) <= 400
    assert not re.search(r"^#+ *Measured", CHANGELOG, re.M), "measurements belong in reports/"


def test_unreleased_first_then_releases_newest_first():
    sections = _sections()
    assert sections[0][0] == "## [Unreleased]"
    releases = []
    for heading, _ in sections[1:]:
        match = RELEASE.match(heading)
        assert match, f"{heading!r} is not '## [X.Y.Z] - YYYY-MM-DD'"
        releases.append((tuple(int(part) for part in match.groups()[:3]), match.group(4)))
    assert releases, "no release"
    assert releases == sorted(releases, reverse=True) and len(set(releases)) == len(releases)
    assert ".".join(map(str, releases[0][0])) == mltb_core.__version__, "the newest release is the code's version"


def test_each_section_uses_the_six_kinds_once():
    for heading, kinds in _sections():
        assert all(kind in KINDS for kind in kinds), f"{heading}: {kinds}"
        assert len(set(kinds)) == len(kinds), f"{heading} repeats a kind: {kinds}"
