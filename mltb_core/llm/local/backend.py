"""The embedded local models (named in :mod:`mltb_core.llm.local.models`: the default Qwen2.5-Coder-1.5B, the
tiny SmolLM2 for smokes, or any GGUF by path) behind llama.cpp's OpenAI server.

:class:`LocalServer` runs ``python -m mltb_core.llm.local.engine`` once per machine, model and *partition*:
every process of a partition shares it through a state file (pid, port, refcount) under a file lock.
The first user starts it, later users reuse it, the last to release stops it (also at interpreter
exit); state left by a dead server is cleaned up. Under ``pytest -n N`` each xdist worker is its own
partition (``PYTEST_XDIST_WORKER``) with its own server and 1/N of the cores: llama.cpp's server keeps
one KV cache, and two workers alternating different prompts on one server re-evaluated the whole
~4,300-token prompt on every call (60 s each on 2 cores) instead of reusing a warm prefix (1.3 s).

:class:`LocalBackend` talks to it through the :class:`OpenAIBackend` path. A 135M model cannot be
trusted to write native tool calls (nor, reliably, a 1.5B one), so by default the request is rewritten: tool results
become user turns (the chatml template has no tool role), a compact tool catalogue is appended to
the (stable, first) system prompt, and the reply is grammar-constrained to one paper-format call
``{"tool_name": <one of the tools>, "tool_args": {...}}``, which the content parser reads back.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from mltb_core.environment import available_cores, child_pythonpath
from mltb_core.environment import read as read_environment
from mltb_core.llm.local.engine import pid_alive as _pid_alive
from mltb_core.llm.base import InfraError
from mltb_core.llm.cache import ResponseCache, default_cache_dir
from mltb_core.llm.chatml import call_schema, chatml_messages, tool_catalogue  # noqa: F401 - mltb_core.llm.local's
from mltb_core.llm.openai_backend import OpenAIBackend
from mltb_core.llm.prices import FREE

__all__ = ["LocalBackend", "LocalServer", "LocalModelUnavailable", "LocalServerError", "default_model_path",
           "resolve_model_path",
           "INSTALL_HINT", "process_server", "release_process_servers", "worker_servers", "current_partition", "available_cores"]

INSTALL_HINT = "pip install 'mltb[local]'"
# llama.cpp's native build compiles AMX kernels when the CPU lists AMX; some VMs list it and fault on it.
CRASH_HINT = ("if this CPU lists AMX (grep amx /proc/cpuinfo), rebuild llama-cpp-python without it: "
              "source .ci/llama_cpp_env.sh && pip install --force-reinstall --no-cache-dir llama-cpp-python")
# For a GGUF given by path (named models carry their own, measured, in llm/local/models.py).
DEFAULT_N_CTX = 8192
# Decoding one token of a 135M model is too little work to split: two threads spin on each other's
# barrier and, on a box shared with test workers, measured 70-400 ms/token against 29 ms with one.
# Prompt evaluation (large batches) does scale with cores, so it gets them all.
DEFAULT_GENERATION_THREADS = 1
# The prefix cache of the machine's local servers, shared out among partitions. A 1.5B model's state at
# ~4k tokens of context is ~115 MB (28 layers x 2 KV heads x 128 x 2 bytes x 2 per token): 2 GiB holds
# the ~15 distinct branches a 40-call tree search keeps coming back to.
PROMPT_CACHE_BYTES = 2 << 30
# A live server that does not answer /v1/models within this many seconds is replaced as wedged. Not
# less: on a loaded 2-core box a server busy with a long prompt took over 2 s to answer, and a joining
# process that killed it as wedged broke the trials of every other user mid-call.
WEDGED_AFTER = 30.0
# Seconds one request to the local server may take before it is retried (and, after the retries, the trial
# ends as an infrastructure error). A request's time grows with its prompt and reply, so a low limit falls on
# the planner with the longest prompts: on 2026-11-27 a ReAct request (16,669 prompt tokens, 417 reply
# tokens) took 261 s on an idle core of this 2-core box, and 300 s when the test suite ran beside it, which
# was the old limit; the retry recomputes the whole reply. A wedged server is found by WEDGED_AFTER's
# liveness check and the trial's own wall-clock limit bounds the rest.
REQUEST_TIMEOUT = 900.0


class LocalModelUnavailable(RuntimeError):
    """llama.cpp or the model file is not installed."""


class LocalServerError(InfraError):
    """The llama.cpp server did not start or died (counted as an infrastructure error)."""


def default_model_path() -> Path:
    """The default named model's verified GGUF (assembled on first use), see :mod:`mltb_core.llm.local.models`."""
    return resolve_model_path(("name", None))


