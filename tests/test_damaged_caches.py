"""Every cache mltb writes rebuilds itself when damaged (containment round 5): a frames pickle, a split's files
and meta.json, a prompt-prefix state file. Any failure to load an entry is a miss, the entry is removed (and
rebuilt), never an exception that turns every trial needing it into an infrastructure error."""
from __future__ import annotations

import hashlib
import json
import pickle
import struct

import numpy as np
import pandas as pd
import pytest

from mltb_core.bench.datasources import load_labelled_frame
from mltb_core.bench.splits import META_FILE, prepare_split
from mltb_core.bench.tasks import load_tasks
from mltb_core.llm.local.prefix_store import FILE_SUFFIX, MAGIC, PrefixStore, SavedPrefix

TASK = load_tasks()["playground-series-s4e1"]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv("MLTB_DATA_SOURCE", raising=False)
    monkeypatch.delenv("MLTB_CACHE", raising=False)


def _protocol_9(data: bytes) -> bytes:
    assert data[:1] == b"\x80"
    return b"\x80\x09" + data[2:]


def _renamed(old: bytes, new: bytes):
    """The pickle with a global renamed (same length, so the framing holds): what a pandas upgrade that
    moved a class does to a cache written before it."""
    def damage(data: bytes) -> bytes:
        assert old in data and len(old) == len(new)
        return data.replace(old, new)
    return damage


FRAME_DAMAGE = {
    "protocol 9": _protocol_9,
    "a class that moved": _renamed(b"DataFrame", b"DataFramX"),
    "a module that moved": _renamed(b"pandas", b"pandaz"),
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "not a frame": lambda data: pickle.dumps({"not": "a frame"}),
    "deeply nested": lambda data: b"\x80\x04" + b"]" * 200_000 + b".",
}


@pytest.mark.parametrize("damage", list(FRAME_DAMAGE))
def test_a_damaged_frames_cache_is_a_miss_and_is_rebuilt(damage, tmp_path, capsys):
    frame = load_labelled_frame(TASK, cache_dir=tmp_path)
    (cached,) = (tmp_path / "frames").glob(f"{TASK.slug}-*.pkl")
    cached.write_bytes(FRAME_DAMAGE[damage](cached.read_bytes()))
    again = load_labelled_frame(TASK, cache_dir=tmp_path)
    pd.testing.assert_frame_equal(again, frame)
    with cached.open("rb") as handle:   # the entry was replaced by a good one
        pd.testing.assert_frame_equal(pickle.load(handle), frame)
    assert "rebuilding it" in capsys.readouterr().err


def _digests(split) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in (split.train_path, split.test_path, split.labels_path)]


SPLIT_DAMAGE = {
    "meta.json not JSON": lambda d: (d / META_FILE).write_text("{half"),
    "meta.json a list": lambda d: (d / META_FILE).write_text("[1, 2]"),
    "meta.json deeply nested": lambda d: (d / META_FILE).write_text("[" * 100_000 + "]" * 100_000),
    "meta.json not UTF-8": lambda d: (d / META_FILE).write_bytes(b"\xff\xfe{}"),
    "meta.json hashes a list": lambda d: (d / META_FILE).write_text(json.dumps(
        {**json.loads((d / META_FILE).read_text()), "sha256": ["x"]})),
    "one byte of train.csv": lambda d: (d / "train.csv").write_bytes(
        (d / "train.csv").read_bytes()[:-2] + b"9\n"),
    "one byte of test.csv": lambda d: (d / "test.csv").write_bytes(
        (d / "test.csv").read_bytes()[:-2] + b"9\n"),
}


@pytest.mark.parametrize("damage", list(SPLIT_DAMAGE))
def test_a_damaged_split_is_rebuilt_to_the_same_bytes(damage, tmp_path):
    split = prepare_split(TASK, seed=0, cache_dir=tmp_path)
    expected = _digests(split)
    SPLIT_DAMAGE[damage](split.dir)
    rebuilt = prepare_split(TASK, seed=0, cache_dir=tmp_path)
    assert _digests(rebuilt) == expected
    assert rebuilt.meta["train_rows"] > 0   # meta.json is whole again


def test_a_damaged_frames_cache_under_a_damaged_split_rebuilds_both(tmp_path):
    split = prepare_split(TASK, seed=0, cache_dir=tmp_path)
    expected = _digests(split)
    (cached,) = (tmp_path / "frames").glob("*.pkl")
    cached.write_bytes(_protocol_9(cached.read_bytes()))
    (split.dir / META_FILE).unlink()
    assert _digests(prepare_split(TASK, seed=0, cache_dir=tmp_path)) == expected


def _state_file(header: bytes, body: bytes = b"\0" * 64) -> bytes:
    return MAGIC + struct.pack("<I", len(header)) + header + body


def _header(**changes) -> bytes:
    return json.dumps({"n_tokens": 3, "n_vocab": 2, "seed": 7, "sha256": "0" * 64, **changes}).encode()


PREFIX_DAMAGE = {
    "100,000 nested [": _state_file(b"[" * 100_000),
    "n_tokens 1e300": _state_file(_header(n_tokens=1e300)),
    "n_tokens a huge integer": _state_file(_header(n_tokens=10 ** 400)),
    "n_vocab 1e300": _state_file(_header(n_vocab=1e300)),
    "n_tokens a string": _state_file(_header(n_tokens="3")),
    "n_tokens true": _state_file(_header(n_tokens=True)),
    "seed 1e300": _state_file(_header(seed=1e300)),
    "seed a huge integer": _state_file(_header(seed=10 ** 300)),
    "a list header": _state_file(b"[3, 2, 7]"),
    "a header length of 4 GB": MAGIC + struct.pack("<I", 0xFFFFFFFF) + b"{}",
    "a header not UTF-8": _state_file(b"\xff\xfe"),
    "magic only": MAGIC,
}


@pytest.mark.parametrize("damage", list(PREFIX_DAMAGE))
def test_a_crafted_prefix_file_is_a_miss_and_is_removed(damage, tmp_path, capsys):
    store = PrefixStore(tmp_path, capacity_bytes=1 << 20)
    good = store.save(SavedPrefix(tokens=np.array([1, 2, 3], dtype=np.int32),
                                  scores=np.zeros((1, 8), dtype=np.float32), state=b"kv" * 10, seed=7))
    crafted = tmp_path / ("crafted" + FILE_SUFFIX)
    crafted.write_bytes(PREFIX_DAMAGE[damage])
    entry, length = store.longest(np.array([1, 2, 3, 4]))
    assert entry is not None and entry.path == good and length == 3
    assert not crafted.exists()
    assert "crafted" in capsys.readouterr().err
    assert store.load(entry) is not None


def test_a_crafted_header_that_passes_the_token_read_is_deleted_on_load(tmp_path):
    """The header is read whole on load too: a file whose tokens read but whose vocabulary count is a lie."""
    store = PrefixStore(tmp_path, capacity_bytes=1 << 20)
    path = store.save(SavedPrefix(tokens=np.array([1, 2, 3], dtype=np.int32),
                                  scores=np.zeros((1, 8), dtype=np.float32), state=b"kv", seed=7))
    data = path.read_bytes()
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(data[start:start + length])
    forged = json.dumps({**header, "n_vocab": 1 << 23}).encode()
    path.write_bytes(MAGIC + struct.pack("<I", len(forged)) + forged + data[start + length:])
    entry, _ = store.longest(np.array([1, 2, 3]))
    assert entry is not None and store.load(entry) is None and not path.exists()
