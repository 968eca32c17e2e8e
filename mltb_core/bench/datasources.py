"""Labelled data for each task: bundled raw files, synthetic schema replicas, or Kaggle downloads.

Every path ends in :func:`load_labelled_frame`, which returns ONE labelled
DataFrame in the competition's columns (id column included) and checks that the
spec's target and id columns are really there. Built frames are cached as pickles
under ``<cache>/frames`` keyed by a hash of the source, so each build happens once
per machine.

* bundled: ``BUILDERS[name](data_dir)`` reads ``fixtures/data/<slug>/`` (real
  competition files or the original dataset a playground competition was made from);
* original: for playground tasks whose bundled data are real competition rows, the spec's
  ``original_builder`` rebuilds the original dataset the competition was generated from, in the
  competition's columns (``source="original"`` or ``MLTB_DATA_SOURCE=original``); such rows are
  never placed on the leaderboard (see :func:`tasks.percentile_note`);
* replica: a seeded generator with the competition's schema, missing-value
  conventions and a learnable signal -- clearly not the real data;
* kaggle: :func:`fetch_from_kaggle` downloads the competition's files with the
  optional ``kaggle`` package and reads its ``train.csv`` through the same
  validation (select with ``source="kaggle"`` or env ``MLTB_DATA_SOURCE=kaggle``);
* user specs may give ``data = "labelled.csv"`` instead of a builder.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mltb_core.bench.fixtures import FIXTURES
from mltb_core.environment import default as default_environment
from mltb_core.environment import read as read_environment
from mltb_core.bench.tasks import TRAIN_FILE, Task

__all__ = [
    "DATA_DIR", "DATA_SOURCES", "BUILDERS", "DataSourceError", "KaggleUnavailableError", "default_cache_dir",
    "read_csv",
    "load_labelled_frame", "fetch_from_kaggle", "source_fingerprint", "raw_data_dir", "resolve_source",
]

DATA_DIR = FIXTURES / "data"
CACHE_ENV = "MLTB_CACHE"
SOURCE_ENV = "MLTB_DATA_SOURCE"
DATA_SOURCES = ("bundled", "replica", "kaggle", "original")
# Bump when a builder's output changes, so stale cached frames are not reused.
BUILDER_VERSION = "2"


class DataSourceError(ValueError):
    """Raw data is unreadable or does not match the task spec."""


class KaggleUnavailableError(RuntimeError):
    """The optional kaggle package or its credentials are missing."""


def default_cache_dir(cache_dir: Path | str | None = None) -> Path:
    """``cache_dir``, else env ``MLTB_CACHE``, else ``~/.cache/mltb``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return Path(read_environment(CACHE_ENV) or default_environment(CACHE_ENV)).expanduser()


def raw_data_dir(task: Task) -> Path:
    """Where a task's bundled raw files live."""
    return DATA_DIR / task.slug


def read_csv(path: Path | str, **kwargs: Any) -> pd.DataFrame:
    """``pd.read_csv`` whose errors name the file (corrupt gzip, truncated or malformed CSV)."""
    path = Path(path)
    if not path.exists():
        raise DataSourceError(f"data file not found: {path}")
    try:
        return pd.read_csv(path, **kwargs)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataSourceError(f"cannot read {path}: {type(exc).__name__}: {exc}") from exc


def _with_row_id(frame: pd.DataFrame, name: str = "id") -> pd.DataFrame:
    """Prepend an ``id`` column 0..n-1, as playground competitions have."""
    return pd.concat([pd.DataFrame({name: np.arange(len(frame), dtype=np.int64)}), frame.reset_index(drop=True)],
                     axis=1)


def _to_number(series: pd.Series, strip: str) -> pd.Series:
    """'$10,300.00' / '51,000 mi.' -> 10300.0 / 51000.0 (characters in ``strip`` and commas removed)."""
    cleaned = series.astype("string").str.replace(",", "", regex=False)
    for token in strip.split():
        cleaned = cleaned.str.replace(token, "", regex=False)
    return pd.to_numeric(cleaned.str.strip(), errors="raise").astype("float64")


