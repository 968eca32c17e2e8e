"""Benchmark splits: a seeded sample of a task's labelled data, 80 % to train on, 20 % held out.

``prepare_split(task, seed)`` writes ``train.csv`` (with the target), ``test.csv``
(without it) and ``test_labels.csv`` (id + target) into
``<cache>/splits/<slug>/seed-<seed>/`` once per machine and seed. Many pytest-xdist
workers may ask for the same split at once: preparation runs under a file lock,
files are written to temporary names and renamed, and a ``meta.json`` written last
marks the split complete.

``meta.json`` records the SHA-256 of each file. The held-out labels are read only by the grader:
a trial's solver process is confined to the agent's copy of ``train.csv`` and ``test.csv``
(:func:`mltb_core.runner.trial.solver_paths` never grants the split cache), and the labels file is
checked against its recorded hash whenever a split is reused or graded, so a changed
``test_labels.csv`` is noticed (one line on stderr) and the split rebuilt from the source data.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from filelock import FileLock

from mltb_core.bench.datasources import default_cache_dir, load_labelled_frame, resolve_source, source_fingerprint
from mltb_core.bench.documents import read_document
from mltb_core.bench.tasks import TEST_FILE, TRAIN_FILE, Task

__all__ = ["Split", "prepare_split", "split_dir", "MAX_ROWS", "TEST_FRACTION", "SPLIT_FORMAT", "LABELS_FILE",
           "TamperedSplit"]

MAX_ROWS = 10_000
TEST_FRACTION = 0.2
META_FILE = "meta.json"   # written last: its presence means the split is complete
# Bump when the sampling or file layout changes so old cached splits are not reused.
# 3: meta.json records each file's SHA-256; group-aware splits (spec group_column) and grader columns
# in test_labels.csv.
SPLIT_FORMAT = 3
LABELS_FILE = "test_labels.csv"


class TamperedSplit(RuntimeError):
    """A split's labels file no longer matches its recorded hash (it has been rebuilt, or must be)."""


@dataclass(frozen=True)
class Split:
    """Where one prepared split lives."""

    task: Task
    seed: int
    dir: Path
    train_path: Path
    test_path: Path
    labels_path: Path

    @property
    def meta(self) -> dict:
        """Row counts, source hash, file hashes and sampling parameters recorded when the split was made."""
        meta = _read_meta(self.dir)
        if meta is None:
            raise TamperedSplit(f"{self.dir / META_FILE} is damaged: prepare the split again")
        return meta

    def read_labels(self) -> pd.DataFrame:
        """The held-out labels, verified against their recorded SHA-256 (for the grader only).

        The bytes are hashed and parsed from one read. A mismatch rebuilds the split (saying so on
        stderr) and reads the rebuilt file; a second mismatch raises :class:`TamperedSplit`.
        """
        for attempt in range(2):
            data = self.labels_path.read_bytes()
            if _sha256(data) == _recorded_hash(self.dir, LABELS_FILE):
                return pd.read_csv(io.BytesIO(data))
            if attempt == 0:
                _say_rebuilding(self.task, self.seed, self.dir)
                source = _meta_source(self.dir)   # read before meta.json goes
                (self.dir / META_FILE).unlink(missing_ok=True)
                prepare_split(self.task, self.seed, cache_dir=self.dir.parent.parent.parent, source=source or None)
        raise TamperedSplit(f"{self.labels_path} does not match its recorded SHA-256 even after a rebuild")


def split_dir(task: Task, seed: int = 0, cache_dir: Path | str | None = None, source: str | None = None) -> Path:
    """The directory a split of ``task`` with ``seed`` from data ``source`` (default: the active one) lives in."""
    directory = default_cache_dir(cache_dir) / "splits" / task.slug / f"seed-{seed}"
    source = resolve_source(task, source)
    # Other data must not overwrite a split made from the spec's own.
    return directory.with_name(f"{directory.name}-{source}") if source in ("kaggle", "original") else directory