def resolve_model_path(value: tuple[str, str | None]) -> Path:
    """The GGUF for a parsed ``local`` model (``("name", name)`` or ``("path", path)``), checked:
    a named model's packages, pins and SHA-256 (assembling it once), a path's existence.
    LocalModelUnavailable names what to install or reinstall."""
    from mltb_core.llm.local import models

    kind, text = value
    if kind == "path":
        path = Path(text or "")
        if not path.is_file():
            raise LocalModelUnavailable(f"local model file {path} does not exist")
        return path
    try:
        return models.model_path(text)
    except models.ModelFileError as exc:
        raise LocalModelUnavailable(str(exc)) from None
    except ValueError as exc:  # an unknown name
        raise LocalModelUnavailable(str(exc)) from None


def _require_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalModelUnavailable(f"the local model needs llama-cpp-python's server: {INSTALL_HINT}")


# What one server needs beyond its model file (mapped whole) and the KV cache of its whole context (llama.cpp
# allocates and clears it at start, so it is resident at once): the engine process, its compute buffers and
# llama-cpp-python's arrays. Measured (reports/benchmarks.md, "Default model at 32k context"), Qwen2.5-Coder-1.5B
# holds 693 MiB above its 1,066 MiB file and its KV cache once started (16k and 32k alike) and ~1.4 GiB at the
# peak of four ~4.9k-token calls (2,950 MiB at 16k, 3,399 MiB at 32k), about 0.5 GiB of which are the calls'
# prompt-cache states: ~1 GiB without them. Rounded up, since a server that does not fit swaps or is killed,
# while one server too few only queues. The RAM prefix cache grows on top, up to PROMPT_CACHE_BYTES for the
# machine (shared out among the servers): counted once (WorkerNeeds.shared_memory), not per server.
SERVER_OVERHEAD_BYTES = 1 << 30
# KV bytes per token of context: the default model's (28 layers x 2 KV heads x 128 x 2 bytes x K and V);
# SmolLM2-135M's is 23 KiB. A larger GGUF given by path is underestimated, which only queues.
KV_BYTES_PER_TOKEN = 28 << 10


def server_memory_need(model_path: str | os.PathLike, n_ctx: int) -> int | None:
    """Bytes one server of ``model_path`` at ``n_ctx`` context needs (the file is mapped whole), or None when
    the file is absent."""
    try:
        return Path(model_path).stat().st_size + SERVER_OVERHEAD_BYTES + n_ctx * KV_BYTES_PER_TOKEN
    except OSError:
        return None


def server_context(value: tuple[str, str | None]) -> int:
    """The context a server of the parsed ``local`` model starts with: a named model's (no name: the default
    model's, as resolve_model_path reads it), else DEFAULT_N_CTX for a file given by path."""
    from mltb_core.llm.local.models import DEFAULT_LOCAL_MODEL, MODELS

    named = MODELS.get(value[1] or DEFAULT_LOCAL_MODEL) if value[0] == "name" else None
    return named.n_ctx if named else DEFAULT_N_CTX


