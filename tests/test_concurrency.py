"""Concurrent writers: 8 processes preparing the same split on a fresh cache dir and appending
records to one results.jsonl at once never corrupt a file (every line parses, counts are exact)."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
from pathlib import Path

from mltb_core.analysis.records import TrialRecord
from mltb_core.analysis.resultsfile import append_records, read_records
from mltb_core.bench.splits import prepare_split
from mltb_core.bench.tasks import get_task

PROCESSES = 8
APPENDS = 50
TASK = "spaceship-titanic"


def writer(index: int, results: str, cache_dir: str, start: multiprocessing.Event, queue) -> None:
    start.wait()
    split = prepare_split(get_task(TASK), seed=0, cache_dir=Path(cache_dir))
    digest = hashlib.sha256(split.train_path.read_bytes() + split.test_path.read_bytes()
                            + split.labels_path.read_bytes()).hexdigest()
    for n in range(APPENDS):
        # A long field makes each line span several write() chunks if appends were not atomic.
        record = TrialRecord(task=TASK, planner="react", model="sim", trial=index * APPENDS + n, seed=index,
                             config_hash="stress", outcome="valid", valid=True, feedback="x" * 5000,
                             extra={"writer": index, "n": n})
        append_records(Path(results), [record])
    queue.put(digest)


def test_eight_processes_split_and_append_without_corruption(tmp_path):
    ctx = multiprocessing.get_context("spawn")    # fresh interpreters, as xdist workers are
    results, cache_dir = tmp_path / "results.jsonl", tmp_path / "cache"
    start, queue = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=writer, args=(i, str(results), str(cache_dir), start, queue))
               for i in range(PROCESSES)]
    for process in workers:
        process.start()
    start.set()
    digests = [queue.get(timeout=60) for _ in workers]
    for process in workers:
        process.join(timeout=30)
        assert process.exitcode == 0

    assert len(set(digests)) == 1, "processes saw different split files"
    lines = results.read_text().splitlines()
    assert len(lines) == PROCESSES * APPENDS
    parsed = [json.loads(line) for line in lines]
    assert sorted(p["trial"] for p in parsed) == list(range(PROCESSES * APPENDS))
    assert len(list(read_records(results, strict=True))) == PROCESSES * APPENDS
    for index in range(PROCESSES):   # each writer's own appends stay in order
        mine = [p["extra"]["n"] for p in parsed if p["extra"]["writer"] == index]
        assert mine == list(range(APPENDS))
    split = prepare_split(get_task(TASK), seed=0, cache_dir=cache_dir)
    assert split.train_path.exists() and split.labels_path.exists()
