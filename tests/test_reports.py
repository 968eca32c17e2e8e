"""reports.py: merged leaderboard files, per-trial pages, and (when Chromium exists) a real render."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mltb_core.analysis.reports import build_report, main, trial_page_name
from mltb_core.analysis.results import TrialRecord, append_records

ROOT = Path(__file__).resolve().parents[1]


def make_run(run_dir: Path, planner: str, trials: int = 3) -> list[TrialRecord]:
    records = []
    for trial in range(trials):
        trajectory = Path("trajectories") / f"{planner}-{trial}.jsonl"
        (run_dir / trajectory).parent.mkdir(parents=True, exist_ok=True)
        steps = [{"step_number": 1, "step_type": "tool_execution_initiation", "node_id": 1,
                  "tools_to_execute": [{"tool_name": "read_data", "tool_args": {"output": "train"}}]},
                 {"step_number": 2, "step_type": "tool_execution_completion", "node_id": 1,
                  "tool_results": [{"ok": True, "content_preview": "Stored train <b>"}]},
                 {"step_number": 3, "step_type": "search_summary", "best_path": [1]}]
        (run_dir / trajectory).write_text("".join(json.dumps(s) + "\n" for s in steps))
        valid = trial != 0
        records.append(TrialRecord(task="spaceship-titanic", planner=planner, model="sim", trial=trial, seed=trial,
                                   config_hash="abc", outcome="valid" if valid else "planner_failure", valid=valid,
                                   percentile=40.0 + trial if valid else None, stage_reached=10 if valid else 4,
                                   tokens_in=100, synthetic=True, trajectory=trajectory.as_posix()))
    append_records(run_dir / "results.jsonl", records)
    return records


def test_build_report_merges_runs(tmp_path):
    make_run(tmp_path / "run1", "react")
    records = make_run(tmp_path / "run2", "mcts_shaped")
    paths = build_report([tmp_path / "run1", tmp_path / "run2"], tmp_path / "out")
    summary = json.loads(paths["summary"].read_text())
    assert summary["records"] == 6
    assert set(summary["cells"]) == {"spaceship-titanic|react|sim", "spaceship-titanic|mcts_shaped|sim"}
    markdown = paths["leaderboard"].read_text()
    assert "| react" in markdown and "mcts_shaped" in markdown and "synthetic policy, not an LLM" in markdown
    index = paths["index"].read_text()
    assert index.count("<svg") >= 3 and "src=" not in index  # plots inline, nothing external
    page = (tmp_path / "out" / "trials" / trial_page_name(records[1])).read_text()
    assert "read_data" in page and "Stored train &lt;b&gt;" in page and "1 read_data" in page


def test_main_rejects_a_directory_without_results(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--out", str(tmp_path / "out")])
    assert "not an mltb run directory" in capsys.readouterr().err


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="no chromium")
def test_report_renders_in_headless_chromium(tmp_path):
    make_run(tmp_path / "run", "react")
    paths = build_report([tmp_path / "run"], tmp_path / "out")
    png = tmp_path / "index.png"
    subprocess.run([str(ROOT / "benchmarks" / "report_screenshot.sh"), str(paths["index"]), str(png), "1200"],
                   check=True, timeout=150, capture_output=True)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
