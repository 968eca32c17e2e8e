"""Commit messages a maintainer can scan (docs/development.md, issue 61): every commit after the rule came in
has a one-line subject of at most 72 characters, without a closing full stop, and a blank line before any
body. Commits before it keep their history: it is never rewritten."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The last commit before the rule: everything after it is held to the rule (the rule's one home for this).
RULE_SINCE = "42fbadce9179485e508cc46b2e2042e87bd0302b"
SUBJECT_MAX = 72


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


def problems(message: str) -> list[str]:
    """What is wrong with one commit message under the rule (empty when nothing is)."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    found = []
    if not subject.strip():
        found.append("empty subject")
    if len(subject) > SUBJECT_MAX:
        found.append(f"subject of {len(subject)} characters (at most {SUBJECT_MAX})")
    if subject.endswith("."):
        found.append("subject ends with a full stop")
    if len(lines) > 1 and lines[1].strip():
        found.append("no blank line after the subject (a subject wrapped onto two lines?)")
    return found


def test_the_rule_itself():
    assert problems("Gate: fail a cell that loses every valid trial\n\nWhy it matters.\n") == []
    assert problems("Merge branch 'h61'\n") == []
    assert problems("x" * 73) == [f"subject of 73 characters (at most {SUBJECT_MAX})"]
    assert problems("Fix the gate.\n") == ["subject ends with a full stop"]
    assert problems("Fix the gate\nand the report\n") == [
        "no blank line after the subject (a subject wrapped onto two lines?)"]


def test_every_commit_since_the_rule_follows_it():
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout (an sdist?): no commits to check")
    if _git("cat-file", "-e", f"{RULE_SINCE}^{{commit}}").returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        pytest.skip(f"commit {RULE_SINCE[:7]}, where the rule starts, is not in this "
                    + ("shallow clone (git fetch --unshallow to check the messages)" if shallow else "history"))
    ancestor = _git("merge-base", "--is-ancestor", RULE_SINCE, "HEAD")
    assert ancestor.returncode == 0, f"{RULE_SINCE[:7]} is not an ancestor of HEAD: was history rewritten?"
    log = _git("log", "--format=%H%x1f%B%x1e", f"{RULE_SINCE}..HEAD")
    assert log.returncode == 0, log.stderr
    broken = {}
    for entry in log.stdout.split("\x1e"):
        if entry.strip():
            commit, message = entry.strip("\n").split("\x1f", 1)
            if found := problems(message):
                broken[f"{commit[:7]} {message.splitlines()[0][:60]!r}"] = found
    assert not broken, broken