# ----------------------------------------------------------------------------------------------- builders
def competition_train(data_dir: Path, drop: tuple[str, ...] = (), nrows: int | None = None) -> pd.DataFrame:
    """The competition's own ``train.csv`` (plain, .gz or inside a .zip), minus leak columns in ``drop``."""
    for name in (TRAIN_FILE, f"{TRAIN_FILE}.gz", f"{TRAIN_FILE}.zip"):
        if (data_dir / name).exists():
            frame = read_csv(data_dir / name, nrows=nrows)
            return frame.drop(columns=[c for c in drop if c in frame.columns])
    raise DataSourceError(f"no train.csv in {data_dir} (found: {sorted(p.name for p in data_dir.iterdir())})")


def taxi_fare(data_dir: Path) -> pd.DataFrame:
    """First 4,999 rows of the real NYC taxi-fare train.csv; the id column is ``key``."""
    return read_csv(data_dir / "train_sample_5000.csv.gz")


def trip_duration(data_dir: Path) -> pd.DataFrame:
    """Three labelled samples of the real trip-duration train.csv, concatenated."""
    parts = [read_csv(data_dir / f"sample_{name}.csv.gz") for name in ("train", "val", "test")]
    return pd.concat(parts, ignore_index=True)


def competition_sample(data_dir: Path) -> pd.DataFrame:
    """A seeded sample of the real competition train.csv (``train.sample.csv.gz``; see provenance.real.json)."""
    return read_csv(data_dir / "train.sample.csv.gz")


def california_housing(data_dir: Path) -> pd.DataFrame:
    """Original California housing; the competition calls the target MedHouseVal."""
    frame = read_csv(data_dir / "original" / "california_housing.csv.gz")
    return _with_row_id(frame.rename(columns={"MedHouseValue": "MedHouseVal"}))


def bank_churn(data_dir: Path) -> pd.DataFrame:
    """Original bank churn data in the s4e1 columns (RowNumber replaced by id)."""
    frame = read_csv(data_dir / "original" / "Churn_Modelling.csv.gz")
    return _with_row_id(frame.drop(columns=["RowNumber"]))


def mushrooms(data_dir: Path) -> pd.DataFrame:
    """Original UCI secondary mushroom data (class e/p) with an id column."""
    return _with_row_id(read_csv(data_dir / "original" / "secondary_data.csv.gz"))


def used_cars(data_dir: Path) -> pd.DataFrame:
    """Original used-car listings with price and milage as numbers, as in s4e9."""
    frame = read_csv(data_dir / "original" / "used_cars.csv.gz")
    frame = frame.assign(milage=_to_number(frame["milage"], "mi."), price=_to_number(frame["price"], "$"))
    return _with_row_id(frame)


def calories(data_dir: Path) -> pd.DataFrame:
    """Original exercise + calories tables joined on User_ID, Gender renamed Sex, id added, as in s5e5."""
    exercise = read_csv(data_dir / "original" / "exercise.csv.gz")
    burnt = read_csv(data_dir / "original" / "calories.csv.gz")
    frame = exercise.merge(burnt, on="User_ID", how="inner", validate="one_to_one")
    # The competition has no User_ID column; its rows are keyed by id only.
    return _with_row_id(frame.drop(columns=["User_ID"]).rename(columns={"Gender": "Sex"}))


def bank_marketing(data_dir: Path) -> pd.DataFrame:
    """Original UCI bank-full with the target as ``y`` 1/0, as in s5e8."""
    frame = read_csv(data_dir / "original" / "bank-full.csv.gz")
    answer = frame["term deposit"].map({"yes": 1, "no": 0})
    if answer.isna().any():
        raise DataSourceError(f"{data_dir}: 'term deposit' has values other than yes/no")
    return _with_row_id(frame.drop(columns=["term deposit"]).assign(y=answer.astype("int64")))