def worker_memory(value: tuple[str, str | None]) -> int | None:
    """Bytes one worker's server of the parsed ``local`` model needs (None: its file is not on disk yet)."""
    try:
        path = resolve_model_path(value) if value[0] == "name" else Path(value[1] or "").expanduser()
    except Exception:  # noqa: BLE001 - not installed / not assembled: the model preflight says so
        return None
    return server_memory_need(path, server_context(value))


# xdist's worker id and worker count; outside xdist there is one partition with every core.
WORKER_ENV, WORKER_COUNT_ENV = "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"


def current_partition() -> tuple[str | None, int]:
    """(this process's server partition, how many partitions share the machine's cores)."""
    try:
        count = max(int(read_environment(WORKER_COUNT_ENV) or "1"), 1)
    except ValueError:
        count = 1
    return read_environment(WORKER_ENV) or None, count


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _live_users(state: dict[str, Any]) -> list[int]:
    """The pids holding a reference that are still running (older state files: assume the count)."""
    if "users" not in state:
        return [os.getpid()] * max(int(state.get("refcount", 0)), 0)
    return [pid for pid in state["users"] if _pid_alive(pid)]


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is our child (no zombie left behind)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _stop_pid(pid: int, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pid)
        if not _pid_alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _ready(port: int, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=timeout) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def llama_server_command(model_path: Path, port: int, n_ctx: int, n_threads: int,
                         n_threads_batch: int | None = None, chat_format: str = "chatml",
                         cache_bytes: int = 0, users_file: Path | None = None,
                         draft_tokens: int = 0, prefix_store: Path | None = None,
                         prefix_store_bytes: int = 0, fast_forward: bool = False) -> list[str]:
    """The server command line: mltb's own server over llama.cpp (:mod:`mltb_core.llm.local.engine`).

    ``cache_bytes``: its prefix cache, which keeps the KV state of earlier requests so a tree search
    that switches branches re-evaluates only what differs from the closest earlier prompt.
    ``--flash_attn``: a cold 2,411-token spaceship-titanic prompt took 21 s instead of ~28 s on 2 cores.
    ``--log-requests``: one line per call in the server log (tokens, cached, seconds), see :func:`request_log`.
    ``draft_tokens``: prompt-lookup drafts per decoding step (0: plain decoding).
    ``fast_forward``: bytes a call's grammar allows one way only are emitted without decoding
    (:mod:`mltb_core.llm.local.forcing`).
    ``prefix_store``: the directory where servers save the state of each distinct first turn (the shared
    preamble), at most ``prefix_store_bytes``, so a new server restores it instead of evaluating it cold.
    ``users_file``: the shared state file; the server exits once no process it lists runs, so users killed
    with SIGKILL (or an OOM kill) do not leave a 2 GB server behind.
    """
    return [sys.executable, "-m", "mltb_core.llm.local.engine", "--model", str(model_path), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
            "--n_threads_batch", str(n_threads_batch or n_threads), "--chat_format", chat_format,
            "--flash_attn", "true", "--cache-bytes", str(cache_bytes), "--draft-tokens", str(draft_tokens),
            "--fast-forward", "true" if fast_forward else "false", "--log-requests"] + (
                ["--users-file", str(users_file)] if users_file is not None else []) + (
                ["--prefix-store", str(prefix_store), "--prefix-store-bytes", str(prefix_store_bytes)]
                if prefix_store is not None and prefix_store_bytes > 0 else [])


PREFIX_STORE_ENV = "MLTB_PREFIX_STORE"


def prefix_store_bytes() -> int:
    """Disk the servers' prefix store may fill (``MLTB_PREFIX_STORE``; 0: no store); ValueError naming the
    variable when it is not a size."""
    from mltb_core.environment import default as environment_default
    from mltb_core.toolkit.limits import parse_size, size_setting

    return size_setting(PREFIX_STORE_ENV, read_environment(PREFIX_STORE_ENV),
                        parse_size(environment_default(PREFIX_STORE_ENV))) or 0


