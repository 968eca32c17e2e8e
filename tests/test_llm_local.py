"""Local backend: the shared server's lifecycle across processes, the request rewrite, one real SmolLM2 call."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fake_openai_server import FakeOpenAIServer, content_reply
from tiny_model import needs_tiny_model
from mltb_core.llm import make_backend, prompts
from mltb_core.llm.base import cut_off_error
from mltb_core.environment import available_cores
from mltb_core.llm.local.engine import users_gone
from mltb_core.llm.local.backend import (LocalBackend, LocalModelUnavailable, LocalServer,
                                 LocalServerError, _pid_alive, _ready, call_schema, chatml_messages,
                                 llama_server_command, release_process_servers, tool_catalogue,
                                 worker_servers)
from mltb_core.llm.local.models import REPLY_TOKENS

FAKE_SERVER = Path(__file__).with_name("fake_openai_server.py")
TOOLS = [{"type": "function", "function": {
    "name": "read_data", "description": "Read a CSV file.\n\nMore text.",
    "parameters": {"type": "object", "properties": {
        "bindings": {"type": "object", "properties": {}},
        "func_kwargs": {"type": "object", "properties": {"path": {"type": "string"},
                                                         "sep": {"type": "string", "default": ","}}},
        "output": {"type": "string"}}}}}]


def fake_command(port: int) -> list[str]:
    return [sys.executable, str(FAKE_SERVER), "--port", str(port)]


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF")
    return path


# Child process: join the shared server, report, wait for a line on stdin, release.
CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    from fake_openai_server import FakeOpenAIServer  # noqa: F401 - importable for the command
    from mltb_core.llm.local import LocalServer
    server = LocalServer({model!r}, cache_dir={cache!r},
                         command=lambda port: [sys.executable, {fake!r}, "--port", str(port)])
    server.acquire()
    print(json.dumps(server.state()), flush=True)
    sys.stdin.readline()
    server.release()
""")


def spawn_user(model_file, cache_dir):
    code = CHILD.format(tests=str(FAKE_SERVER.parent), model=str(model_file), cache=str(cache_dir),
                        fake=str(FAKE_SERVER))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    state = json.loads(proc.stdout.readline())
    return proc, state


def finish(proc):
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.wait(timeout=30) == 0


def test_server_is_shared_and_stopped_by_the_last_user(model_file, tmp_path):
    first, state1 = spawn_user(model_file, tmp_path)
    second, state2 = spawn_user(model_file, tmp_path)
    try:
        assert state1["refcount"] == 1 and state2["refcount"] == 2
        assert (state2["pid"], state2["port"]) == (state1["pid"], state1["port"])
        finish(first)
        watcher = LocalServer(model_file, cache_dir=tmp_path)
        assert watcher.state()["refcount"] == 1 and _ready(state1["port"])
        finish(second)
        assert watcher.state() is None and not watcher.state_path.exists()
        assert not _pid_alive(state1["pid"])
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()