def _bundled_competition_train(data_dir: Path) -> pd.DataFrame:
    return competition_train(data_dir)


# ----------------------------------------------------------------------------------------------- replicas
def _rng(name: str) -> np.random.Generator:
    # Seeded from the replica's name so every replica is fixed and independent of the others.
    return np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _shift_to_rate(logit: np.ndarray, rate: float) -> np.ndarray:
    """Add the intercept that makes the mean probability ``rate`` (bisection; logit is fixed)."""
    low, high = -30.0, 30.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _sigmoid(logit + mid).mean() < rate else (low, mid)
    return logit + (low + high) / 2


def santander_value_replica(data_dir: Path, n_rows: int = 2000) -> pd.DataFrame:
    """Replica with the real column names (from the bundled 100-row sample): sparse non-negative amounts."""
    sample = read_csv(data_dir / "train_debug_100rows.csv.gz", index_col=0)
    features = [c for c in sample.columns if c not in ("ID", "target")]
    rng = _rng("santander-value-prediction-challenge")
    # Real rows are ~97 % zeros; non-zero entries are round-ish amounts spread over orders of magnitude.
    density = float((sample[features].to_numpy() != 0).mean())
    mask = rng.random((n_rows, len(features))) < density
    amounts = np.round(np.exp(rng.normal(13.0, 1.8, size=mask.shape)), -3)
    values = np.where(mask, amounts, 0.0)
    # A few denser columns carry the signal (the real data also has a handful of informative columns).
    informative = rng.choice(len(features), size=20, replace=False)
    dense = rng.random((n_rows, informative.size)) < 0.6
    values[:, informative] = np.where(dense, amounts[:, informative], 0.0)
    # log(target) grows with the summed log-amounts of those columns (mean ~14.5, sd ~1.8, like the real one).
    log_target = 5.1 + 0.06 * np.log1p(values[:, informative]).sum(axis=1) + rng.normal(0, 0.7, n_rows)
    log_target = np.clip(log_target, np.log(3e4), np.log(4e7))
    ids = [f"{v:09x}" for v in rng.choice(16 ** 9, size=n_rows, replace=False)]
    head = pd.DataFrame({"ID": ids, "target": np.round(np.exp(log_target), 2)})
    # Keep each column's int/float type from the real sample; build one block per type (column-wise
    # assignment over ~5,000 columns is slow).
    names = np.array(features)
    is_int = np.array([pd.api.types.is_integer_dtype(t) for t in sample[features].dtypes])
    blocks = [pd.DataFrame(values[:, is_int].astype(np.int64), columns=names[is_int]),
              pd.DataFrame(values[:, ~is_int], columns=names[~is_int])]
    return pd.concat([head, *blocks], axis=1)[["ID", "target", *features]]


_PORTO_CATEGORIES = {  # column -> (lowest, highest level, share of -1 missing)
    "ps_ind_02_cat": (1, 4, 0.0004), "ps_ind_04_cat": (0, 1, 0.0001), "ps_ind_05_cat": (0, 6, 0.01),
    "ps_car_01_cat": (0, 11, 0.0002), "ps_car_02_cat": (0, 1, 0.0), "ps_car_03_cat": (0, 1, 0.69),
    "ps_car_04_cat": (0, 9, 0.0), "ps_car_05_cat": (0, 1, 0.45), "ps_car_06_cat": (0, 17, 0.0),
    "ps_car_07_cat": (0, 1, 0.02), "ps_car_08_cat": (0, 1, 0.0), "ps_car_09_cat": (0, 4, 0.001),
    "ps_car_10_cat": (0, 2, 0.0), "ps_car_11_cat": (1, 104, 0.0),
}


