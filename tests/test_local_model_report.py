"""benchmarks/local_model_report.py writes reports/local-model.md from real trial records and trajectories."""
import argparse
import json

import pytest

from benchmark_scripts import load_benchmark

from mltb_core.bench.tasks import get_task
from mltb_core.config import TrialConfig
from mltb_core.runner.trial import run_trial


@pytest.fixture(scope="module")
def report_module():
    return load_benchmark("local_model_report")


def test_report_counts_stages_calls_and_gives_trial_level_intervals(report_module, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    task = get_task("spaceship-titanic")
    rows = []
    for trial in range(2):  # the sim stands in for the local model: the report reads records, not the backend
        config = TrialConfig(planner="react", model="sim:1.0", trial=trial, max_llm_calls=3, llm_cache=False)
        record = run_trial(task, config, out / f"react-c-{trial}")
        rows.append({"constrained": True, "elapsed": record.wall_seconds, "record": record.to_dict()})
    (out / "records.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    args = argparse.Namespace(trials=2, max_llm_calls=3, max_seconds=60.0, workers=1, notes=None)
    text = report_module.write_report(out, tmp_path / "local-model.md", args)

    stages = sorted(r["record"]["stage_reached"] for r in rows)
    calls = sum(r["record"]["llm_calls"] for r in rows)
    assert "**n = 2 trials in all**" in text and calls == 6
    summary = next(line for line in text.splitlines() if line.startswith("| react | yes |"))
    assert "0 % (0/2; 95 % CI 0–85 %)" in summary          # no valid submission in 3 calls; Clopper-Pearson 0/2: 84.2, up
    assert f"stages reached: {stages}" in text
    assert "| react | no | 0 |" in text                      # an empty cell is shown, not dropped
    assert (tmp_path / "local-model.md").read_text() == text
