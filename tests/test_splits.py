"""Benchmark splits: contents, determinism, caching and concurrent preparation."""
from __future__ import annotations

import hashlib
import multiprocessing
import time

import pandas as pd
import pytest

from mltb_core.bench.fixtures import FIXTURES
from mltb_core.bench import splits
from mltb_core.bench.splits import MAX_ROWS, prepare_split
from mltb_core.bench.tasks import load_tasks

TASKS = load_tasks()
# Everything but the 4,993-column santander-value replica splits in well under a second.
QUICK = sorted(slug for slug in TASKS if slug != "santander-value-prediction-challenge")


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv("MLTB_DATA_SOURCE", raising=False)
    monkeypatch.delenv("MLTB_CACHE", raising=False)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("split-cache")


def file_digest(split) -> str:
    digest = hashlib.sha256()
    for path in (split.train_path, split.test_path, split.labels_path):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def check_split(task, split):
    train, test, labels = (pd.read_csv(p) for p in (split.train_path, split.test_path, split.labels_path))
    meta = split.meta
    total = meta["train_rows"] + meta["test_rows"]
    assert total == len(train) + len(test)
    if task.group_column:  # whole groups: about a fifth of the rows, never more than MAX_ROWS
        assert total <= min(MAX_ROWS, meta["labelled_rows"]) and abs(len(test) - 0.2 * total) <= 0.03 * total
        assert not set(train[task.group_column]) & set(test[task.group_column])
    else:
        assert total == min(MAX_ROWS, meta["labelled_rows"])
        assert abs(len(test) - 0.2 * total) <= 1
    assert task.target in train.columns and task.target not in test.columns
    assert list(labels.columns) == [task.id_column, task.target, *task.grader_columns]
    assert list(test.columns) == [c for c in train.columns if c != task.target]
    assert test[task.id_column].is_unique and test[task.id_column].tolist() == labels[task.id_column].tolist()
    assert not set(train[task.id_column]) & set(test[task.id_column])
    assert meta["replica"] == (task.source == "replica") and len(meta["source_hash"]) == 16
    return train, test, labels


@pytest.mark.parametrize("slug", QUICK)
def test_every_task_splits_into_train_test_and_labels(slug, shared_cache):
    task = TASKS[slug]
    split = prepare_split(task, seed=0, cache_dir=shared_cache)
    assert split.dir == shared_cache / "splits" / slug / "seed-0"
    train, _, labels = check_split(task, split)
    if task.is_classification:  # stratified: class shares agree between train and the held-out part
        shares = train[task.target].value_counts(normalize=True)
        held_out = labels[task.target].value_counts(normalize=True)
        assert (shares - held_out).abs().max() < 0.02


@pytest.mark.slow
def test_the_wide_santander_value_replica_splits(shared_cache):
    task = TASKS["santander-value-prediction-challenge"]
    check_split(task, prepare_split(task, seed=0, cache_dir=shared_cache))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_costa_rica_households_never_straddle_the_split(seed, tmp_path):
    task = TASKS["costa-rican-household-poverty-prediction"]
    assert task.group_column == "idhogar"
    split = prepare_split(task, seed=seed, cache_dir=tmp_path)
    train, test, labels = check_split(task, split)
    assert split.meta["group_column"] == "idhogar"
    assert not set(train["idhogar"]) & set(test["idhogar"])
    # The grader gets the head-of-household flag to filter on; the agent's test.csv keeps it as a feature.
    assert labels["parentesco1"].tolist() == test["parentesco1"].tolist()


def test_grouped_split_samples_whole_groups_when_the_data_is_large(tmp_path, monkeypatch):
    task = TASKS["costa-rican-household-poverty-prediction"]
    monkeypatch.setattr(splits, "MAX_ROWS", 3000)
    split = prepare_split(task, seed=0, cache_dir=tmp_path)
    train, test = pd.read_csv(split.train_path), pd.read_csv(split.test_path)
    assert 2900 < len(train) + len(test) <= 3000
    frame = pd.concat([train, test])
    full = pd.read_csv(FIXTURES / "data" / task.slug / "train.csv.gz", usecols=["idhogar"])
    sizes = full["idhogar"].value_counts()
    kept = frame["idhogar"].value_counts()
    assert (kept == sizes[kept.index]).all()  # every kept household is complete
    assert not set(train["idhogar"]) & set(test["idhogar"])