def test_stale_state_of_a_dead_server_is_replaced(model_file, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    server = LocalServer(model_file, cache_dir=tmp_path, command=fake_command)
    server.state_dir.mkdir(parents=True)
    server.state_path.write_text(json.dumps({"pid": dead.pid, "port": 9, "refcount": 3}))
    server.acquire()
    try:
        state = server.state()
        assert state["refcount"] == 1 and state["pid"] != dead.pid and _ready(state["port"])
    finally:
        server.release()
    assert not _pid_alive(state["pid"]) and server.state() is None


def test_release_stops_our_server_even_when_its_state_file_is_gone(model_file, tmp_path):
    server = LocalServer(model_file, cache_dir=tmp_path, command=fake_command)
    server.acquire()
    pid = server.state()["pid"]
    server.state_path.unlink()  # e.g. the cache directory was a temporary one, already deleted
    server.release()
    assert not _pid_alive(pid)


def test_server_that_dies_at_startup_reports_its_log(model_file, tmp_path):
    crash = [sys.executable, "-c", "import sys; print('model file is corrupt: bad magic'); sys.exit(3)"]
    server = LocalServer(model_file, cache_dir=tmp_path, command=lambda port: crash, startup_timeout=30)
    with pytest.raises(LocalServerError, match=r"exited with code 3(.|\n)*bad magic"):
        server.acquire()
    assert not server.held and server.state() is None


def test_backend_rewrites_the_request_for_the_small_model(model_file):
    messages = [{"role": "system", "content": "You plan."}, {"role": "user", "content": "Solve it."},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "read_data", "arguments": '{"func_kwargs": {"path": "a.csv"}, "output": "df"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "Stored df (10 rows)."}]
    reply = content_reply('{"tool_name": "read_data", "tool_args": {"bindings": {}, "func_kwargs": {}, "output": "x"}}')
    with FakeOpenAIServer(default=reply) as server:
        backend = LocalBackend(model_file, base_url=server.base_url, seed=4)
        response = backend.complete(messages, TOOLS, n=2, seed=7)
        backend.close()
    assert [c.tool_calls[0].output for c in response.candidates] == ["x", "x"]
    assert response.usage.calls == 2 and response.usage.cost_usd == 0 and response.usage.prompt_tokens == 20
    first, second = server.requests
    assert "tools" not in first and "n" not in first and [first["seed"], second["seed"]] == [7, 8]
    assert first["max_tokens"] == REPLY_TOKENS and first["response_format"]["schema"] == call_schema(TOOLS)
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant", "user"]
    assert first["messages"][3]["content"] == "Result of read_data:\nStored df (10 rows)."


def test_chatml_rewrite_and_call_schema():
    messages = [{"role": "system", "content": "You plan."},
                {"role": "assistant", "content": "load", "tool_calls": [{"id": "c1", "function": {
                    "name": "read_data", "arguments": '{"output": "df"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    out = chatml_messages(messages, TOOLS)
    assert [m["role"] for m in out] == ["system", "assistant", "user"]
    assert out[0]["content"].startswith("You plan.") and "\n- read_data: Read a CSV file\n" in out[0]["content"]
    assert json.loads(out[1]["content"].splitlines()[1]) == {"tool_name": "read_data", "tool_args": {"output": "df"}}
    assert out[2]["content"] == "Result of read_data:\nok"
    schema = call_schema(TOOLS)
    assert schema["properties"]["tool_name"]["enum"] == ["read_data"]
    # no system message: the catalogue becomes one
    assert chatml_messages([{"role": "user", "content": "hi"}], TOOLS)[0]["role"] == "system"


def many_tools(count: int) -> list[dict]:
    """``count`` tools shaped like TOOLS, with long descriptions and several parameters each."""
    tools = []
    for i in range(count):
        tool = json.loads(json.dumps(TOOLS[0]))
        tool["function"]["name"] = f"tool_{i}"
        tool["function"]["description"] = f"Do thing {i} to the frame. " + "Long detail. " * 20
        tool["function"]["parameters"]["properties"]["func_kwargs"]["properties"].update(
            {f"option_{k}": {"type": "string", "default": "x"} for k in range(4)})
        tools.append(tool)
    return tools


def test_catalogue_without_a_preamble_is_one_short_line_per_tool_and_no_parameters():
    many = tool_catalogue(many_tools(70))
    assert "- tool_69: Do thing 69 to the frame" in many and "option_0" not in many
    assert all(len(line) <= len("- tool_69: ") + prompts.CATALOGUE_SUMMARY_CHARS
               for line in many.splitlines() if line.startswith("- tool_"))
    assert "option_0" not in tool_catalogue(many_tools(3))   # parameters are the stage note's job, even for few


def test_a_preamble_that_lists_the_tools_is_not_given_a_second_list():
    """The shared preamble names every tool: the local model gets only the reply format on top (a second
    catalogue cost ~1,000 tokens per cold prompt), and the same whatever tools are offered: Hierarchical MCTS
    masks them per subtask, and a first system message that followed would break every cached prefix."""
    preamble = prompts.shared_preamble("Predict y.", many_tools(70))
    out = chatml_messages([{"role": "system", "content": preamble}, {"role": "user", "content": "go"}], many_tools(70))
    assert out[0]["content"].startswith(preamble)
    added = out[0]["content"][len(preamble):]
    assert "tool_3" not in added and added.strip().startswith("Reply with exactly one JSON object")
    few = chatml_messages([{"role": "system", "content": preamble}], many_tools(3))[0]["content"]
    assert few == out[0]["content"]


def test_server_command_runs_mltbs_server_with_a_prefix_cache():
    argv = llama_server_command(Path("m.gguf"), 1234, n_ctx=4096, n_threads=1, n_threads_batch=2, cache_bytes=10)
    assert argv[1:3] == ["-m", "mltb_core.llm.local.engine"]
    flags = dict(zip(argv[3::2], argv[4::2]))
    assert flags["--n_threads"] == "1" and flags["--n_threads_batch"] == "2" and flags["--cache-bytes"] == "10"
    assert flags["--flash_attn"] == "true"
    assert flags["--n_ctx"] == "4096" and flags["--port"] == "1234"
    server = LocalServer(Path("m.gguf"), cache_dir="/nonexistent-not-created", partitions=1)
    assert server.n_threads == 1 and server.n_threads_batch >= 1 and server.n_ctx == 8192  # a GGUF by path


def test_threads_follow_the_idle_cores_and_the_workers_share():
    from mltb_core.llm.local.backend import threads_by_load

    assert threads_by_load(2, 2, 0.05) == 2          # alone on an idle 2-core box: both cores
    assert threads_by_load(2, 2, 0.4) == 2
    assert threads_by_load(2, 2, 0.6) == threads_by_load(2, 2, 1.0) == 1   # another process holds a core
    assert threads_by_load(2, 2, 5.8) == 1           # never fewer than one
    assert threads_by_load(1, 2, 0.0) == 1           # -n 2 on 2 cores: one core each, however idle
    assert threads_by_load(4, 8, 3.0) == 4           # never more than the partition's share
    assert threads_by_load(8, 8, 5.2) == 3


def test_the_threads_setting_is_auto_by_default_or_a_number(monkeypatch):
    from mltb_core.environment import default
    from mltb_core.llm.local import backend

    assert default(backend.THREADS_ENV) == "auto"
    monkeypatch.delenv(backend.THREADS_ENV, raising=False)
    monkeypatch.setattr(backend, "load_average", lambda: 0.1)
    assert backend.threads_setting(2, 2) == 2
    monkeypatch.setattr(backend, "load_average", lambda: 1.3)
    assert backend.threads_setting(2, 2) == 1
    monkeypatch.setattr(backend, "load_average", lambda: float(available_cores()))   # every core busy
    server = LocalServer(Path("m.gguf"), cache_dir="/nonexistent-not-created", partitions=1)
    assert server.n_threads == server.n_threads_batch == 1
    monkeypatch.setenv(backend.THREADS_ENV, "3")
    assert backend.threads_setting(2, 2) == 3        # a number is taken as given
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(backend.THREADS_ENV, bad)
        with pytest.raises(ValueError, match="MLTB_LOCAL_THREADS must be auto or a whole number"):
            backend.threads_setting(2, 2)


def test_a_named_models_file_is_served_with_its_own_settings(monkeypatch):
    from mltb_core.llm.local import backend
    from mltb_core.llm.local.models import get_model

    monkeypatch.setattr(backend, "load_average", lambda: 0.0)   # an idle box: every core of the partition
    qwen = get_model("qwen2.5-coder-1.5b")
    server = LocalServer(Path("/x") / qwen.filename, cache_dir="/nonexistent-not-created", partitions=1)
    assert server.n_ctx == qwen.n_ctx and server.n_threads == min(qwen.n_threads, server.n_threads_batch)
    assert server.n_threads_batch == available_cores()
    # two xdist workers on the cores: never more decode threads than a worker's share
    halves = LocalServer(Path("/x") / qwen.filename, cache_dir="/nonexistent-not-created", partitions=64)
    assert halves.n_threads == 1 == halves.n_threads_batch


def test_prompt_lookup_drafts_are_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv("MLTB_DRAFT_TOKENS", raising=False)

    def drafts(**opts) -> str:
        server = LocalServer(Path("m.gguf"), cache_dir="/nonexistent-not-created", partitions=1, **opts)
        argv = server._command(1234)
        return dict(zip(argv[3::2], argv[4::2]))["--draft-tokens"]

    assert drafts() == "0"
    monkeypatch.setenv("MLTB_DRAFT_TOKENS", "3")
    assert drafts() == "3"
    assert drafts(draft_tokens=2) == "2"  # an explicit setting wins


def test_a_cached_reply_of_plain_decoding_is_not_served_to_fast_forward(model_file, tmp_path):
    """Fast-forward pins the grammar's whitespace, so its replies are not plain decoding's: the response
    cache keys them apart (plain decoding keeps the keys it had)."""
    from mltb_core.llm.cache import ResponseCache

    cache = ResponseCache(tmp_path / "responses")
    messages = [{"role": "user", "content": "go"}]
    try:
        plain = LocalBackend(model_file, cache_dir=tmp_path, cache=cache, server_command=fake_command,
                             fast_forward=False)
        assert json.loads(plain.response_identity)["model"] == plain.name == "local:" + str(model_file)
        assert not plain.complete(messages, TOOLS, seed=1).cached
        assert plain.complete(messages, TOOLS, seed=1).cached
        fast = LocalBackend(model_file, cache_dir=tmp_path, cache=cache, server_command=fake_command,
                            fast_forward=True)
        assert not fast.complete(messages, TOOLS, seed=1).cached
        assert fast.complete(messages, TOOLS, seed=1).cached
    finally:
        release_process_servers()


def test_a_reply_is_keyed_by_the_model_file_not_its_path(model_file, tmp_path):
    """Round 5: ``local:/path.gguf`` was keyed by the path, so another file put there got the old file's
    replies. The key holds the file's SHA-256 (hashed once per process and file stamp); the record names it."""
    import hashlib

    from mltb_core.llm.cache import ResponseCache

    cache = ResponseCache(tmp_path / "responses")
    messages = [{"role": "user", "content": "go"}]
    try:
        first = LocalBackend(model_file, cache_dir=tmp_path, cache=cache, server_command=fake_command)
        assert first.endpoint == f"gguf sha256:{hashlib.sha256(b'GGUF').hexdigest()}"
        assert not first.complete(messages, TOOLS, seed=1).cached
        assert first.complete(messages, TOOLS, seed=1).cached
        model_file.write_bytes(b"GGUF, another model")
        other = LocalBackend(model_file, cache_dir=tmp_path, cache=cache, server_command=fake_command)
        assert other.endpoint == f"gguf sha256:{hashlib.sha256(b'GGUF, another model').hexdigest()}"
        assert not other.complete(messages, TOOLS, seed=1).cached
    finally:
        release_process_servers()


def test_a_verified_named_model_is_not_hashed_again(tmp_path, monkeypatch):
    from mltb_core.llm.local import models

    path = tmp_path / models.MODELS[models.DEFAULT_LOCAL_MODEL].filename
    named = models.MODELS[models.DEFAULT_LOCAL_MODEL]
    with open(path, "wb") as fh:   # a sparse file of the pinned size, taken as verified by this process
        fh.truncate(named.size)
    models._VERIFIED.add(models._stamp(path))
    monkeypatch.setattr(models, "sha256_file", lambda p: pytest.fail("hashed a verified file"))
    assert models.file_digest(path) == named.sha256


def test_backends_of_one_process_keep_one_server_until_released(model_file, tmp_path):
    backends = [LocalBackend(model_file, cache_dir=tmp_path, server_command=fake_command) for _ in range(2)]
    try:
        assert backends[0].server is backends[1].server
        for backend in backends:  # consecutive trials: the second finds the first one's server running
            backend.complete([{"role": "user", "content": "go"}], TOOLS)
            backend.close()
        state = backends[0].server.state()
        assert state["refcount"] == 1 and _ready(state["port"])
    finally:
        release_process_servers()
    assert backends[0].server.state() is None and not _pid_alive(state["pid"])


def test_missing_llama_cpp_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(LocalModelUnavailable, match=r"pip install 'mltb\[local\]'"):
        make_backend("local")


def test_missing_model_file(tmp_path):
    with pytest.raises(LocalModelUnavailable, match="does not exist"):
        LocalBackend(tmp_path / "nope.gguf", server_command=fake_command)


@needs_tiny_model
def test_real_smollm2_completion(tmp_path):
    backend = make_backend("local:smollm2", seed=1, cache_dir=tmp_path, max_tokens=96, n_ctx=2048, keep_server=False)
    try:
        response = backend.complete([{"role": "system", "content": "You are a data scientist."},
                                     {"role": "user", "content": "Load /data/train.csv as train."}],
                                    TOOLS, temperature=0.2, seed=1)
    finally:
        backend.close()
    [cand] = response.candidates
    assert response.usage.prompt_tokens > 20 and 0 < response.usage.completion_tokens <= 96
    # the grammar forces a paper-format call to a listed tool, unless cut short by max_tokens (and then it says so)
    if cand.error is None:
        assert [c.tool_name for c in cand.tool_calls] == ["read_data"]
    else:
        assert cand.error == cut_off_error(96) and response.usage.completion_tokens == 96
    assert backend.server.state() is None


@needs_tiny_model
def test_real_trials_on_fresh_servers_draw_by_their_trial_seed(tmp_path):
    """Each trial on a server of its own (as every round of the planner table starts them): the replies
    follow the trial seed. Before, unseeded requests on a fresh llama-cpp-python server drew the same
    samples whatever the trial seed, so replicate trials were copies."""
    def replies(trial_seed: int, store: str) -> list[str]:
        backend = make_backend("local:smollm2", seed=trial_seed, cache_dir=tmp_path / store, max_tokens=16,
                               n_ctx=2048, keep_server=False)
        try:
            return [backend.complete([{"role": "user", "content": "Say one sentence about a cat."}], [],
                                     temperature=1.0).candidates[0].text for _ in range(2)]
        finally:
            backend.close()

    first = replies(1, "a")
    assert replies(2, "b") != first
    assert replies(1, "c") == first  # fresh store and server: nothing restored, the same draws


@needs_tiny_model
def test_real_trial_with_the_embedded_model(tmp_path):
    """One whole trial through the real llama.cpp server and openai client with the bundled SmolLM2."""
    from mltb_core.config import TrialConfig
    from mltb_core.bench.tasks import get_task
    from mltb_core.planners.trajectory import read_trajectory
    from mltb_core.runner.trial import run_trial

    try:
        record = run_trial(get_task("spaceship-titanic"),
                           TrialConfig(planner="react", model="local:smollm2", max_iterations=3, llm_cache=False), tmp_path)
    finally:
        release_process_servers()
    assert record.outcome in ("valid", "planner_failure"), record.error
    assert not record.synthetic and 1 <= record.llm_calls <= 3
    assert record.tokens_in > 100 and record.tokens_out > 0 and record.llm_seconds > 0
    steps = list(read_trajectory(Path(record.trajectory)))
    calls = [s for s in steps if s["step_type"] == "llm_call"]
    assert len(calls) == record.llm_calls and all(s["usage"]["prompt_tokens"] > 0 for s in calls)


def test_a_user_killed_without_releasing_does_not_keep_the_server_alive(model_file, tmp_path):
    import signal

    proc, state = spawn_user(model_file, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    server = LocalServer(model_file, cache_dir=tmp_path, command=fake_command)
    server.acquire()
    assert server.state()["port"] == state["port"]      # the running server is reused...
    assert server.state()["users"] == [os.getpid()]      # ...and the dead user's reference is gone
    server.release()
    assert server.state() is None and not _pid_alive(state["pid"])


def test_each_xdist_worker_gets_its_own_server_with_its_share_of_the_cores(model_file, tmp_path, monkeypatch):
    from mltb_core.llm.local import backend

    monkeypatch.setattr(backend, "load_average", lambda: 0.0)   # the shares of an idle box
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    servers = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        servers.append(LocalServer(model_file, cache_dir=tmp_path, command=fake_command, n_threads_batch=None))
    first, second = servers
    assert first.state_path != second.state_path
    cores = len(os.sched_getaffinity(0))
    assert first.n_threads_batch == second.n_threads_batch == max(cores // 2, 1)
    # The controller's pre-started servers are the ones the workers join.
    assert [s.state_path for s in worker_servers(model_file, 2, cache_dir=tmp_path)] == [first.state_path,
                                                                                         second.state_path]
    assert worker_servers(model_file, 0, cache_dir=tmp_path)[0].n_threads_batch == cores
    try:
        first.acquire()
        second.acquire()
        assert first.port != second.port and first.state()["pid"] != second.state()["pid"]
    finally:
        first.release()
        second.release()
    assert first.state() is None and second.state() is None


# ------------------------------------------------------------- a server outlives no user (SIGKILL, OOM kill)
def _state(path: Path, **state) -> Path:
    path.write_text(json.dumps(state))
    return path


def test_a_server_is_gone_once_every_listed_user_has_exited(tmp_path):
    user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        users_file = _state(tmp_path / "s.json", pid=4242, port=1, users=[user.pid], refcount=1)
        assert not users_gone(users_file, 4242, listening_for=999, grace=1)
    finally:
        user.kill()
        user.wait()
    assert users_gone(users_file, 4242, listening_for=0, grace=1)  # no grace: its users are known and dead


def test_a_server_waits_for_registration_then_leaves_if_never_registered_or_replaced(tmp_path):
    missing = tmp_path / "none.json"
    assert not users_gone(missing, 4242, listening_for=5, grace=120)   # its starter registers it after start
    assert users_gone(missing, 4242, listening_for=121, grace=120)     # the starter died first
    replaced = _state(tmp_path / "r.json", pid=999, port=1, users=[os.getpid()], refcount=1)
    assert not users_gone(replaced, 4242, listening_for=5, grace=120)  # the old server's state, not yet ours
    assert users_gone(replaced, 4242, listening_for=121, grace=120)    # another server took its place
    torn = tmp_path / "t.json"
    torn.write_text('{"pid": 42')
    assert not users_gone(torn, 4242, listening_for=999, grace=1)      # unreadable now: never kill on doubt


def test_the_watchdog_stops_a_serving_server_when_its_last_user_is_killed(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from mltb_core.llm.local import engine as llama_server

    user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    users_file = _state(tmp_path / "s.json", pid=os.getpid(), port=1, users=[user.pid], refcount=1)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    serving.start()
    watch = threading.Thread(target=llama_server._watch_users, args=(server, users_file, 60.0, 0.05), daemon=True)
    watch.start()
    try:
        watch.join(0.5)
        assert watch.is_alive() and serving.is_alive()  # its user runs: it keeps serving
        user.kill()
        user.wait()
        serving.join(10)
        assert not serving.is_alive()
    finally:
        if serving.is_alive():
            server.shutdown()
        server.server_close()


def test_mltbs_servers_are_told_their_state_file(tmp_path):
    server = LocalServer(Path("m.gguf"), cache_dir=tmp_path, partitions=1)
    argv = server._command(1234)
    assert argv[argv.index("--users-file") + 1] == str(server.state_path)