def porto_seguro_replica(data_dir: Path, n_rows: int = 10000) -> pd.DataFrame:  # noqa: ARG001
    """Replica of the Porto Seguro schema: ind/reg/car/calc groups, _bin/_cat suffixes, -1 = missing."""
    rng = _rng("porto-seguro-safe-driver-prediction")
    cols: dict[str, np.ndarray] = {}

    def ints(low: int, high: int) -> np.ndarray:
        return rng.integers(low, high + 1, n_rows)

    def tenths(high: int) -> np.ndarray:
        return ints(0, high) / 10

    cols["ps_ind_01"] = ints(0, 7)
    cols["ps_ind_02_cat"] = ints(1, 4)
    cols["ps_ind_03"] = ints(0, 11)
    cols["ps_ind_04_cat"] = ints(0, 1)
    cols["ps_ind_05_cat"] = ints(0, 6)
    for k in range(6, 14):
        cols[f"ps_ind_{k:02d}_bin"] = (rng.random(n_rows) < 0.25).astype(int)
    cols["ps_ind_14"] = ints(0, 4)
    cols["ps_ind_15"] = ints(0, 13)
    for k in (16, 17, 18):
        cols[f"ps_ind_{k}_bin"] = (rng.random(n_rows) < 0.35).astype(int)
    cols["ps_reg_01"] = tenths(9)
    cols["ps_reg_02"] = tenths(18)
    cols["ps_reg_03"] = np.round(np.sqrt(ints(1, 1600)) / 40 * 2.5, 6)
    for name in ("ps_car_01_cat", "ps_car_02_cat", "ps_car_03_cat", "ps_car_04_cat", "ps_car_05_cat",
                 "ps_car_06_cat", "ps_car_07_cat", "ps_car_08_cat", "ps_car_09_cat", "ps_car_10_cat",
                 "ps_car_11_cat"):
        low, high, _ = _PORTO_CATEGORIES[name]
        cols[name] = ints(low, high)
    cols["ps_car_11"] = ints(0, 3)
    cols["ps_car_12"] = np.round(np.sqrt(ints(1, 160)) / 10, 6)
    cols["ps_car_13"] = np.round(rng.lognormal(-0.2, 0.25, n_rows), 6)
    cols["ps_car_14"] = np.round(np.sqrt(ints(10, 400)) / 40, 6)
    cols["ps_car_15"] = np.round(np.sqrt(ints(0, 14)), 6)
    for k in (1, 2, 3):
        cols[f"ps_calc_{k:02d}"] = tenths(9)
    for k in range(4, 15):
        cols[f"ps_calc_{k:02d}"] = rng.poisson(3 + k % 5, n_rows)
    for k in range(15, 21):
        cols[f"ps_calc_{k:02d}_bin"] = (rng.random(n_rows) < 0.4).astype(int)
    # Signal lives in ind/reg/car (as in the real data, calc features carry none); weak, like the original.
    logit = (0.6 * (cols["ps_ind_05_cat"] > 0) - 0.1 * cols["ps_ind_15"] + 1.5 * cols["ps_car_13"]
             + 0.6 * cols["ps_reg_03"] + 0.5 * cols["ps_ind_17_bin"] - 0.4 * cols["ps_ind_07_bin"]
             + 0.06 * cols["ps_ind_03"] + 0.5 * (cols["ps_car_07_cat"] == 0) + rng.normal(0, 0.3, n_rows))
    target = (rng.random(n_rows) < _sigmoid(_shift_to_rate(logit, 0.0365))).astype(int)
    # Missing values are written as -1, in the columns where the real data has them.
    missing_share = {name: share for name, (_, _, share) in _PORTO_CATEGORIES.items()}
    missing_share.update({"ps_reg_03": 0.18, "ps_car_11": 0.00001, "ps_car_12": 0.00001, "ps_car_14": 0.07})
    for name, share in missing_share.items():
        if share:
            cols[name] = np.where(rng.random(n_rows) < share, -1, cols[name])
    ids = np.sort(rng.choice(np.arange(7, 1_488_028), size=n_rows, replace=False))
    return pd.DataFrame({"id": ids, "target": target, **cols})


