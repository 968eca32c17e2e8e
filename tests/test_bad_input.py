"""Bad input through the pytest plugin: a clear message naming the problem and exit code 4 (usage
error) at collection time, before any trial runs; a corrupt LLM cache entry is ignored and rebuilt
with a warning. (The ``mltb`` CLI path is not tested here: cli.py had not landed when this was written.)
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mltb_core.llm.cache import ResponseCache
from mltb_core.llm.sim import SimPolicy

pytest_plugins = ["pytester"]

SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''
SPEC = '''slug = "toy-churn"
title = "Toy churn"
problem_type = "binary"
target = "{target}"
id_column = "id"
metric = "{metric}"
prediction = "label"
source = "bundled"
data = "{data}"
{extra}summary = "Predict churn from a few numbers."
[fields]
id = "row id"
x = "a number"
churn = "1 when the customer left"
'''


def write_task(directory: Path, *, target: str = "churn", metric: str = "accuracy", data: str = "labelled.csv.gz",
               extra: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "toy-churn.toml").write_text(SPEC.format(target=target, metric=metric, data=data, extra=extra))
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"id": range(200), "x": rng.normal(size=200), "churn": rng.integers(0, 2, 200)})
    frame.to_csv(directory / "labelled.csv.gz", index=False)
    return directory


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In process: collection-time usage errors need no worker, and this keeps the file fast."""
    pytester.makepyfile(test_challenges=SUITE)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--planner=react", "--max-iterations=2", *args)


def assert_usage_error(result: pytest.RunResult, *words: str) -> str:
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    for word in words:
        assert word in text, (word, text[-3000:])
    return text


def test_truncated_gzip_csv_is_a_usage_error(pytester, tmp_path):
    tasks = write_task(tmp_path / "tasks")
    data = (tasks / "labelled.csv.gz").read_bytes()
    (tasks / "labelled.csv.gz").write_bytes(data[: len(data) // 2])
    result = run(pytester, f"--tasks-dir={tasks}", "--task=toy-churn", "--model=sim")
    assert_usage_error(result, "toy-churn", "cannot read", "labelled.csv.gz")


def test_corrupt_csv_rows_are_a_usage_error(pytester, tmp_path):
    tasks = write_task(tmp_path / "tasks")
    with gzip.open(tasks / "labelled.csv.gz", "wt") as fh:
        fh.write("id,x,churn\n1,0.5,1\n2,0.1,0,extra,fields\n")
    result = run(pytester, f"--tasks-dir={tasks}", "--task=toy-churn", "--model=sim")
    assert_usage_error(result, "toy-churn", "labelled.csv.gz")


def test_target_not_in_the_data_is_a_usage_error(pytester, tmp_path):
    tasks = write_task(tmp_path / "tasks", target="left_us")
    result = run(pytester, f"--tasks-dir={tasks}", "--task=toy-churn", "--model=sim")
    assert_usage_error(result, "'left_us'", "target", "available columns: id, x, churn")


def test_spec_missing_its_target_is_a_usage_error(pytester, tmp_path):
    tasks = write_task(tmp_path / "tasks")
    spec = tasks / "toy-churn.toml"
    spec.write_text(spec.read_text().replace('target = "churn"\n', ""))
    result = run(pytester, f"--tasks-dir={tasks}", "--task=toy-churn", "--model=sim")
    assert_usage_error(result, "toy-churn.toml", "target")


def test_unknown_metric_is_a_usage_error(pytester, tmp_path):
    tasks = write_task(tmp_path / "tasks", metric="accuracy_of_vibes")
    result = run(pytester, f"--tasks-dir={tasks}", "--task=toy-churn", "--model=sim")
    assert_usage_error(result, "toy-churn.toml", "accuracy_of_vibes")


def test_malformed_leaderboard_is_a_usage_error(pytester, tmp_path):
    board = tmp_path / "board.csv"
    board.write_text("rank,score\n1,0.9\n2,not-a-number\n")
    tasks = write_task(tmp_path / "tasks", extra=f'leaderboard = "{board}"\n')
    result = run(pytester, f"--tasks-dir={tasks}", "--task=toy-churn", "--model=sim")
    assert_usage_error(result, "toy-churn", "board.csv")


@pytest.mark.parametrize("args, words", [
    (["--task=spaceship-titanic", "--model=sim", "--planner=depth_first"], ["unknown planner", "depth_first"]),
    (["--task=spaceship-titanic", "--model=gemini:pro"], ["unknown model", "gemini"]),
    (["--task=titanic-on-mars", "--model=sim"], ["unknown task", "titanic-on-mars"]),
])
def test_unknown_names_are_usage_errors(pytester, args, words):
    assert_usage_error(run(pytester, *args), *words)


def test_price_table_without_the_model_is_a_usage_error(pytester, tmp_path, monkeypatch):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."gpt-4o"]\ninput = 2.5\noutput = 10.0\n')
    monkeypatch.setenv("MLTB_PRICES", str(prices))
    result = run(pytester, "--task=spaceship-titanic", "--model=openai:gpt-9-turbo")
    assert_usage_error(result, "'gpt-9-turbo' has no price", str(prices))


def test_corrupt_llm_cache_entry_is_ignored_and_rebuilt_with_a_warning(tmp_path):
    cache = ResponseCache(tmp_path)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Train data: train.csv"}]
    first = SimPolicy(0.7, seed=1, cache=None)
    backend = SimPolicy(0.7, seed=1)
    backend.cache = cache
    fresh = backend.complete(messages, [], n=1)
    key = cache.key(backend.name, messages, [], 1, 0.7, None, backend.seed)
    cache.path(key).write_text('{"candidates": [')             # a torn write
    with pytest.warns(RuntimeWarning, match="ignoring corrupt LLM cache entry .* it will be rebuilt"):
        again = backend.complete(messages, [], n=1)
    assert not again.cached and again.candidates[0].text == fresh.candidates[0].text
    assert json.loads(cache.path(key).read_text())["candidates"]      # rewritten whole
    assert backend.complete(messages, [], n=1).cached
    assert first.complete(messages, [], n=1).candidates[0].text == fresh.candidates[0].text