def draft_tokens_override() -> int | None:
    """``MLTB_DRAFT_TOKENS`` as a count (None: unset, plain decoding); ValueError naming the variable when it
    is not a whole number from 0 to 64."""
    raw = read_environment("MLTB_DRAFT_TOKENS")
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 64:
        raise ValueError(f"MLTB_DRAFT_TOKENS must be a whole number from 0 to 64, got {raw!r}")
    return value


THREADS_ENV = "MLTB_LOCAL_THREADS"


def load_average() -> float:
    """The machine's 1-minute load average (0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def threads_by_load(partition_cores: int, machine_cores: int, load: float) -> int:
    """Threads for a local server: as many as the machine has idle cores (its cores less the 1-minute load
    average, rounded half up), at least 1, at most the partition's cores. So one trial alone on an idle 2-core
    box gets both (measured there: 2.0x the prompt speed, 1.6-1.9x the decode speed of one thread), and under
    load (another process at 0.5 or more) or as one of two xdist workers on 2 cores (a partition of one core)
    one (two threads' decode collapsed to 0.3-1.1 tok/s under load: the threads wait on each other's
    barrier while the other process holds a core). The load is read once, when the server starts."""
    idle = int(machine_cores - load + 0.5)
    return max(1, min(partition_cores, idle))


def threads_setting(partition_cores: int, machine_cores: int) -> int:
    """``MLTB_LOCAL_THREADS``: ``auto`` (its declared default; :func:`threads_by_load` at the load now) or a
    whole number of threads; ValueError naming the variable otherwise."""
    from mltb_core.environment import default as environment_default

    raw = (read_environment(THREADS_ENV) or "").strip() or environment_default(THREADS_ENV)
    if raw.lower() == "auto":
        return threads_by_load(partition_cores, machine_cores, load_average())
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{THREADS_ENV} must be auto or a whole number of threads (1 or more), got {raw!r}")
    return value


FAST_FORWARD_ENV = "MLTB_FAST_FORWARD"


def fast_forward_setting() -> bool:
    """``MLTB_FAST_FORWARD`` as a switch (unset: its declared default); ValueError naming the variable when it
    is not one."""
    from mltb_core.environment import default as environment_default
    from mltb_core.environment import parse_bool

    raw = read_environment(FAST_FORWARD_ENV)
    try:
        return parse_bool(environment_default(FAST_FORWARD_ENV) if raw is None or not raw.strip() else raw)
    except ValueError as exc:
        raise ValueError(f"{FAST_FORWARD_ENV}: {exc}") from None


class LocalServer:
    """A llama.cpp server shared by every process of this machine that uses the same model file and
    ``partition`` (default: this xdist worker's id, see :func:`current_partition`).

    ``n_threads`` decodes, ``n_ctx`` is the context (defaults: the named model's, see llm/local/models.py, else
    DEFAULT_GENERATION_THREADS and DEFAULT_N_CTX), ``n_threads_batch`` evaluates prompts. Their defaults
    follow ``MLTB_LOCAL_THREADS`` (:func:`threads_setting`: by default the machine's idle cores, at most the
    partition's share, the available cores divided among ``partitions``); decoding takes at most the named
    model's ``n_threads``. The settings are the server's: whoever starts it sets them, later users join it
    as it is.
    ``command(port) -> argv`` may replace the real server (tests use the fake OpenAI server).
    """

    def __init__(self, model_path: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
                 n_ctx: int | None = None, n_threads: int | None = None, n_threads_batch: int | None = None,
                 startup_timeout: float = 180.0, command: Callable[[int], list[str]] | None = None,
                 partition: str | None = None, partitions: int | None = None,
                 draft_tokens: int | None = None, fast_forward: bool | None = None) -> None:
        from mltb_core.llm.local.models import model_for_path

        self.model_path = Path(model_path).resolve()
        env_partition, env_partitions = current_partition()
        self.partition = partition if partition is not None else env_partition
        partitions = partitions or env_partitions
        named = model_for_path(self.model_path)
        self.n_ctx = n_ctx or (named.n_ctx if named else DEFAULT_N_CTX)
        cores = max(available_cores() // partitions, 1)
        # never more threads than the partition's cores (two workers on 2 cores: one each), nor than idle cores
        threads = threads_setting(cores, available_cores()) if not (n_threads and n_threads_batch) else cores
        self.n_threads = n_threads or min(named.n_threads if named else DEFAULT_GENERATION_THREADS, threads)
        self.n_threads_batch = n_threads_batch or threads
        self.chat_format = named.chat_format if named else "chatml"
        if draft_tokens is None:
            draft_tokens = draft_tokens_override() or 0
        self.draft_tokens = draft_tokens
        # the two decode differently; drafts are asked for explicitly, so they win
        self.fast_forward = (fast_forward_setting() if fast_forward is None else fast_forward) and not draft_tokens
        self.cache_bytes = PROMPT_CACHE_BYTES // partitions
        self.startup_timeout = startup_timeout
        key = str(self.model_path) + (f"|{self.partition}" if self.partition else "")
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        self.state_dir = Path(cache_dir or default_cache_dir()) / "llm-server"
        # shared by every partition's server: a preamble one worker saved warms the other's first call
        self.prefix_store = self.state_dir / "prefixes"
        self.prefix_store_bytes = prefix_store_bytes()
        self._command = command or (lambda port: llama_server_command(
            self.model_path, port, self.n_ctx, self.n_threads, self.n_threads_batch, self.chat_format,
            self.cache_bytes, users_file=self.state_path, draft_tokens=self.draft_tokens,
            prefix_store=self.prefix_store, prefix_store_bytes=self.prefix_store_bytes,
            fast_forward=self.fast_forward))
        self.state_path = self.state_dir / f"{digest}.json"
        self.log_path = self.state_dir / f"{digest}.log"
        self._lock = FileLock(str(self.state_dir / f"{digest}.lock"), timeout=startup_timeout + 60)
        self._popen: subprocess.Popen | None = None
        self.port: int | None = None
        self.held = False

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("LocalServer.acquire() first")
        return f"http://127.0.0.1:{self.port}/v1"

    # ---------------------------------------------------------------- state file
    def _read_state(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self.state_path.read_text())
            return state if {"pid", "port", "refcount"} <= set(state) else None
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path)

    def state(self) -> dict[str, Any] | None:
        """The shared state (pid, port, refcount), read under the lock."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            return self._read_state()

    # ----------------------------------------------------------------- lifecycle
    def acquire(self) -> str:
        """Start or join the shared server; returns its base URL. Idempotent per instance."""
        if self.held:
            return self.base_url
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            state = self._read_state()
            if state and _pid_alive(state["pid"]) and _ready(state["port"], timeout=WEDGED_AFTER):
                # Users are tracked by pid, so references of killed runs don't keep the server forever.
                state["users"] = _live_users(state) + [os.getpid()]
            else:
                if state and _pid_alive(state["pid"]):
                    _stop_pid(state["pid"])  # alive but not answering: a wedged server
                state = {"pid": 0, "port": 0, "users": [os.getpid()], "model": str(self.model_path)}
                state["pid"], state["port"] = self._start()
            state["refcount"] = len(state["users"])
            self._write_state(state)
        self.port = state["port"]
        self.held = True
        atexit.register(self.release)
        return self.base_url

    def release(self) -> None:
        """Drop this user's reference; the last one stops the server."""
        if not self.held:
            return
        self.held = False
        atexit.unregister(self.release)
        with self._lock:
            state = self._read_state()
            if state is None and self._popen is not None and self._popen.poll() is None:
                _stop_pid(self._popen.pid)  # our own child lost its state file (cache dir deleted): no orphan
                self._popen.wait()
                return
            if state is None or state["port"] != self.port:
                return  # someone already replaced a dead server
            users = _live_users(state)
            if os.getpid() in users:
                users.remove(os.getpid())
            state["users"], state["refcount"] = users, len(users)
            if state["refcount"] <= 0:
                _stop_pid(state["pid"])
                self.state_path.unlink(missing_ok=True)
            else:
                self._write_state(state)
        if self._popen is not None and self._popen.poll() is not None:
            self._popen.wait()  # reap our child

    def _start(self) -> tuple[int, int]:
        port = _free_port()
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps writing to it
        try:
            # Own session: a Ctrl-C aimed at one worker must not kill the server others share.
            self._popen = subprocess.Popen(self._command(port), stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True,
                                           env=child_pythonpath())
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._popen.poll() is not None:
                hint = (f"; llama.cpp crashed on its first batch: {CRASH_HINT}"
                        if self._popen.returncode == -signal.SIGSEGV else "")
                raise LocalServerError(f"the local model server exited with code {self._popen.returncode} "
                                       f"while starting{hint}; log tail ({self.log_path}):\n{self.log_tail()}")
            if _ready(port, timeout=1.0):
                return self._popen.pid, port
            time.sleep(0.2)
        self._popen.send_signal(signal.SIGTERM)
        raise LocalServerError(f"the local model server did not answer within {self.startup_timeout:g} s; "
                               f"log tail ({self.log_path}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def request_log(log_path: str | os.PathLike) -> list[dict[str, Any]]:
    """The calls a server logged (``--log-requests``): prompt, cached and completion tokens, seconds."""
    calls = []
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return calls
    for line in lines:
        if line.startswith('{"request"'):
            with contextlib.suppress(json.JSONDecodeError, KeyError):
                calls.append(json.loads(line)["request"])
    return calls


# One server handle per process and configuration, held until the process exits: consecutive trials
# of a pytest worker then reuse the running server and its warm prompt prefix instead of paying the
# start-up and the cold system prompt (tens of seconds on 2 cores) once per trial.
_PROCESS_SERVERS: dict[tuple, LocalServer] = {}


def process_server(model_path: str | os.PathLike, **opts: Any) -> LocalServer:
    """This process's handle on the shared server for ``model_path`` and ``opts`` (LocalServer's)."""
    key = (str(Path(model_path).resolve()), *sorted((k, repr(v)) for k, v in opts.items()))
    server = _PROCESS_SERVERS.get(key)
    if server is None:
        server = _PROCESS_SERVERS[key] = LocalServer(model_path, **opts)
    return server


def worker_servers(model_path: str | os.PathLike, workers: int, **opts: Any) -> list[LocalServer]:
    """The servers the ``workers`` xdist workers will join (named as xdist names them: gw0, gw1...),
    each with its share of the cores; one unpartitioned server when there are no workers."""
    if workers <= 0:
        return [LocalServer(model_path, partition="", partitions=1, **opts)]
    return [LocalServer(model_path, partition=f"gw{i}", partitions=workers, **opts) for i in range(workers)]


def release_process_servers() -> None:
    """Drop this process's references now (they are also dropped at interpreter exit)."""
    while _PROCESS_SERVERS:
        _PROCESS_SERVERS.popitem()[1].release()


# ------------------------------------------------------------------- the backend
class LocalBackend(OpenAIBackend):
    """The named model ``named`` (None: the default), or the GGUF at ``model_path``, through the shared
    llama.cpp server; free, ``supports_n=False``.

    Every request is rewritten by :func:`chatml_messages` (the server's ChatML has no tool role and no native
    tool schemas). Constrained (the default), the reply follows the state-aware call schema when the episode
    sends one (TrialConfig's ``constrained_calls``, on by default here), else :func:`call_schema` (any offered
    tool name); ``constrained=False`` sends the same prompt with no grammar.
    ``draft_tokens``: the server's prompt-lookup drafts (default: ``MLTB_DRAFT_TOKENS``, else none).
    ``fast_forward``: the server's grammar fast-forward (default: ``MLTB_FAST_FORWARD``).
    ``keep_server`` (default) keeps this process's server reference after ``close`` until the process
    exits (:func:`release_process_servers`), so the next trial finds the server and its prefix warm.
    ``base_url`` points at an already running OpenAI-compatible server (no LocalServer then).
    """

    def __init__(self, model_path: str | os.PathLike | None = None, *, named: str | None = None, seed: int = 0,
                 cache: ResponseCache | None = None, cache_dir: str | os.PathLike | None = None,
                 n_ctx: int | None = None, n_threads: int | None = None, n_threads_batch: int | None = None,
                 max_tokens: int | None = None, draft_tokens: int | None = None, fast_forward: bool | None = None,
                 constrained: bool = True, base_url: str | None = None, startup_timeout: float = 180.0,
                 server_command: Callable[[int], list[str]] | None = None, timeout: float = REQUEST_TIMEOUT,
                 keep_server: bool = True,
                 **opts: Any) -> None:
        from mltb_core.llm.local.models import reply_tokens_for

        name = f"local:{model_path}" if model_path else (f"local:{named}" if named else "local")
        if base_url is None and server_command is None:
            _require_llama_cpp()
        path = resolve_model_path(("path", str(model_path)) if model_path else ("name", named))
        if max_tokens is None:
            max_tokens = reply_tokens_for(path)
        opts.pop("price_table", None)  # local models are free
        super().__init__(path.stem, name=name, base_url=base_url or "http://127.0.0.1:0/v1", api_key="local",
                         seed=seed, cache=cache, price=FREE, supports_n=False, max_tokens=max_tokens,
                         timeout=timeout, call_format="json_object", **opts)
        self.model_path = path
        self.constrained = constrained
        self.keep_server = keep_server
        server_opts = dict(cache_dir=cache_dir, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads_batch,
                           draft_tokens=draft_tokens, fast_forward=fast_forward, startup_timeout=startup_timeout,
                           command=server_command)
        if base_url:
            self.server = None
        elif keep_server:
            self.server = process_server(path, **server_opts)
        else:
            self.server = LocalServer(path, **server_opts)

    @property
    def client(self):
        if self._client is None and self.server is not None:
            self.base_url = self.server.acquire()  # started lazily: building a backend stays cheap
        return super().client

    constrains_by_default = True

    @property
    def answerer(self) -> str:
        """The model file's SHA-256 when this backend serves it (the path may hold another file tomorrow; the
        port changes every start), else the base URL of the server given."""
        if self.server is None:
            return super().answerer
        from mltb_core.llm.local.models import file_digest

        try:
            return f"gguf sha256:{file_digest(self.model_path)}"
        except OSError as exc:
            raise InfraError(f"{self.name}: cannot read the model file: {exc}") from exc

    @property
    def endpoint(self) -> str:
        return self.answerer if self.server is not None else super().endpoint

    @property
    def request_settings(self) -> dict[str, Any]:
        settings = {**super().request_settings, "constrained": self.constrained}
        if self.server is not None:   # fast-forward pins the grammar's whitespace; drafts change the samples
            settings.update(fast_forward=self.server.fast_forward, draft_tokens=self.server.draft_tokens)
        return settings

    def _request(self, messages: list[dict], tools: list[dict], n: int, temperature: float,
                 seed: int | None, schema: dict[str, Any] | None = None) -> dict[str, Any]:
        # The json_object call format: the catalogue of every offered tool stays in the prompt (a stable
        # prefix), the schema narrows the reply; unconstrained, the same prompt without the grammar.
        kwargs = super()._request(messages, tools, n, temperature, seed, schema)
        if not self.constrained:
            kwargs.pop("response_format", None)
        return kwargs

    def close(self) -> None:
        """Close the client; release the server unless it is this process's kept one (``keep_server``)."""
        super().close()
        if self.server is not None and not self.keep_server:
            self.server.release()
