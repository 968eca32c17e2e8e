"""The untrusted tool worker: one fresh process per trial that runs every tool call the model asks for.

Privilege separation. The trial's trusted process (planner, LLM client and API keys, response cache,
trajectory, record, grader) never runs code the model influences. Its workers come from a *factory*:
``python -m mltb_core.runner.worker --factory``, a new program (not a fork of the trusted process, so
nothing of the grader's memory — held-out labels — is in it) with an environment stripped to what Python
needs (no API keys), which imports the toolset once and then forks one worker per trial, each in a
session of its own. The factory never receives anything but "fork", so each worker is as clean as a
freshly started program, without the start-up cost. The trusted process talks to a worker over two pipes:

* parent → worker: pickled requests (the parent is trusted; the worker may unpickle them);
* worker → parent: length-prefixed JSON only, read with size, time and shape limits
  (:class:`WorkerWorkspace`), every field checked by :meth:`StepFacts.from_json`.

Before it reads any request that carries model text, the worker confines itself: the trial's memory
budget (RLIMIT_AS), a file-size cap (RLIMIT_FSIZE), Landlock (read the Python installation and the
agent's data; read and write the sandbox and a scratch directory; no TCP) and a seccomp filter (no
processes, programs, sockets or signals to others, :mod:`mltb_core.runner.syscalls`). It reports what
it managed in its first reply, written before any model text arrives, so that report can be trusted.
The parent kills the worker's whole process group when the trial ends, and measures the sandbox after
every call (the disk quota). Once it has started, anything the worker does wrong — dies, hangs, floods,
sends a malformed reply, overruns the quota — ends the trial as the model's failure (:class:`WorkerFailed`).
Until its start report arrives no model text has reached it, so a worker that cannot start is mltb's or
the machine's failure: :class:`WorkerStartFailed`, an infrastructure error with its cause.
"""
from __future__ import annotations

import atexit
import collections
import json
import math
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mltb_core.stages.rewards import Progress
from mltb_core.stages.workspace import MAX_OBSERVATION_CHARS, ModelFault, StepFacts, UntrustedReply
from mltb_core.toolkit.registry import ToolCall
from mltb_core.bench.documents import JSONShapeError, clean_strings, loads_bounded
from mltb_core.toolkit.textsafety import MAX_JSON_DEPTH, cap_text

__all__ = ["WorkerInit", "WorkerWorkspace", "WorkerFailed", "WorkerStartFailed", "QuotaExceeded", "MAX_REPLY_BYTES",
           "call_schema_problem", "worker_environment"]

MAX_REPLY_BYTES = 96 * 2**20          # one JSON reply (a step may carry the submission's bytes)
START_SECONDS = 120.0                 # importing pandas, scikit-learn and the boosters on a loaded machine
QUERY_SECONDS = 60.0                  # a schema or listing request
STEP_GRACE_SECONDS = 10.0             # past the tool's own time limit (plus a tenth of that limit)
_HEADER = struct.Struct(">Q")
ENTRY_BYTES = 4096                    # what a file, directory or link costs at least (one block, one inode)


class WorkerFailed(ModelFault):
    """The worker died, hung, flooded, broke the protocol or overran its quota: the trial's own failure."""


class QuotaExceeded(WorkerFailed):
    """The sandbox holds more than its quota: its files are removed with the trial."""


class WorkerStartFailed(OSError):
    """The worker ended, hung or failed before its start report, which it writes before any model text
    reaches it: not the model's doing, so an infrastructure error (an OSError: the runner records those so),
    with the worker's own reason or the tail of its stderr."""


@dataclass
class WorkerInit:
    """Everything the worker needs, sent once (pickled by the trusted parent)."""

    task: Any
    toolset: str | None              # None: every registered tool (a replay without a declared toolset)
    data_dir: str
    sandbox: str
    scratch: str
    read_only: list[str]
    read_write: list[str]
    max_features: int
    threads: int
    seed: int
    tool_time_limit: float | None
    memory_budget: int | None
    disk_quota: int | None
    tool_modules: tuple[tuple[str, str], ...] = ()   # modules outside mltb_core that define tools (name, file)

    def __post_init__(self) -> None:
        # the worker starts in "/" (the factory's directory), so a relative path would name another place;
        # the front ends resolve every path option where it is read (mltb_core.config, mltb_core.environment)
        paths = {"data_dir": [self.data_dir], "sandbox": [self.sandbox], "scratch": [self.scratch],
                 "read_only": self.read_only, "read_write": self.read_write}
        for name, values in paths.items():
            relative = [value for value in values if not os.path.isabs(value)]
            if relative:
                raise ValueError(f"WorkerInit.{name} holds a relative path {relative[0]!r}: the caller resolves "
                                 "paths before a worker is started")