def santander_transaction_replica(data_dir: Path, n_rows: int = 10000) -> pd.DataFrame:  # noqa: ARG001
    """Replica of the Santander transaction schema: ID_code, target (~10 %), var_0..var_199 floats."""
    rng = _rng("santander-customer-transaction-prediction")
    centres = rng.uniform(-10, 20, 200)
    scales = rng.uniform(0.5, 10, 200)
    values = np.round(centres + scales * rng.standard_normal((n_rows, 200)), 4)
    # Like the real data: many weak, independent per-feature effects, no missing values.
    weights = np.where(rng.random(200) < 0.4, 0.0, rng.normal(0, 0.2, 200))
    logit = ((values - centres) / scales) @ weights
    target = (rng.random(n_rows) < _sigmoid(_shift_to_rate(logit, 0.1))).astype(int)
    frame = pd.DataFrame(values, columns=[f"var_{k}" for k in range(200)])
    head = pd.DataFrame({"ID_code": [f"train_{k}" for k in range(n_rows)], "target": target})
    return pd.concat([head, frame], axis=1)


def song_bpm_replica(data_dir: Path, n_rows: int = 10000) -> pd.DataFrame:  # noqa: ARG001
    """Replica of the s5e9 song table: nine audio descriptors and BeatsPerMinute."""
    rng = _rng("playground-series-s5e9")
    frame = pd.DataFrame({
        "id": np.arange(n_rows, dtype=np.int64),
        "RhythmScore": np.clip(rng.normal(0.63, 0.16, n_rows), 0.07, 0.98),
        "AudioLoudness": np.clip(-np.abs(rng.normal(-8.4, 4.5, n_rows)), -28, -1.4),
        "VocalContent": np.clip(rng.gamma(1.5, 0.05, n_rows), 0.02, 0.26),
        "AcousticQuality": np.clip(rng.beta(0.6, 2.2, n_rows), 5e-6, 0.995),
        "InstrumentalScore": np.clip(rng.beta(0.5, 2.5, n_rows), 1e-6, 0.87),
        "LivePerformanceLikelihood": np.clip(rng.normal(0.18, 0.1, n_rows), 0.024, 0.6),
        "MoodScore": np.clip(rng.normal(0.56, 0.22, n_rows), 0.025, 0.98),
        "TrackDurationMs": np.clip(rng.normal(241000, 58000, n_rows), 63000, 465000),
        "Energy": np.clip(rng.beta(3, 1.6, n_rows), 6.7e-5, 1.0),
    })
    bpm = (119 + 22 * (frame["RhythmScore"] - 0.63) / 0.16 + 9 * (frame["Energy"] - 0.65) / 0.2
           + 5 * (frame["AudioLoudness"] + 8.4) / 4.5 + rng.normal(0, 18, n_rows))
    frame["BeatsPerMinute"] = np.clip(bpm, 46.7, 206.0)
    return frame.round({c: 5 for c in frame.columns if c not in ("id", "TrackDurationMs")}).round(
        {"TrackDurationMs": 4})


# name -> function(data_dir) -> labelled frame in the competition's columns
BUILDERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    "spaceship_titanic": _bundled_competition_train,   # real train.csv (its test.csv has no labels)
    "costa_rica_poverty": _bundled_competition_train,
    "forest_cover": _bundled_competition_train,
    "taxi_fare": taxi_fare,
    "trip_duration": trip_duration,
    "competition_sample": competition_sample,
    "california_housing": california_housing,
    "bank_churn": bank_churn,
    "mushrooms": mushrooms,
    "used_cars": used_cars,
    "calories": calories,
    "bank_marketing": bank_marketing,
    "santander_value_replica": santander_value_replica,
    "porto_seguro_replica": porto_seguro_replica,
    "santander_transaction_replica": santander_transaction_replica,
    "song_bpm_replica": song_bpm_replica,
}