def _as_split(task: Task, seed: int, directory: Path) -> Split:
    return Split(task=task, seed=seed, dir=directory, train_path=directory / TRAIN_FILE,
                 test_path=directory / TEST_FILE, labels_path=directory / LABELS_FILE)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _read_meta(directory: Path) -> dict | None:
    """The split's meta.json, or None when it is missing or damaged in any way (too large or deep, not UTF-8,
    not a JSON object): a damaged cache entry is a miss, and the split is rebuilt."""
    try:
        meta = read_document(directory / META_FILE, "split metadata", "json")
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def _recorded_hash(directory: Path, name: str) -> str | None:
    hashes = (_read_meta(directory) or {}).get("sha256")
    recorded = hashes.get(name) if isinstance(hashes, dict) else None
    return recorded if isinstance(recorded, str) else None


def _meta_source(directory: Path) -> str | None:
    source = (_read_meta(directory) or {}).get("data_source")
    return source if isinstance(source, str) else None


def _files_intact(directory: Path, names: tuple[str, ...] = (TRAIN_FILE, TEST_FILE, LABELS_FILE)) -> bool:
    """Every one of the split's files matches the SHA-256 meta.json recorded for it (one damaged byte in
    train.csv would otherwise change every trial's data without a word)."""
    for name in names:
        recorded = _recorded_hash(directory, name)
        try:
            if recorded is None or _file_sha256(directory / name) != recorded:
                return False
        except OSError:
            return False
    return True


def _say_rebuilding(task: Task, seed: int, directory: Path,
                    problem: str = "a file there does not match its recorded SHA-256") -> None:
    print(f"mltb: split {task.slug} seed {seed} in {directory}: {problem}; rebuilding the split from the source data",
          file=sys.stderr)


def _is_complete(directory: Path, source: str, task: Task | None = None, announce: bool = False) -> bool:
    """A finished split made from the current data and builder (a stale one is rebuilt)."""
    meta = _read_meta(directory)
    if meta is None:
        if announce and task is not None and (directory / META_FILE).exists():
            _say_rebuilding(task, -1, directory, problem=f"{META_FILE} is damaged")
        return False
    if task is not None and source != "kaggle" and meta.get("source_hash") != source_fingerprint(task, source):
        return False
    if not (meta.get("format") == SPLIT_FORMAT and meta.get("data_source") == source and all(
            (directory / name).exists() for name in (TRAIN_FILE, TEST_FILE, LABELS_FILE))):
        return False
    if not _files_intact(directory):
        if announce and task is not None:
            _say_rebuilding(task, meta.get("seed", -1), directory)
        return False
    return True


def _stratify_labels(task: Task, frame: pd.DataFrame) -> pd.Series | None:
    """Class labels to stratify on, or None when stratifying is impossible (a class with < 2 rows)."""
    if not task.is_classification:
        return None
    labels = frame[task.target]
    return labels if labels.value_counts().min() >= 2 else None