def test_same_seed_gives_identical_bytes_and_other_seeds_differ(tmp_path):
    task = TASKS["spaceship-titanic"]
    first = prepare_split(task, seed=3, cache_dir=tmp_path / "a")
    again = prepare_split(task, seed=3, cache_dir=tmp_path / "b")
    other = prepare_split(task, seed=4, cache_dir=tmp_path / "a")
    assert file_digest(first) == file_digest(again)
    assert first.meta["source_hash"] == other.meta["source_hash"]
    assert pd.read_csv(first.labels_path)["PassengerId"].tolist() != pd.read_csv(other.labels_path)["PassengerId"].tolist()


def test_large_tasks_are_sampled_differently_per_seed(tmp_path):
    task = TASKS["playground-series-s4e8"]  # 61,069 rows -> 10,000 sampled
    ids = [set(pd.concat([pd.read_csv(s.train_path, usecols=["id"]), pd.read_csv(s.test_path, usecols=["id"])])["id"])
           for s in (prepare_split(task, seed=k, cache_dir=tmp_path) for k in (0, 1))]
    assert len(ids[0]) == len(ids[1]) == MAX_ROWS and ids[0] != ids[1]


def test_cached_split_reads_no_data(tmp_path, monkeypatch):
    """How fast a cached split is: benchmarks/split_provisioning.py."""
    task = TASKS["spaceship-titanic"]
    made = prepare_split(task, seed=0, cache_dir=tmp_path)

    def must_not_load(*args, **kwargs):
        raise AssertionError("a prepared split must not rebuild its data")

    monkeypatch.setattr(splits, "load_labelled_frame", must_not_load)
    cached = prepare_split(task, seed=0, cache_dir=tmp_path)
    assert cached == made


def test_unfinished_split_is_rebuilt(tmp_path):
    task = TASKS["playground-series-s4e1"]
    split = prepare_split(task, seed=0, cache_dir=tmp_path)
    expected = file_digest(split)
    (split.dir / "meta.json").unlink()
    split.test_path.write_text("half-written")
    assert file_digest(prepare_split(task, seed=0, cache_dir=tmp_path)) == expected


def test_cache_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTB_CACHE", str(tmp_path))
    split = prepare_split(TASKS["playground-series-s5e9"], seed=1)
    assert split.dir == tmp_path / "splits" / "playground-series-s5e9" / "seed-1"


def _prepare_in_child(cache_dir: str) -> tuple[str, str]:
    task = load_tasks()["spaceship-titanic"]
    split = prepare_split(task, seed=7, cache_dir=cache_dir)
    return file_digest(split), split.meta["source_hash"]


def test_eight_processes_preparing_the_same_split_agree(tmp_path, monkeypatch):
    builds = tmp_path / "builds.log"
    real_load = splits.load_labelled_frame

    def counting_load(*args, **kwargs):  # forked children inherit this patch
        with builds.open("a") as log:
            log.write("build\n")
        time.sleep(0.2)  # widen the race window
        return real_load(*args, **kwargs)

    monkeypatch.setattr(splits, "load_labelled_frame", counting_load)
    context = multiprocessing.get_context("fork")
    with context.Pool(8) as pool:
        results = pool.map(_prepare_in_child, [str(tmp_path)] * 8)
    assert len(set(results)) == 1
    split_dir = tmp_path / "splits" / "spaceship-titanic" / "seed-7"
    assert sorted(p.name for p in split_dir.iterdir()) == ["meta.json", "test.csv", "test_labels.csv", "train.csv"]
    assert len(list((tmp_path / "frames").iterdir())) == 1  # no temp files left behind
    assert builds.read_text().count("build") == 1  # the lock let exactly one process prepare it