# How to read a downloaded competition train.csv for tasks whose file needs care.
_KAGGLE_TRAIN_OPTIONS: dict[str, dict] = {
    "nyc-taxi-trip-duration": {"drop": ("dropoff_datetime",)},     # a leak: absent from Kaggle's test.csv
    "new-york-city-taxi-fare-prediction": {"nrows": 200_000},     # the full file has 55 M rows
}


# ----------------------------------------------------------------------------------------------- loading
def resolve_source(task: Task, source: str | None = None) -> str:
    """Which data to use: the ``source`` argument, else env ``MLTB_DATA_SOURCE``, else the spec's source.

    ``original`` applies to tasks with an ``original_builder``; other tasks keep their own source (as
    ``bundled`` does for a replica task), so one environment setting can cover a whole run.
    """
    chosen = source or read_environment(SOURCE_ENV) or task.source
    if chosen not in DATA_SOURCES:
        raise DataSourceError(f"unknown data source {chosen!r} (from {'argument' if source else SOURCE_ENV}); "
                              f"expected {', '.join(DATA_SOURCES)}")
    if chosen == "kaggle":
        return "kaggle"
    if chosen == "original" and getattr(task, "original_builder", None):
        return "original"
    if task.source == "kaggle" and task.data is None:
        return "kaggle"  # a kaggle-only spec has nothing offline to fall back on
    return task.source


def _source_files(task: Task, source: str) -> list[Path]:
    if source == "kaggle":
        return []
    if task.data_path is not None:  # a user spec's own file (None exactly when task.data is)
        return [task.data_path]
    directory = raw_data_dir(task)
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.is_dir() else []


def source_fingerprint(task: Task, source: str | None = None) -> str:
    """Hash of what the labelled frame is built from: raw file bytes, builder name and version."""
    source = resolve_source(task, source)
    digest = hashlib.sha256(f"{task.slug}|{source}|{_builder_name(task, source)}|{BUILDER_VERSION}".encode())
    for path in _source_files(task, source):
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def _check_columns(frame: pd.DataFrame, task: Task, origin: str) -> pd.DataFrame:
    columns = list(frame.columns)
    for field_name in ("target", "id_column"):
        column = getattr(task, field_name)
        if column not in frame.columns:
            raise DataSourceError(f"{origin}: column {column!r} named by field '{field_name}' of {task.spec_path} "
                                  f"is not in the data; available columns: {', '.join(map(str, columns[:60]))}"
                                  + (f" ... ({len(columns)} in all)" if len(columns) > 60 else ""))
    repeated = frame[task.id_column].duplicated()
    if repeated.any():
        # the grader matches a submission's rows to the held-out rows by id: each row needs its own
        examples = ", ".join(repr(v)[:40] for v in frame.loc[repeated, task.id_column].drop_duplicates().head(3).tolist())
        raise DataSourceError(f"{origin}: id column {task.id_column!r} must be unique (one row per id, the grader "
                              f"matches submissions by it), but {int(repeated.sum()):,} rows repeat an earlier row's "
                              f"id (duplicates), e.g. {examples}")
    if frame[task.target].isna().any():
        frame = frame[frame[task.target].notna()].reset_index(drop=True)  # unlabelled rows cannot be graded
    if frame.empty:
        raise DataSourceError(f"{origin}: no labelled rows")
    return frame


def _builder_name(task: Task, source: str) -> str | None:
    return task.original_builder if source == "original" else task.builder


def _build(task: Task, source: str, kaggle_dir: Path | None) -> tuple[pd.DataFrame, str]:
    if source == "kaggle":
        directory = fetch_from_kaggle(task, kaggle_dir)
        return competition_train(directory, **_KAGGLE_TRAIN_OPTIONS.get(task.slug, {})), str(directory)
    if task.data is not None and source != "original":
        return read_csv(task.data_path), str(task.data_path)
    builder = _builder_name(task, source)
    return BUILDERS[builder](raw_data_dir(task)), f"{raw_data_dir(task)} (builder {builder})"