# ----------------------------------------------------------------------------------------- framing
def _write_frame(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ----------------------------------------------------------------------------- the worker process
def worker_environment(threads: int) -> dict[str, str]:
    """The worker's whole environment: nothing of the parent's (API keys, tokens, proxies) but what
    Python and the thread pools need (thread counts are read once, when numpy and the boosters load).
    The trial's scratch directory becomes HOME and TMPDIR when the worker receives its trial."""
    from mltb_core.environment import child_pythonpath
    from mltb_core.toolkit.limits import THREAD_ENV_VARS

    env = child_pythonpath({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                            "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"})
    env.update({name: str(threads) for name in THREAD_ENV_VARS})
    return env


def _preload() -> None:
    """What every trial needs, imported before the trial is known (by the factory, once per process)."""
    from mltb_core.stages import workspace  # noqa: F401
    from mltb_core.runner import confine, syscalls  # noqa: F401
    from mltb_core.toolkit import tools  # noqa: F401


def _serve(init: WorkerInit, inp: int, out: int) -> None:
    try:
        workspace, label, active = _start(init)
    except Exception as exc:  # noqa: BLE001 - no model text has arrived: the start report says why, as it is trusted
        _write_frame(out, json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}).encode())
        return
    _write_frame(out, json.dumps({"ready": True, "confinement": label, "landlock": active}).encode())
    # Requests come from the trusted parent; the handlers are a fixed table, never a looked-up name.
    handlers = {
        "step": lambda r: workspace.step(r["parent"], r["node"], r["call"], r["allowed"]).to_json(),
        "schema": lambda r: workspace.call_schema(r["node"], r["allowed"]),
        "listing": lambda r: workspace.listing(r["node"]),
    }
    while True:
        try:
            (size,) = _HEADER.unpack(_read_exact(inp, _HEADER.size))
            request = pickle.loads(_read_exact(inp, size))
        except EOFError:
            return
        if request["op"] == "close":
            return
        reply = handlers[request["op"]](request)
        _write_frame(out, json.dumps({"reply": reply}, default=str).encode())


def _start(init: WorkerInit) -> tuple[Any, str, bool]:
    """Set the worker up for its trial and confine it: its workspace, its confinement label and whether
    Landlock is active."""
    import resource
    import tempfile

    from mltb_core.stages.rewards import StageContext
    from mltb_core.stages.workspace import LocalWorkspace
    from mltb_core.runner.confine import confine
    from mltb_core.runner.syscalls import SYSCALL_FILTER_LABEL, restrict_syscalls
    from mltb_core.toolkit import tools  # noqa: F401  (registers the toolset before confinement)
    from mltb_core.toolkit.limits import set_memory_budget
    from mltb_core.toolkit.registry import REGISTRY, ToolContext

    for name, file in init.tool_modules:   # the parent's own tools from other packages, before confinement
        _import_file(name, file)
    os.chdir(init.sandbox)
    os.environ.update(HOME=init.scratch, TMPDIR=init.scratch, MPLCONFIGDIR=init.scratch)
    tempfile.tempdir = init.scratch
    stage_ctx = StageContext.from_agent_data(init.task, Path(init.data_dir), init.max_features)
    tool_ctx = ToolContext(sandbox=Path(init.sandbox), data_dir=Path(init.data_dir), task=init.task,
                           threads=init.threads, seed=init.seed, time_limit=init.tool_time_limit)
    workspace = LocalWorkspace(stage_ctx, tool_ctx, REGISTRY.for_toolset(init.toolset) if init.toolset else REGISTRY)
    if init.disk_quota:
        resource.setrlimit(resource.RLIMIT_FSIZE, (init.disk_quota, init.disk_quota))
    set_memory_budget(init.memory_budget)
    status = confine(init.read_only, init.read_write, network=False)
    filtered, why = restrict_syscalls()
    label = status.label + (f"+{SYSCALL_FILTER_LABEL}" if filtered else f" (no syscall filter: {why})")
    return workspace, label, status.active


