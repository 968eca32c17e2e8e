"""SIGKILL the whole run (process group) half-way, then ``--resume``: every item ends with exactly one
record, and results.jsonl holds only whole lines (a torn last line would be skipped, never doubled)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mltb_core.analysis.results import latest_records, read_records

SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''
TRIALS = 5


def pytest_command(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--task=spaceship-titanic", "--model=sim", "--planner=react", f"--trials={TRIALS}",
            "--max-iterations=3", "--no-llm-cache", f"--mltb-out={run_dir}", *extra]


def record_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_sigkill_half_way_then_resume_gives_one_record_per_item(tmp_path):
    (tmp_path / "test_challenges.py").write_text(SUITE)
    run_dir = tmp_path / "run"
    results = run_dir / "results.jsonl"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.Popen(pytest_command(run_dir), cwd=tmp_path, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 40
        while not record_lines(results) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
    killed_with = len(record_lines(results))
    assert 1 <= killed_with < TRIALS, "the run was not killed half-way"

    resumed = subprocess.run(pytest_command(run_dir, "--resume"), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert resumed.returncode in (0, 1), resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"{killed_with} deselected" in resumed.stdout      # recorded items are not rerun

    lines = record_lines(results)
    assert all(json.loads(line) for line in lines)                 # only whole lines
    trials = sorted(json.loads(line)["trial"] for line in lines)
    assert trials == list(range(TRIALS))                             # exactly one record per item
    assert len(latest_records(read_records(results))) == TRIALS
