"""The `openai:` path against llama-cpp-python's own OpenAI server (`python -m llama_cpp.server`), on the tiny
model: a real trial whose replies parse and whose calls run, within its LLM-call budget.

Measured before this path was fixed (the default model, 10 calls): 3 of 12 replies parsed and no call ran; the
server decoded up to 867 tokens a reply (no max_tokens), applied no grammar (no request shape it reads) and
ignored n (a 10-call budget made 12 requests). The server's command is docs/local-model.md's.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mltb_core.llm.local.models import REPLY_TOKENS
from tiny_model import needs_tiny_model

pytestmark = needs_tiny_model

STARTUP_SECONDS = 120
REQUEST_LINE = '"POST /v1/chat/completions HTTP/1.1" 200'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def llama_cpp_server(tmp_path_factory):
    """``python -m llama_cpp.server`` on the tiny model's GGUF, on 127.0.0.1 at an ephemeral port: its base URL
    and its log (uvicorn logs one line per request)."""
    from mltb_core.llm.local import models

    gguf = models.model_path("smollm2")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama_cpp_server") / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", "8192", "--n_threads", "1", "--n_threads_batch", "1",
               "--flash_attn", "true"]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with code {process.returncode}:\n"
                            f"{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"llama_cpp.server did not answer in {STARTUP_SECONDS} s:\n"
                                f"{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
        yield base_url, log_path
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture
def openai_env(monkeypatch, llama_cpp_server):
    base_url, _ = llama_cpp_server
    for name in ("OPENAI_API_KEY", "MLTB_OPENAI_N"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("MLTB_OPENAI_CALLS", "json_object")   # the shape llama_cpp.server applies as a grammar
    monkeypatch.setenv("MLTB_LLM_TIMEOUT", "300")            # a loaded 2-core box


def _requests(log_path: Path) -> int:
    return log_path.read_text(errors="replace").count(REQUEST_LINE)


def test_a_trial_through_llama_cpp_server_parses_and_runs_its_calls(openai_env, llama_cpp_server, tmp_path):
    """MCTS-Shaped with k=2 and a 2-call budget: the server ignores n, so its first reply brings one of the two
    candidates asked for and the backend asks once more for the missing one (the budget's cap at the calls
    left is test_llm_openai.py's, against a server that ignores n). Every reply is held to the call schema, so
    every one parses. Two calls: the cold first prompt (~2.6k tokens) is most of the time on a shared CPU."""
    from mltb_core.bench.tasks import get_task
    from mltb_core.config import TrialConfig
    from mltb_core.planners.trajectory import read_trajectory
    from mltb_core.runner.trial import run_trial

    _, log_path = llama_cpp_server
    before = _requests(log_path)
    config = TrialConfig(planner="mcts_shaped", model="openai:smollm2", seed=3, llm_cache=False,
                         max_llm_calls=2).with_(expansion_k=2)
    record = run_trial(get_task("spaceship-titanic"), config, tmp_path)
    assert record.outcome in ("valid", "planner_failure"), record.error   # never an infrastructure error
    assert record.llm_calls == 2 and _requests(log_path) - before == 2, record.stop_reason
    steps = list(read_trajectory(Path(record.trajectory)))
    candidates = [c for s in steps if s["step_type"] == "llm_call" for c in s["candidates"]]
    assert [(s["n"], s["usage"]["calls"]) for s in steps if s["step_type"] == "llm_call"] == [(2, 2)]
    assert len(candidates) == 2 and all(c["tool_calls"] and not c["error"] for c in candidates), candidates
    assert all(s["usage"]["completion_tokens"] <= s["usage"]["calls"] * REPLY_TOKENS for s in steps
               if s["step_type"] == "llm_call")   # max_tokens was sent and held
    executed = [s for s in steps if s["step_type"] == "tool_execution_initiation"]
    assert record.tool_calls >= 1 and len(executed) == record.tool_calls