def load_labelled_frame(task: Task, source: str | None = None, cache_dir: Path | str | None = None) -> pd.DataFrame:
    """The task's labelled frame in competition columns, built once and cached as a pickle."""
    source = resolve_source(task, source)
    cache = default_cache_dir(cache_dir)
    if source == "kaggle":
        kaggle_dir = cache / "kaggle" / task.competition
        frame, origin = _build(task, source, kaggle_dir)
        return _check_columns(frame, task, origin)
    cached = cache / "frames" / f"{task.slug}-{source_fingerprint(task, source)}.pkl"
    frame = _cached_frame(cached)
    if frame is not None:
        return frame
    frame, origin = _build(task, source, None)
    frame = _check_columns(frame, task, origin)
    _atomic_pickle(frame, cached)
    return frame


def _cached_frame(path: Path) -> pd.DataFrame | None:
    """The frame cached at ``path``, or None (a miss) when there is none or it cannot be loaded, in which case
    the entry is removed so that it is rebuilt. Unpickling damaged bytes can raise almost anything (a protocol
    this Python lacks is a ValueError, a class that moved in a pandas upgrade an AttributeError or
    ImportError, deep nesting a RecursionError), so every failure to load counts as a miss."""
    try:
        with path.open("rb") as handle:
            frame = pickle.load(handle)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - see the docstring: any failure to load is a miss
        print(f"mltb: frames cache {path} cannot be loaded ({type(exc).__name__}: {str(exc)[:200]}); "
              "rebuilding it", file=sys.stderr)
        frame = None
    if isinstance(frame, pd.DataFrame):
        return frame
    if frame is not None:
        print(f"mltb: frames cache {path} holds a {type(frame).__name__}, not a frame; rebuilding it",
              file=sys.stderr)
    path.unlink(missing_ok=True)
    return None


def _atomic_pickle(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False)
    try:
        with handle:
            pickle.dump(obj, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------------------------- kaggle
def _kaggle_api() -> Any:
    try:
        from kaggle.api.kaggle_api_extended import KaggleApi
    except ImportError as exc:
        raise KaggleUnavailableError(
            "real competition data needs the optional kaggle package: pip install mltb[kaggle] "
            "(then put your API token in ~/.kaggle/kaggle.json or set KAGGLE_USERNAME and KAGGLE_KEY, "
            "and accept the competition's rules on kaggle.com)") from exc
    api = KaggleApi()
    try:
        api.authenticate()
    except Exception as exc:  # the kaggle client raises bare exceptions / OSError for missing tokens
        raise KaggleUnavailableError(f"kaggle credentials not found or invalid ({exc}); put your API token in "
                                     "~/.kaggle/kaggle.json or set KAGGLE_USERNAME and KAGGLE_KEY") from exc
    return api


def fetch_from_kaggle(task: Task, dest_dir: Path | str) -> Path:
    """Download the competition's files into ``dest_dir`` (once) and unpack them; returns ``dest_dir``."""
    dest = Path(dest_dir)
    if not any(dest.glob("train.csv*")):
        dest.mkdir(parents=True, exist_ok=True)
        api = _kaggle_api()
        api.competition_download_files(task.competition, path=str(dest), quiet=True)
        for archive in dest.glob("*.zip"):
            try:
                with zipfile.ZipFile(archive) as bundle:
                    bundle.extractall(dest)
            except zipfile.BadZipFile as exc:
                raise DataSourceError(f"downloaded archive {archive} is corrupt: {exc}") from exc
            archive.unlink()
        # Some competitions zip each file separately (train.csv.zip inside the bundle); pandas reads those.
    if not any(dest.glob("train.csv*")):
        found = sorted(p.name for p in dest.iterdir())
        shutil.rmtree(dest, ignore_errors=True)
        raise DataSourceError(f"kaggle download of {task.competition!r} has no train.csv (got: {found})")
    return dest
