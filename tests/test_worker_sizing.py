"""xdist workers sized to the machine when the model is local (issue 21): ``-n`` is capped to what the cores
and memory hold for one llama.cpp server per worker, with one header line saying so; API models and
``sim`` keep their ``-n``."""
from __future__ import annotations

from pathlib import Path

import pytest

from mltb_core.llm.local import backend as local  # imported before any in-process run, which would drop a later import
from pytest_mltb import servers
from mltb_core import environment
from mltb_core.llm.local.backend import PROMPT_CACHE_BYTES as SHARED
from mltb_core.llm.local.backend import SERVER_OVERHEAD_BYTES, server_memory_need
from pytest_mltb.servers import names_the_suite, worker_cap

pytest_plugins = ["pytester"]

GIB = 1 << 30

# Reports the worker specs xdist will start: the controller reads option.tx when its session starts.
CONFTEST = '''
def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        print(f"XDIST-WORKERS {len(session.config.option.tx or ())}")
'''
SUITE = '''
def test_challenge(mltb_case, mltb_split, mltb_record, mltb_check):
    mltb_check(mltb_record)
'''


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"\0" * 4096)
    return path


def test_cap_is_the_smallest_of_request_cores_and_memory(model_file):
    need = server_memory_need(model_file, local.DEFAULT_N_CTX)
    one = [f"local:{model_file}"]
    assert worker_cap(one, 8, cores=2, memory=64 * GIB).workers == 2                  # cores bind
    assert worker_cap(one, 8, cores=16, memory=3 * need + SHARED + 1).workers == 3             # memory binds
    assert worker_cap(one, 2, cores=16, memory=64 * GIB).workers == 2                 # the request binds
    assert not worker_cap(one, 2, cores=16, memory=64 * GIB).capped
    assert worker_cap(one, 8, cores=16, memory=need // 2).workers == 1                # never below one
    # two local models: every worker runs a server of each
    other = model_file.with_name("other.gguf")
    other.write_bytes(b"\0" * 4096)
    assert worker_cap(one + [f"local:{other}"], 8, cores=16, memory=3 * need + SHARED + 1).workers == 1


def test_a_server_needs_its_file_and_a_kv_cache_that_grows_with_its_context(model_file):
    # the default model's 32k context: ~0.9 GiB of KV cache on top of the file and the fixed overhead
    assert server_memory_need(model_file, 32768) - server_memory_need(model_file, 16384) == 16384 * 28 * 1024
    assert server_memory_need(model_file, 0) == 4096 + SERVER_OVERHEAD_BYTES
    assert server_memory_need(model_file.with_name("absent.gguf"), 32768) is None


def test_a_server_starts_with_its_named_models_context():
    from mltb_core.llm.local.models import DEFAULT_LOCAL_MODEL, MODELS

    default = MODELS[DEFAULT_LOCAL_MODEL].n_ctx
    assert local.server_context(("name", None)) == local.server_context(("name", DEFAULT_LOCAL_MODEL)) == default
    assert local.server_context(("name", "smollm2")) == MODELS["smollm2"].n_ctx
    assert local.server_context(("path", "/m/x.gguf")) == local.DEFAULT_N_CTX


def test_a_default_model_server_is_counted_at_least_its_measured_peak(tmp_path):
    # reports/benchmarks.md, "Default model at 32k context": a 32k server of the 1,117,320,768-byte file peaked
    # at 3,399 MiB resident after four ~4.9k-token calls, ~0.5 GiB of it prompt-cache states (counted once for
    # the machine, SHARED, not per server): the per-server need must cover the rest
    model = tmp_path / "qwen.gguf"
    with model.open("wb") as handle:
        handle.truncate(1_117_320_768)  # sparse: the size is all that is read
    assert server_memory_need(model, 32768) >= (3399 - 512) << 20


def test_every_backend_in_the_plan_is_asked_not_one_by_name():
    """A third-party backend that needs a server per worker is capped and held like the local model."""
    from mltb_core.llm import backends

    events = []

    @backends.backend("served")
    class ServedSpec(backends.BackendSpec):
        def worker_needs(self, value):
            return backends.WorkerNeeds(memory=GIB, cores=2, shared_memory=GIB, what="vLLM server")

        def session_start(self, value, workers, say):
            events.append(("start", value, workers))
            if value == "broken":
                raise RuntimeError("served:broken did not start")
            return value, []

        def session_end(self, held):
            events.append(("end", held))

    with backends.scoped_backends():
        backends.register_backend(ServedSpec)
        cap = worker_cap(["served:a", "sim"], 8, cores=8, memory=4 * GIB)
        assert (cap.workers, cap.need) == (3, GIB) and "vLLM server" in cap.line()   # memory binds
        assert worker_cap(["served:a"], 8, cores=8, memory=64 * GIB).workers == 4    # 2 cores per worker
        holds = servers.SessionHolds()
        holds.start(["served:a", "served:broken", "sim", "served:a"], workers=2)
        assert holds.errors == ["served:broken did not start"]
        holds.stop()
    assert events == [("start", "a", 2), ("start", "broken", 2), ("end", "a")]


def test_api_and_sim_models_are_left_alone(model_file):
    assert worker_cap(["sim", "openai:gpt-4o"], 8, cores=2, memory=GIB) is None
    assert worker_cap(["sim", f"local:{model_file}"], 8, cores=2, memory=64 * GIB).workers == 2


def test_an_absent_model_file_is_capped_by_cores_and_says_memory_was_not_checked(tmp_path):
    cap = worker_cap([f"local:{tmp_path / 'not-yet.gguf'}"], 8, cores=2, memory=GIB)
    assert cap.workers == 2 and "memory not checked" in cap.line()


def test_the_line_says_how_many_and_why(model_file):
    line = worker_cap([f"local:{model_file}"], 8, cores=2, memory=10 * GIB).line()
    assert line.startswith("mltb: local model: 2 xdist worker(s), each with its own llama.cpp server")
    per_worker = server_memory_need(model_file, local.DEFAULT_N_CTX) / GIB
    assert "-n 8 capped to 2" in line and "2 core(s)" in line
    assert f"10.0 GiB available / {per_worker:.1f} GiB per worker" in line
    assert "capped" not in worker_cap([f"local:{model_file}"], 2, cores=2, memory=10 * GIB).line()


def test_only_the_benchmark_suite_counts_as_an_mltb_run_without_options(tmp_path):
    root = Path(servers.__file__).resolve().parent.parent
    assert names_the_suite(["suites/"], root, False)
    assert names_the_suite(["suites/test_challenges.py::test_challenge"], root, False)
    assert names_the_suite(["."], root, False)                       # a directory holding the suite
    assert names_the_suite(["mltb_suites"], tmp_path, True)
    assert not names_the_suite(["tests"], root, False)
    assert not names_the_suite([str(tmp_path)], root, False)


def run_sized(pytester: pytest.Pytester, monkeypatch, *args: str, cores: int = 3, memory: int = 64 * GIB):
    """An in-process run on a pretend machine (``cores``, ``memory``), collect-only: no trial, no server."""
    monkeypatch.setattr(environment, "available_cores", lambda: cores)
    monkeypatch.setattr(environment, "available_memory", lambda: memory)
    pytester.makepyfile(test_challenges=SUITE)
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--task=spaceship-titanic", "--planner=react",
                                          "--collect-only", *args)
    return result, result.stdout.str()


