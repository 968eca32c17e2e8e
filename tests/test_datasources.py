"""Labelled frames: bundled builders, schema replicas, bad data, the Kaggle loader (with a fake API)."""
from __future__ import annotations

import gzip
import io
import json
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from mltb_core.bench.fixtures import FIXTURES
from mltb_core.bench import datasources
from mltb_core.bench.datasources import (DataSourceError, KaggleUnavailableError, fetch_from_kaggle, load_labelled_frame,
                                   source_fingerprint)
from mltb_core.bench.tasks import get_task, load_tasks

TASKS = load_tasks()
BUNDLED = sorted(slug for slug, task in TASKS.items() if task.source == "bundled")
PROVENANCE = json.loads((FIXTURES / "data" / "provenance.json").read_text())
# Labelled rows each builder must produce, from the bundled provenance notes.
EXPECTED_ROWS = {
    "spaceship-titanic": 8693, "costa-rican-household-poverty-prediction": 9557,
    "forest-cover-type-kernels-only": 15120, "new-york-city-taxi-fare-prediction": 4999,
    "nyc-taxi-trip-duration": 5000 + 300 + 250, "playground-series-s3e1": 30000, "playground-series-s4e1": 30000,
    "playground-series-s4e8": 61069, "playground-series-s4e9": 4009, "playground-series-s5e5": 15000,
    "playground-series-s5e8": 45211,
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("MLTB_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("MLTB_DATA_SOURCE", raising=False)
    monkeypatch.delenv("MLTB_TASKS_DIR", raising=False)


def user_task(tmp_path: Path, csv_text: str, target="label", id_column="row", open_gz=False):
    """A user spec in tmp_path pointing at its own CSV (optionally written gzipped)."""
    name = "data.csv.gz" if open_gz else "data.csv"
    if open_gz:
        (tmp_path / name).write_bytes(gzip.compress(csv_text.encode()))
    else:
        (tmp_path / name).write_text(csv_text)
    (tmp_path / "t.toml").write_text(
        f'slug = "user-task"\ntitle = "U"\nproblem_type = "binary"\ntarget = "{target}"\n'
        f'id_column = "{id_column}"\nmetric = "accuracy"\nprediction = "label"\nsource = "bundled"\n'
        f'data = "{name}"\nsummary = "s"\n[fields]\nx = "a number"\n')
    return get_task("user-task", extra_dirs=[tmp_path])


@pytest.mark.parametrize("slug", BUNDLED)
def test_every_bundled_task_builds_its_labelled_frame(slug):
    task = TASKS[slug]
    frame = load_labelled_frame(task)
    assert len(frame) == EXPECTED_ROWS[slug]
    assert frame[task.id_column].is_unique
    assert frame[task.target].notna().all()
    assert set(task.fields) & set(frame.columns), "field descriptions should name real columns"
    # Cached: a second call returns the same frame without running the builder.
    pd.testing.assert_frame_equal(load_labelled_frame(task), frame)


def test_playground_frames_use_the_competition_columns():
    churn = load_labelled_frame(TASKS["playground-series-s4e1"])
    assert list(churn.columns) == ["id", "CustomerId", "Surname", "CreditScore", "Geography", "Gender", "Age",
                                   "Tenure", "Balance", "NumOfProducts", "HasCrCard", "IsActiveMember",
                                   "EstimatedSalary", "Exited"]
    # A seeded 30,000-row sample of the real train.csv (ids 0..165033), rows in the file's order.
    assert churn["id"].is_monotonic_increasing and churn["id"].max() <= 165033
    cars = load_labelled_frame(TASKS["playground-series-s4e9"])
    assert cars["price"].dtype == "float64" and cars["milage"].dtype == "float64"
    assert cars.loc[0, ["milage", "price"]].tolist() == [51000.0, 10300.0]
    calories = load_labelled_frame(TASKS["playground-series-s5e5"])
    assert list(calories.columns) == ["id", "Sex", "Age", "Height", "Weight", "Duration", "Heart_Rate",
                                      "Body_Temp", "Calories"]
    bank = load_labelled_frame(TASKS["playground-series-s5e8"])
    assert "term deposit" not in bank.columns and set(bank["y"]) == {0, 1} and bank["y"].sum() == 5289
    assert "MedHouseVal" in load_labelled_frame(TASKS["playground-series-s3e1"]).columns
    assert set(load_labelled_frame(TASKS["playground-series-s4e8"])["class"]) == {"e", "p"}
    trips = load_labelled_frame(TASKS["nyc-taxi-trip-duration"])
    assert "dropoff_datetime" not in trips.columns


REPLICA_RATES = {"porto-seguro-safe-driver-prediction": (0.025, 0.05),
                 "santander-customer-transaction-prediction": (0.08, 0.12)}


@pytest.mark.parametrize("slug", ["porto-seguro-safe-driver-prediction", "santander-customer-transaction-prediction",
                                  "playground-series-s5e9", "santander-value-prediction-challenge"])
def test_replicas_are_deterministic_labelled_and_learnable(slug, tmp_path):
    task = TASKS[slug]
    assert task.source == "replica" and task.is_replica
    builder = datasources.BUILDERS[task.builder]
    rows = 800 if slug == "santander-value-prediction-challenge" else 10000  # 4,993 columns: keep it quick
    first = builder(datasources.raw_data_dir(task), n_rows=rows)
    pd.testing.assert_frame_equal(first, builder(datasources.raw_data_dir(task), n_rows=rows))
    assert first[task.id_column].is_unique and task.target in first.columns
    target = first[task.target].astype(float)
    if slug in REPLICA_RATES:
        low, high = REPLICA_RATES[slug]
        assert low < target.mean() < high
    features = first.drop(columns=[task.id_column, task.target]).astype(float)
    if task.problem_type == "binary":
        # Learnable: a plain linear model ranks held-out rows better than chance.
        half = len(first) // 2
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
        model.fit(features[:half], target[:half])
        assert roc_auc_score(target[half:], model.predict_proba(features[half:])[:, 1]) > 0.58
    else:
        y = np.log1p(target) if task.metric == "rmsle" else target
        features = np.log1p(features) if task.metric == "rmsle" else features
        x = features.to_numpy()
        x = x[:, x.std(axis=0) > 0]
        x_c, y_c = x - x.mean(axis=0), (y - y.mean()).to_numpy()
        correlation = (x_c * y_c[:, None]).sum(axis=0) / np.sqrt((x_c ** 2).sum(axis=0) * (y_c ** 2).sum())
        assert np.abs(correlation).max() > 0.2  # noise alone stays near 4 / sqrt(rows) < 0.15


def test_porto_replica_uses_the_real_schema_and_minus_one_for_missing():
    frame = datasources.porto_seguro_replica(Path("."))
    assert len(frame.columns) == 59 and frame.columns[:2].tolist() == ["id", "target"]
    assert {c.split("_")[1] for c in frame.columns[2:]} == {"ind", "reg", "car", "calc"}
    assert frame.isna().sum().sum() == 0
    assert (frame["ps_car_03_cat"] == -1).mean() > 0.5 and (frame["ps_reg_03"] == -1).any()
    assert set(frame.filter(like="_bin")).issubset(frame.columns) and frame.filter(like="_bin").isin([0, 1]).all().all()


def test_santander_value_replica_keeps_the_real_columns():
    task = TASKS["santander-value-prediction-challenge"]
    sample = pd.read_csv(datasources.raw_data_dir(task) / "train_debug_100rows.csv.gz", index_col=0, nrows=1)
    frame = datasources.santander_value_replica(datasources.raw_data_dir(task), n_rows=50)
    assert list(frame.columns) == list(sample.columns) and len(frame.columns) == 4993
    values = frame.iloc[:, 2:].to_numpy()
    assert (values >= 0).all() and (values == 0).mean() > 0.9


def test_corrupt_gzip_names_the_file(tmp_path):
    task = user_task(tmp_path, "row,x,label\n1,2,0\n", open_gz=True)
    data = tmp_path / "data.csv.gz"
    data.write_bytes(data.read_bytes()[:12])  # truncated gzip stream
    with pytest.raises(DataSourceError) as info:
        load_labelled_frame(task)
    assert str(data) in str(info.value)


def test_malformed_csv_names_the_file_and_the_pandas_error(tmp_path):
    task = user_task(tmp_path, 'row,x,label\n1,2,0\n2,"unterminated,1\n')
    with pytest.raises(DataSourceError) as info:
        load_labelled_frame(task)
    assert str(tmp_path / "data.csv") in str(info.value) and "ParserError" in str(info.value)


def test_spec_column_missing_from_the_data_names_file_field_and_columns(tmp_path):
    task = user_task(tmp_path, "row,x,outcome\n1,2,0\n2,3,1\n")
    with pytest.raises(DataSourceError) as info:
        load_labelled_frame(task)
    message = str(info.value)
    assert str(tmp_path / "data.csv") in message and "field 'target'" in message
    assert "'label'" in message and "row, x, outcome" in message


def test_duplicate_ids_are_rejected(tmp_path):
    task = user_task(tmp_path, "row,x,label\n1,2,0\n1,3,1\n")
    with pytest.raises(DataSourceError, match="duplicate"):
        load_labelled_frame(task)


def test_user_csv_task_loads_and_drops_unlabelled_rows(tmp_path):
    task = user_task(tmp_path, "row,x,label\n1,2,0\n2,3,\n3,4,1\n")
    frame = load_labelled_frame(task)
    assert frame["row"].tolist() == [1, 3]


def test_fingerprint_follows_the_source_bytes(tmp_path):
    task = user_task(tmp_path, "row,x,label\n1,2,0\n2,3,1\n")
    before = source_fingerprint(task)
    (tmp_path / "data.csv").write_text("row,x,label\n1,2,1\n2,3,1\n")
    assert source_fingerprint(task) != before
    assert load_labelled_frame(task)["label"].tolist() == [1, 1]  # not the stale cached frame


# ------------------------------------------------------------------------------------------------ Kaggle
def install_fake_kaggle(monkeypatch, files: dict[str, str], calls: list):
    """A fake ``kaggle`` package whose API 'downloads' a zip made from ``files``."""

    class FakeApi:
        def authenticate(self):
            calls.append("authenticate")

        def competition_download_files(self, competition, path, quiet=True):
            calls.append(competition)
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as bundle:
                for name, text in files.items():
                    bundle.writestr(name, text)
            Path(path, f"{competition}.zip").write_bytes(buffer.getvalue())

    extended = types.ModuleType("kaggle.api.kaggle_api_extended")
    extended.KaggleApi = FakeApi
    for name, module in (("kaggle", types.ModuleType("kaggle")), ("kaggle.api", types.ModuleType("kaggle.api")),
                         ("kaggle.api.kaggle_api_extended", extended)):
        monkeypatch.setitem(sys.modules, name, module)


def test_kaggle_source_downloads_once_and_reads_train_csv(monkeypatch):
    calls: list = []
    train = "id,vendor_id,dropoff_datetime,trip_duration\nid1,1,2016-01-01,300\nid2,2,2016-01-02,400\n"
    install_fake_kaggle(monkeypatch, {"train.csv": train, "test.csv": "id,vendor_id\nid3,1\n"}, calls)
    monkeypatch.setenv("MLTB_DATA_SOURCE", "kaggle")
    task = TASKS["nyc-taxi-trip-duration"]
    frame = load_labelled_frame(task)
    assert frame["id"].tolist() == ["id1", "id2"] and "dropoff_datetime" not in frame.columns  # leak dropped
    load_labelled_frame(task)
    assert calls == ["authenticate", "nyc-taxi-trip-duration"]  # the second load reuses the download


def test_replica_task_switches_to_kaggle_data_by_argument(monkeypatch):
    calls: list = []
    install_fake_kaggle(monkeypatch, {"train.csv": "ID_code,target,var_0\ntrain_0,1,0.5\ntrain_1,0,0.1\n"}, calls)
    frame = load_labelled_frame(TASKS["santander-customer-transaction-prediction"], source="kaggle")
    assert len(frame) == 2 and calls[-1] == "santander-customer-transaction-prediction"


def test_kaggle_download_without_train_csv_is_an_error(monkeypatch, tmp_path):
    install_fake_kaggle(monkeypatch, {"readme.txt": "nothing"}, [])
    with pytest.raises(DataSourceError, match="no train.csv"):
        fetch_from_kaggle(TASKS["spaceship-titanic"], tmp_path / "dl")


def test_missing_kaggle_package_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "kaggle", None)  # makes `import kaggle...` raise ImportError
    with pytest.raises(KaggleUnavailableError) as info:
        fetch_from_kaggle(TASKS["spaceship-titanic"], tmp_path / "dl")
    assert "pip install mltb[kaggle]" in str(info.value) and "kaggle.json" in str(info.value)


def test_unknown_source_override_is_rejected(monkeypatch):
    monkeypatch.setenv("MLTB_DATA_SOURCE", "s3")
    with pytest.raises(DataSourceError, match="unknown data source 's3'"):
        load_labelled_frame(TASKS["spaceship-titanic"])


@pytest.mark.parametrize("slug, rows, sample_of", [("playground-series-s3e1", 20640, 37137),
                                                   ("playground-series-s4e1", 10000, 165034)])
def test_playgrounds_with_real_rows_keep_the_original_dataset_as_an_alternative(slug, rows, sample_of, monkeypatch):
    task = TASKS[slug]
    assert task.data_origin == "competition-sample" and task.active_data_origin == "competition-sample"
    competition = load_labelled_frame(task)
    real = json.loads((FIXTURES / "data" / slug / "provenance.real.json").read_text())
    assert real["original_rows"] == sample_of and list(competition.columns) == real["columns"]
    assert PROVENANCE[slug]["competition_sample"]["rows"]["train.sample.csv.gz"] == len(competition) == 30000
    original = load_labelled_frame(task, source="original")
    assert len(original) == rows and list(original.columns) == list(competition.columns)
    assert original["id"].tolist() == list(range(rows))
    assert source_fingerprint(task, "original") != source_fingerprint(task)
    monkeypatch.setenv("MLTB_DATA_SOURCE", "original")
    assert task.active_data_origin == "original" and not task.percentile_comparable
    assert task.percentile_note == "original dataset; the board was scored on the competition's synthetic data"
    # Tasks without an original alternative keep their own data under the same setting.
    assert datasources.resolve_source(TASKS["spaceship-titanic"]) == "bundled"


def test_bundled_provenance_lists_every_bundled_task():
    assert set(BUNDLED) <= set(PROVENANCE)
    for slug in BUNDLED:
        for name in PROVENANCE[slug]["files"]:
            assert (FIXTURES / "data" / slug / (name + ".gz")).is_file()