def _sample_and_split(task: Task, frame: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    from sklearn.model_selection import train_test_split   # here: naming a split's directory needs none of it

    if task.group_column:
        return _sample_and_split_groups(task, frame, seed)
    if len(frame) > MAX_ROWS:
        frame = frame.sample(n=MAX_ROWS, random_state=seed, replace=False).sort_index()
    if len(frame) < 5:
        raise ValueError(f"task {task.slug!r} has only {len(frame)} labelled rows; a split needs at least 5")
    train, test = train_test_split(frame, test_size=TEST_FRACTION, random_state=seed, shuffle=True,
                                   stratify=_stratify_labels(task, frame))
    # Original row order keeps the files readable and the bytes independent of sklearn's shuffling order.
    return train.sort_index(), test.sort_index()


def _sample_and_split_groups(task: Task, frame: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Whole groups (e.g. households) go to one side, so no group's rows -- which share its label --
    are seen in training and scored in the held-out set. About TEST_FRACTION of the rows are held out:
    stratified by class over 1/TEST_FRACTION group folds for classification, a group shuffle otherwise."""
    from sklearn.model_selection import GroupShuffleSplit, StratifiedGroupKFold

    column = task.group_column
    if column not in frame.columns:
        raise ValueError(f"task {task.slug!r}: group_column {column!r} is not a column of the data")
    groups = frame[column].astype(str).where(frame[column].notna(), "<missing>")
    if len(frame) > MAX_ROWS:  # sample whole groups, in a seeded order, until MAX_ROWS rows
        order = pd.Series(groups.unique()).sample(frac=1.0, random_state=seed)
        sizes = groups.value_counts().reindex(order)
        keep = set(order[(sizes.cumsum() <= MAX_ROWS).to_numpy()])
        frame, groups = frame[groups.isin(keep)], groups[groups.isin(keep)]
    if groups.nunique() < 5:
        raise ValueError(f"task {task.slug!r} has only {groups.nunique()} groups in {column!r}; "
                         "a grouped split needs at least 5")
    labels = _stratify_labels(task, frame)
    if labels is not None:
        folds = StratifiedGroupKFold(n_splits=round(1 / TEST_FRACTION), shuffle=True, random_state=seed)
        train_idx, test_idx = next(folds.split(frame, labels, groups))
    else:
        shuffle = GroupShuffleSplit(n_splits=1, test_size=TEST_FRACTION, random_state=seed)
        train_idx, test_idx = next(shuffle.split(frame, groups=groups))
    return frame.iloc[train_idx].sort_index(), frame.iloc[test_idx].sort_index()


def _write_atomic(frame: pd.DataFrame, path: Path) -> None:
    handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                         delete=False, newline="", encoding="utf-8")
    try:
        with handle:
            # One chunk: pandas' default (100,000 cells) makes wide frames (4,993 columns) 3x slower.
            frame.to_csv(handle, index=False, chunksize=max(len(frame), 1))
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def prepare_split(task: Task, seed: int = 0, cache_dir: Path | str | None = None,
                  source: str | None = None) -> Split:
    """Prepare (once per machine and seed) and return the task's benchmark split.

    At most ``MAX_ROWS`` labelled rows are sampled with ``seed``; ``TEST_FRACTION`` of
    them are held out, stratified by class for classification tasks. ``source``
    overrides the data source (see :func:`datasources.resolve_source`).
    """
    source = resolve_source(task, source)
    directory = split_dir(task, seed, cache_dir, source)
    if _is_complete(directory, source, task):
        return _as_split(task, seed, directory)
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(directory.parent / f"{directory.name}.lock")):
        if _is_complete(directory, source, task, announce=True):  # another process finished while we waited
            return _as_split(task, seed, directory)
        (directory / META_FILE).unlink(missing_ok=True)
        frame = load_labelled_frame(task, source=source, cache_dir=cache_dir)
        train, test = _sample_and_split(task, frame, seed)
        split = _as_split(task, seed, directory)
        _write_atomic(train, split.train_path)
        _write_atomic(test.drop(columns=[task.target]), split.test_path)
        # Only the grader reads the labels file: id, target and the columns its row filter needs.
        _write_atomic(test[list(dict.fromkeys([task.id_column, task.target, *task.grader_columns]))], split.labels_path)
        meta = {"format": SPLIT_FORMAT, "task": task.slug, "seed": seed, "data_source": source,
                "source_hash": source_fingerprint(task, source) if source != "kaggle" else None,
                "labelled_rows": len(frame), "sampled_rows": len(train) + len(test),
                "train_rows": len(train), "test_rows": len(test), "test_fraction": TEST_FRACTION,
                "stratified": _stratify_labels(task, pd.concat([train, test])) is not None,
                "group_column": task.group_column,
                "replica": task.is_replica,
                "sha256": {path.name: _file_sha256(path)
                           for path in (split.train_path, split.test_path, split.labels_path)}}
        meta_tmp = directory / f".{META_FILE}.tmp"
        meta_tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.replace(meta_tmp, directory / META_FILE)
    return split