def _import_file(name: str, file: str) -> None:
    import importlib.util

    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the tool module {name} from {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def main() -> None:
    if sys.argv[1:] == ["--factory"]:
        _factory()
    _die_with_parent()
    _preload()
    _worker(0, 1)


def _worker(inp: int, out_fd: int) -> None:
    """Serve one trial on these pipes: read the trial, confine, answer requests; never returns."""
    # The protocol owns the original stdout; anything a library prints goes to stderr instead.
    out = os.dup(out_fd)
    os.dup2(2, out_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent decides when the trial stops
    try:
        (size,) = _HEADER.unpack(_read_exact(inp, _HEADER.size))
    except EOFError:   # never given a trial
        os._exit(0)
    init: WorkerInit = pickle.loads(_read_exact(inp, size))
    _serve(init, inp, out)
    os._exit(0)


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies (the trusted process, or the factory)."""
    if sys.platform != "linux":
        return
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    if os.getppid() == 1:   # the parent died before the request took effect
        os._exit(0)


# ------------------------------------------------------------- the factory: workers without start-up cost
def _factory() -> None:
    """A clean, pre-imported process that forks one worker per request (a fork server).

    It is started like a worker — a new program with the stripped environment — and never receives
    anything but "fork": no trial, no model text, no secret. Each child it forks is therefore as clean as
    a freshly started worker, with pandas, scikit-learn and the boosters already imported. The child's
    pipes go to the trusted process over the factory's unix socket (SCM_RIGHTS).
    """
    import socket

    _die_with_parent()
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children are reaped by the kernel
    channel = socket.socket(fileno=0)
    while True:
        if not channel.recv(1):
            os._exit(0)   # the trusted process is done
        requests, to_worker = os.pipe()
        from_worker, replies = os.pipe()
        errors, error_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            channel.close()
            for fd in (to_worker, from_worker, errors):
                os.close(fd)
            os.setsid()   # its own session: the trusted process kills the whole of it
            os.dup2(requests, 0)
            os.dup2(replies, 1)
            os.dup2(error_end, 2)
            for fd in (requests, replies, error_end):
                os.close(fd)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _die_with_parent()
            _worker(0, 1)
        for fd in (requests, replies, error_end):
            os.close(fd)
        socket.send_fds(channel, [str(pid).encode()], [to_worker, from_worker, errors])
        for fd in (to_worker, from_worker, errors):
            os.close(fd)


class _Child:
    """A worker forked by a factory: its pid, its three pipes and a pidfd to see it end."""

    def __init__(self, pid: int, to_worker: int, from_worker: int, errors: int):
        self.pid = pid
        self.stdin = os.fdopen(to_worker, "wb", buffering=0)
        self.stdout = os.fdopen(from_worker, "rb", buffering=0)
        self.stderr = os.fdopen(errors, "rb", buffering=0)
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):   # already gone (and reaped), or no pidfd here
            self._pidfd = None
        self.returncode: int | None = None if self._pidfd is not None else -1

    def poll(self) -> int | None:
        if self.returncode is None and self._pidfd is not None:
            ready, _, _ = select.select([self._pidfd], [], [], 0)
            if ready:
                self.returncode = -1   # ended (the factory reaps it; its status is not ours to read)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("worker", timeout)
            select.select([self._pidfd], [], [], min(0.5, max(0.0, deadline - time.monotonic())))
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return -1


class _Factory:
    """The trusted side's handle on one factory (per thread count: thread pools size themselves at import)."""

    def __init__(self, threads: int):
        import socket

        self.channel, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mltb_core.runner.worker", "--factory"], stdin=theirs,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=worker_environment(threads), cwd="/",
            start_new_session=True, close_fds=True)
        theirs.close()

    def fork(self) -> _Child:
        import socket

        self.channel.sendall(b"F")
        message, fds, _, _ = socket.recv_fds(self.channel, 32, 3)
        if not message or len(fds) != 3:
            raise OSError("the worker factory did not answer")
        return _Child(int(message), *fds)

    def close(self) -> None:
        self.channel.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


_factories: dict[int, _Factory] = {}


def _take_process(threads: int) -> _Child:
    """A fresh worker for a trial, forked by this process's factory for ``threads`` (started on first use,
    and again if it died)."""
    factory = _factories.get(threads)
    if factory is not None and factory.proc.poll() is None:
        try:
            return factory.fork()
        except OSError:
            factory.close()
    factory = _factories[threads] = _Factory(threads)
    return factory.fork()


@atexit.register
def _end_factories() -> None:
    for factory in _factories.values():
        factory.close()
    _factories.clear()


# ---------------------------------------------------------------------------- the parent's client
class WorkerWorkspace:
    """The :class:`~mltb_core.stages.workspace.Workspace` of a trial: requests to a fresh worker.

    Every reply is read with a deadline and a size cap and checked before use; any failure kills the
    worker and raises :class:`WorkerFailed`.
    """

    def __init__(self, init: WorkerInit, *, start_seconds: float = START_SECONDS):
        self.init = init
        self.sandbox, self.scratch = Path(init.sandbox), Path(init.scratch)
        limit = init.tool_time_limit or 3600.0
        self.step_seconds = limit * 1.1 + STEP_GRACE_SECONDS   # the tool's alarm fires first, unless ignored
        self._stderr: collections.deque[bytes] = collections.deque(maxlen=64)
        self.started = time.monotonic()
        self.proc = _take_process(init.threads)
        self._drain = threading.Thread(target=self._keep_stderr, daemon=True)
        self._drain.start()
        self._progress: dict[int, Progress] = {}   # checked progress per node: stages never go back
        self.confinement = "none: the worker did not start"
        self.landlock = False
        self._starting = True   # until the start report: a failure is WorkerStartFailed (see _fail)
        self._send(None, raw=pickle.dumps(init))
        hello = self._receive(start_seconds, "start")
        if isinstance(hello, dict) and hello.get("ready") is False and isinstance(hello.get("error"), str):
            self._fail(f"the worker could not start: {cap_text(hello['error'], 1_000)}")
        if not (isinstance(hello, dict) and hello.get("ready") is True and isinstance(hello.get("confinement"), str)):
            self._fail("the worker's first reply is not its start report")
        self._starting = False
        self.confinement = cap_text(hello["confinement"], 300)
        self.landlock = hello.get("landlock") is True
        self.start_seconds = time.monotonic() - self.started
        self._ready_kib = _status_kib(self.proc.pid, "VmRSS")

    # -- the Workspace interface ----------------------------------------------------------------
    def step(self, parent: int, node: int, call: ToolCall, allowed: list[str] | None) -> StepFacts:
        self._send({"op": "step", "parent": parent, "node": node, "call": call, "allowed": allowed})
        reply = self._receive(self.step_seconds, f"the call {call.tool_name}")
        self._check_quota()
        try:
            facts = StepFacts.from_json(reply, self._progress.get(parent, Progress()))
        except UntrustedReply as exc:
            self._fail(f"the worker sent a malformed step reply: {exc}")
        self._progress[node] = facts.progress
        return facts

    def call_schema(self, node: int, allowed: list[str] | None) -> dict[str, Any] | None:
        self._send({"op": "schema", "node": node, "allowed": allowed})
        reply = self._receive(QUERY_SECONDS, "a call schema")
        problem = call_schema_problem(reply, allowed)
        if problem:
            self._fail(f"the worker sent a malformed call schema: {problem}")
        return reply

    def listing(self, node: int) -> str:
        self._send({"op": "listing", "node": node})
        reply = self._receive(QUERY_SECONDS, "a scratchpad listing")
        if not isinstance(reply, str):
            self._fail("the worker sent a listing that is not text")
        return cap_text(reply, MAX_OBSERVATION_CHARS)

    def peak_memory_mib(self) -> float | None:
        """The worker's peak resident memory above what it held when it was ready (Linux /proc), or None."""
        peak = _status_kib(self.proc.pid, "VmHWM")
        return None if peak is None or self._ready_kib is None else max(0.0, (peak - self._ready_kib) / 1024)

    def close(self) -> None:
        """End the worker and everything it may have started (its whole session)."""
        if self.proc.poll() is None:
            try:
                self._send({"op": "close"})
                self.proc.wait(timeout=2)
            except (WorkerFailed, subprocess.TimeoutExpired, OSError):
                pass
        self._kill()

    # -- plumbing --------------------------------------------------------------------------------
    def _keep_stderr(self) -> None:
        stream = self.proc.stderr
        try:
            while chunk := stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096):
                self._stderr.append(chunk)
        except (OSError, ValueError):
            pass

    def stderr_tail(self, limit: int = 2_000) -> str:
        text = b"".join(self._stderr)[-limit:].decode("utf-8", "replace")
        return cap_text(text, limit)

    def _send(self, request: dict[str, Any] | None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else pickle.dumps(request)
        try:
            _write_frame(self.proc.stdin.fileno(), data)
        except (BrokenPipeError, OSError, ValueError):
            self._fail("the worker is gone (its input pipe closed)")

    def _receive(self, seconds: float, what: str) -> Any:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + seconds
        buffer = bytearray()
        need = _HEADER.size
        header_done = False
        while len(buffer) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"the worker did not answer {what} within {seconds:.0f} s")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, min(need - len(buffer), 1 << 20))
            if not chunk:
                self._fail(f"the worker ended while answering {what}")
            buffer += chunk
            if not header_done and len(buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack(bytes(buffer[:_HEADER.size]))
                if size > MAX_REPLY_BYTES:
                    self._fail(f"the worker sent a reply of {size:,} bytes (at most {MAX_REPLY_BYTES:,})")
                del buffer[:_HEADER.size]
                need, header_done = size, True
        try:
            message = loads_bounded(bytes(buffer).decode("utf-8", "replace"), MAX_JSON_DEPTH, MAX_REPLY_BYTES)
        except (ValueError, JSONShapeError) as exc:
            self._fail(f"the worker sent a reply that is not acceptable JSON ({exc})")
        message = clean_strings(message)
        if what == "start":
            return message
        if not isinstance(message, dict) or "reply" not in message:
            self._fail("the worker sent a reply without its 'reply' field")
        return message["reply"]

    def _check_quota(self) -> None:
        quota = self.init.disk_quota
        if quota is None:
            return
        used = sandbox_bytes(self.sandbox) + sandbox_bytes(self.scratch)
        if used > quota:
            self._fail(f"the sandbox holds {used / 2**20:,.0f} MiB, over its quota of {quota / 2**20:,.0f} MiB "
                       f"(every file, directory and link counts at least {ENTRY_BYTES:,} bytes)", QuotaExceeded)

    def _fail(self, why: str, kind: type[WorkerFailed] | None = None):
        self._kill()
        if self._starting:   # no model text has reached the worker: the cause is ours or the machine's
            raise WorkerStartFailed(why + self._start_stderr())
        raise (kind or WorkerFailed)(why)

    def _start_stderr(self) -> str:
        """The last line a worker that failed to start wrote on stderr (its traceback's exception), for the record."""
        self._drain.join(timeout=2.0)   # the worker is dead: its stderr pipe ends
        lines = [line.strip() for line in self.stderr_tail(4_000).splitlines() if line.strip()]
        return f"; its stderr ends: {cap_text(lines[-1], 500)}" if lines else ""

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


def _status_kib(pid: int, field: str) -> int | None:
    """A memory figure (kB) of process ``pid`` from /proc/<pid>/status, or None where unavailable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def sandbox_bytes(root: Path) -> int:
    """What the disk quota counts below ``root``: the blocks of every entry (links not followed), and at
    least :data:`ENTRY_BYTES` for each file, directory, link or other entry, so that inodes cost too (on
    tmpfs a directory has no blocks; 20,000 empty directories must not pass a 16 MiB quota)."""
    total, stack = 0, [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                total += max(entry.stat(follow_symlinks=False).st_blocks * 512, ENTRY_BYTES)
            except OSError:
                total += ENTRY_BYTES
    return total


def call_schema_problem(schema: Any, allowed: list[str] | None) -> str | None:
    """Why a call schema from the worker cannot be used (None: it can). The worker runs the model's code:
    its schema is checked for the shape the trusted side reads (``constraints.arguments_by_tool`` and the
    backends: ``{"anyOf": [{"properties": {"tool_name": {"const": name}, "tool_args": {...}}}, ...]}``),
    for tools the request allowed, and for values JSON can carry (no NaN or infinity)."""
    if schema is None:
        return None
    if not isinstance(schema, dict) or not isinstance(schema.get("anyOf"), list) or not schema["anyOf"]:
        return "not an object with a non-empty 'anyOf' list"
    for index, branch in enumerate(schema["anyOf"]):
        props = branch.get("properties") if isinstance(branch, dict) else None
        if not isinstance(props, dict):
            return f"branch {index} has no 'properties' object"
        name = props.get("tool_name")
        if not (isinstance(name, dict) and isinstance(name.get("const"), str) and name["const"]
                and isinstance(props.get("tool_args"), dict)):
            return f"branch {index} lacks properties.tool_name.const or properties.tool_args"
        if allowed is not None and name["const"] not in allowed:
            return f"branch {index} offers a tool the request did not allow"
    stack = [schema]
    while stack:   # depth is bounded by the reply's parse (loads_bounded)
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"it holds the number {item!r}, which JSON cannot carry"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


if __name__ == "__main__":
    main()
