"""The local server's prefix store (mltb_core/llm/local/prefix_store.py): prompt prefixes saved to disk so a new
server process starts warm. The file format and eviction here; a real restore on the tiny model below."""
from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mltb_core.llm.local.prefix_store import FILE_SUFFIX, PrefixStore, SavedPrefix, common_prefix, store_directory


def saved(tokens: list[int], state_bytes: int = 1000, seed: int = 7) -> SavedPrefix:
    return SavedPrefix(tokens=np.array(tokens, dtype=np.int32), scores=np.arange(5, dtype=np.float32).reshape(1, 5),
                       state=bytes(range(256)) * (state_bytes // 256) + b"x" * (state_bytes % 256), seed=seed)


def test_common_prefix():
    a = np.array([1, 2, 3, 4])
    assert common_prefix(a, np.array([1, 2, 9])) == 2
    assert common_prefix(a, np.array([1, 2])) == 2
    assert common_prefix(a, np.array([7])) == 0
    assert common_prefix(a, np.array([], dtype=int)) == 0


def test_a_saved_prefix_comes_back_whole_and_the_longest_match_wins(tmp_path):
    store = PrefixStore(tmp_path, capacity_bytes=1 << 20)
    assert store.longest(np.array([1, 2, 3])) == (None, 0)
    store.save(saved([1, 2, 3, 4, 5], seed=11))
    store.save(saved([1, 2, 8, 9]))
    entry, length = store.longest(np.array([1, 2, 3, 4, 6, 6]))
    assert length == 4 and entry is not None
    back = store.load(entry)
    assert back is not None
    assert back.tokens.tolist() == [1, 2, 3, 4, 5] and back.seed == 11
    assert back.scores.shape == (1, 5) and back.scores.tolist() == [[0, 1, 2, 3, 4]]
    assert back.state == saved([0]).state
    # a second store over the same directory (another server process) sees both
    assert sorted(len(e.tokens) for e in PrefixStore(tmp_path, 1 << 20).entries()) == [4, 5]


def test_a_damaged_file_is_deleted_never_restored(tmp_path):
    store = PrefixStore(tmp_path, capacity_bytes=1 << 20)
    path = store.save(saved([1, 2, 3]))
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # one flipped byte in the KV cells
    path.write_bytes(bytes(data))
    entry, _ = store.longest(np.array([1, 2, 3]))
    assert store.load(entry) is None
    assert not path.exists()
    # a truncated file and a foreign file never enter the index
    (tmp_path / ("short" + FILE_SUFFIX)).write_bytes(b"MLTBKV01\x05")
    (tmp_path / ("foreign" + FILE_SUFFIX)).write_bytes(b"not a state")
    assert store.entries() == []


def test_a_write_in_progress_is_invisible(tmp_path):
    store = PrefixStore(tmp_path, capacity_bytes=1 << 20)
    path = store.save(saved([4, 5, 6]))
    (tmp_path / f".{path.name}.999.tmp").write_bytes(path.read_bytes()[:50])
    assert [e.tokens.tolist() for e in store.entries()] == [[4, 5, 6]]


def test_least_recently_used_files_go_beyond_the_capacity(tmp_path):
    store = PrefixStore(tmp_path, capacity_bytes=3 * 1200)
    first = store.save(saved([1, 1, 1]))
    second = store.save(saved([2, 2, 2]))
    os.utime(first, ns=(1, 1))
    os.utime(second, ns=(2, 2))
    store.load(store.longest(np.array([1, 1, 1]))[0])  # restoring marks it recently used
    store.save(saved([3, 3, 3]))
    store.save(saved([4, 4, 4]))  # past 3 x 1,200 bytes: the least recently used (second) goes
    left = sorted(e.tokens[0] for e in store.entries())
    assert left == [1, 3, 4], left


def test_a_state_larger_than_the_store_is_not_written(tmp_path):
    store = PrefixStore(tmp_path, capacity_bytes=500)
    assert store.save(saved([1, 2], state_bytes=2000)) is None
    assert store.entries() == []


def test_an_unwritable_store_costs_the_save_not_the_caller(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = PrefixStore(blocker / "store", capacity_bytes=1 << 20)  # a path under a file: mkdir fails
    assert store.save(saved([1, 2])) is None
    assert store.entries() == []


def test_each_model_and_context_setup_has_its_own_store(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    base = store_directory(tmp_path, model, llama_cpp="0.3.36", n_ctx=4096, flash_attn="true")
    assert base == store_directory(tmp_path, model, llama_cpp="0.3.36", n_ctx=4096, flash_attn="true")
    assert base != store_directory(tmp_path, model, llama_cpp="0.3.36", n_ctx=8192, flash_attn="true")
    assert base != store_directory(tmp_path, model, llama_cpp="0.3.37", n_ctx=4096, flash_attn="true")
    model.write_bytes(b"GGUF2")  # another file at the same path
    assert base != store_directory(tmp_path, model, llama_cpp="0.3.36", n_ctx=4096, flash_attn="true")


def test_the_server_command_carries_the_store_unless_switched_off(tmp_path, monkeypatch):
    from mltb_core.llm.local import LocalServer

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    command = LocalServer(model, cache_dir=tmp_path, partition="p", partitions=1)._command(1234)
    assert command[command.index("--prefix-store") + 1] == str(tmp_path / "llm-server" / "prefixes")
    assert int(command[command.index("--prefix-store-bytes") + 1]) == 2 << 30
    monkeypatch.setenv("MLTB_PREFIX_STORE", "300M")
    command = LocalServer(model, cache_dir=tmp_path, partition="p", partitions=1)._command(1234)
    assert int(command[command.index("--prefix-store-bytes") + 1]) == 300 << 20
    monkeypatch.setenv("MLTB_PREFIX_STORE", "off")
    assert "--prefix-store" not in LocalServer(model, cache_dir=tmp_path, partition="p", partitions=1)._command(1)
    monkeypatch.setenv("MLTB_PREFIX_STORE", "lots")
    with pytest.raises(ValueError, match="MLTB_PREFIX_STORE"):
        LocalServer(model, cache_dir=tmp_path, partition="p", partitions=1)


# ------------------------------------------------------------------------------ a real server, tiny model
needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                 reason="llama-cpp-python is not installed (pip install 'mltb[local-smoke]')")
SYSTEM = "You are a data scientist working on a tabular Kaggle challenge with named tools. " * 40


def _post(url: str, messages: list[dict]) -> dict:
    from test_llama_server import post

    status, reply = post(url, {"messages": messages, "max_tokens": 8, "temperature": 0})
    assert status == 200, reply
    return reply


def _ask(cache_dir: str, partition: str, messages: list[dict]) -> tuple[str, int, int, list[Path]]:
    """One request on a new server process: its reply, prompt and cached tokens (all restored from the store,
    as its log says: a new server has nothing else), and the store's files."""
    from mltb_core.llm.local import models
    from mltb_core.llm.local import LocalServer, request_log

    server = LocalServer(models.model_path("smollm2"), cache_dir=cache_dir, n_ctx=2048, partition=partition,
                         partitions=1)
    try:
        reply = _post(server.acquire(), messages)
    finally:
        server.release()
    files = sorted(server.prefix_store.rglob("*" + FILE_SUFFIX))
    usage = reply["usage"]
    logged = request_log(server.log_path)[-1]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    # when the whole prompt was stored, its last token is evaluated again to get fresh logits
    assert logged["cached_tokens"] == cached and cached <= logged["restored_tokens"] <= cached + 1
    return (reply["choices"][0]["message"]["content"], usage["prompt_tokens"],
            usage["prompt_tokens_details"]["cached_tokens"], files)


@needs_llama
def test_a_new_server_restores_the_first_turn_another_server_saved():
    from mltb_core.llm.local import models

    if models.installed_problems(models.get_model("smollm2")):
        pytest.skip("local:smollm2 is not installed")
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which tool loads the data?"}]
    other = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which tool fills missing ages?"}]
    with tempfile.TemporaryDirectory() as cache_dir:
        cold_reply, prompt, cached, files = _ask(cache_dir, "one", first)
        assert cached == 0 and len(files) == 1  # the first server evaluated all and saved the first turn
        # a new process: the shared system turn comes from the store; the same prompt gives the same reply
        warm_reply, prompt_again, cached_again, files_again = _ask(cache_dir, "two", first)
        assert prompt_again == prompt and cached_again >= 512 and warm_reply == cold_reply
        assert files_again == files  # the first turn is stored already: not written twice
        _, other_prompt, other_cached, _ = _ask(cache_dir, "three", other)
        assert 512 <= other_cached < other_prompt  # everything up to the user turn, which differs
        # a first turn the store already restores all but a few tokens of (a subtask's tools appended to the
        # preamble) is not written again
        variant = [{"role": "system", "content": SYSTEM + "Tools now: read_data, drop_columns."}, first[1]]
        _, _, variant_cached, variant_files = _ask(cache_dir, "variant", variant)
        assert variant_cached >= 512 and variant_files == files
        # one flipped byte: the next server evaluates cold, deletes the file and saves a good one
        data = bytearray(files[0].read_bytes())
        data[len(data) // 2] ^= 0xFF
        files[0].write_bytes(bytes(data))
        damaged_reply, _, damaged_cached, files_after = _ask(cache_dir, "four", first)
        assert damaged_cached == 0 and damaged_reply == cold_reply
        assert len(files_after) == 1 and files_after[0].read_bytes() != bytes(data)


@needs_llama
def test_no_store_when_switched_off(monkeypatch):
    from mltb_core.llm.local import models

    if models.installed_problems(models.get_model("smollm2")):
        pytest.skip("local:smollm2 is not installed")
    monkeypatch.setenv("MLTB_PREFIX_STORE", "0")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Go."}]
    with tempfile.TemporaryDirectory() as cache_dir:
        _, _, cached, files = _ask(cache_dir, "one", messages)
        _, _, cached_again, files_again = _ask(cache_dir, "two", messages)
    assert cached == cached_again == 0 and files == files_again == []