@pytest.mark.parametrize("n", ["8", "auto"])
def test_n_beyond_the_cores_is_capped_before_xdist_starts_workers(pytester, monkeypatch, model_file, n):
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "8")   # what xdist's -n auto finds on a bigger box
    result, text = run_sized(pytester, monkeypatch, "-n", n, f"--model=local:{model_file}", cores=3)
    assert result.ret == pytest.ExitCode.OK, text
    assert "XDIST-WORKERS 3" in text, text
    assert [line for line in text.splitlines() if line.startswith("mltb: local model:")] == [
        next(line for line in text.splitlines() if "capped to 3" in line)]


def test_memory_caps_the_workers(pytester, monkeypatch, model_file):
    need = server_memory_need(model_file, local.DEFAULT_N_CTX)
    result, text = run_sized(pytester, monkeypatch, "-q", "-n", "8", f"--model=local:{model_file}", cores=16,
                             memory=2 * need + SHARED + 10)
    assert "XDIST-WORKERS 2" in text, text
    assert "capped to 2" in text, text        # said even under -q, which hides the session header


def test_sim_keeps_its_workers(pytester, monkeypatch):
    result, text = run_sized(pytester, monkeypatch, "-n", "8", "--model=sim", cores=2)
    assert "XDIST-WORKERS 8" in text and "mltb: local model" not in text, text
