"""The embedded llama.cpp server(s) a run with ``local`` models uses (controller side): how many the machine
can hold (:func:`worker_cap`, which caps xdist's worker count), and their lifetime (:class:`LocalServers`)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

__all__ = ["LocalServers", "WorkerCap", "worker_cap", "cap_xdist_workers", "server_memory_need",
           "available_memory", "SERVER_OVERHEAD_BYTES", "names_the_suite"]

# What one llama.cpp server needs beyond its model file: compute buffers and the server process, plus the KV
# cache of its whole context (llama.cpp allocates and clears it at start, so it is resident at once).
# Measured here at 16k context: ~850 MiB above Qwen2.5-Coder-1.5B's 1.1 GB file while serving, of which the
# KV cache is 448 MiB; 365 MiB above SmolLM2-135M's 94 MB file at 8k (KV 180 MiB). Rounded up, since a server
# that does not fit swaps or is killed, while one server too few only queues.
SERVER_OVERHEAD_BYTES = 512 << 20
# KV bytes per token of context: the default model's (28 layers x 2 KV heads x 128 x 2 bytes x K and V);
# SmolLM2-135M's is 23 KiB. A larger GGUF given by path is underestimated, which only queues.
KV_BYTES_PER_TOKEN = 28 << 10
_GIB = float(1 << 30)


def server_memory_need(model_path: str | os.PathLike, n_ctx: int) -> int | None:
    """Bytes one server of ``model_path`` at ``n_ctx`` context needs (the file is mapped whole), or None when
    the file is absent."""
    try:
        return Path(model_path).stat().st_size + SERVER_OVERHEAD_BYTES + n_ctx * KV_BYTES_PER_TOKEN
    except OSError:
        return None


def available_memory() -> int | None:
    """Bytes the kernel can give without swapping (``MemAvailable``), or None where that is unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def _local_values(models) -> list[tuple[str, str]]:
    """The parsed value of every distinct ``local`` model (``("name", n)`` or ``("path", p)``)."""
    from mltb_core.llm.backends import as_model_ref

    return sorted({ref.value for ref in map(as_model_ref, models) if ref.kind == "local"}, key=repr)


def _local_model_paths(models) -> list[tuple[Path | None, int]]:
    """The model file (None: a named model not locatable now) and the server's context of every distinct
    ``local`` model."""
    from mltb_core.llm.local import DEFAULT_N_CTX, resolve_model_path
    from mltb_core.llm.local.models import get_model

    paths: list[tuple[Path | None, int]] = []
    for kind, text in _local_values(models):
        if kind == "path":
            paths.append((Path(text).expanduser(), DEFAULT_N_CTX))
            continue
        try:
            n_ctx = get_model(text).n_ctx
        except ValueError:  # an unknown name: the model preflight says so
            paths.append((None, DEFAULT_N_CTX))
            continue
        try:
            paths.append((resolve_model_path((kind, text)), n_ctx))
        except Exception:  # noqa: BLE001 - not installed / not fetched: the model preflight says so
            paths.append((None, n_ctx))
    return paths


@dataclass(frozen=True)
class WorkerCap:
    """How many xdist workers (each with its own llama.cpp server per local model) this machine holds."""

    requested: int
    workers: int
    cores: int
    memory: int | None      # bytes available
    need: int | None        # bytes per worker's servers (None: a model file could not be sized)

    @property
    def capped(self) -> bool:
        return self.workers < self.requested

    def line(self) -> str:
        """One line for the session header: how many workers/servers, and why."""
        why = [f"{self.cores} core(s)"]
        if self.memory is not None and self.need is not None:
            why.append(f"{self.memory / _GIB:.1f} GiB available / {self.need / _GIB:.1f} GiB per server")
        elif self.need is None:
            why.append("memory not checked: the model file is not on disk yet")
        head = (f"mltb: local model: {self.workers} xdist worker(s), each with its own llama.cpp server")
        if self.capped:
            return (f"{head} (-n {self.requested} capped to {self.workers}: {', '.join(why)}; each server needs "
                    "its own cores and a copy of the model, so more workers would only queue)")
        return f"{head} ({', '.join(why)})"


def worker_cap(models, requested: int, cores: int | None = None, memory: int | None = None) -> WorkerCap | None:
    """The rule, defined once: ``min(requested, cores, available memory // per-worker need)``, at least 1.

    A worker runs one server per distinct local model, each needing its model file plus
    :data:`SERVER_OVERHEAD_BYTES`. None when no model is local (API models are I/O bound and ``sim`` is
    cheap: their worker count is left alone). ``cores``/``memory`` default to this machine's.
    """
    paths = _local_model_paths(models)
    if not paths:
        return None
    if cores is None:
        from mltb_core.llm.local import available_cores  # the cores the servers divide among themselves

        cores = available_cores()
    memory = available_memory() if memory is None else memory
    needs = [server_memory_need(p, n_ctx) if p is not None else None for p, n_ctx in paths]
    need = None if None in needs else sum(n for n in needs if n is not None)
    limit = min(requested, max(cores, 1))
    if memory is not None and need:
        limit = min(limit, memory // need)
    return WorkerCap(requested=requested, workers=max(int(limit), 1), cores=cores, memory=memory, need=need)


def _suite_dirs() -> list[Path]:
    """Where the benchmark suite lives: this checkout's ``suites/`` and the installed ``mltb_suites``."""
    dirs = [Path(__file__).resolve().parent.parent / "suites"]
    spec = find_spec("mltb_suites")
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p).resolve() for p in spec.submodule_search_locations]
    return [d for d in dirs if d.is_dir()]


def names_the_suite(args: list[str], invocation_dir: Path, pyargs: bool) -> bool:
    """Whether pytest's arguments select the benchmark suite (or a directory holding it)."""
    suites = _suite_dirs()
    for arg in args:
        name = arg.split("::", 1)[0]
        if pyargs and (name == "mltb_suites" or name.startswith("mltb_suites.")):
            return True
        path = (invocation_dir / name).resolve()
        if any(path == d or d in path.parents or path in d.parents for d in suites):
            return True
    return False


def cap_xdist_workers(config, models) -> WorkerCap | None:
    """Lower ``-n N`` / ``-n auto`` to :func:`worker_cap`'s figure before xdist starts its workers.

    Called from ``pytest_configure``: xdist has already turned ``-n`` (``auto`` included, through
    ``pytest_xdist_auto_num_workers``) into ``option.tx`` in its ``pytest_cmdline_main``, and reads
    ``option.tx`` only when its session starts the workers (``DSession.pytest_sessionstart``).
    A ``--tx`` given by hand is left alone. Returns the cap applied (None when nothing is local or no -n).
    """
    option = config.option
    requested = getattr(option, "numprocesses", None)
    if not isinstance(requested, int) or requested <= 0 or getattr(option, "dist", "no") == "no":
        return None
    cap = worker_cap(models, len(option.tx or ()) or requested)
    if cap is not None and cap.capped:
        option.numprocesses = cap.workers
        option.tx = ["popen"] * cap.workers
    return cap


class LocalServers:
    """Hold the llama.cpp servers for the whole run when a ``local`` model is selected (one per xdist worker).

    LocalServer is refcounted through a state file, so the workers' backends join this server instead
    of starting and stopping one per trial; the last release stops it. A failure to start is not fatal
    here: it is listed in ``errors`` and the trials report it as an infrastructure error.
    """

    def __init__(self) -> None:
        self.held: list = []
        self.errors: list[str] = []

    def start(self, models, workers: int = 0, say: Callable[[str], None] = lambda line: None) -> None:
        """Start (or join) the servers: one per xdist worker (``workers`` > 0), each with its share of the
        cores, so every worker keeps its own warm prompt prefix; one without xdist. ``say`` gets a line as
        each server starts and when it answers (a cold start loads the model: seconds to minutes)."""
        local = _local_values(models)
        if not local:
            return
        from mltb_core.llm.local import resolve_model_path, worker_servers

        # preflight has checked (and assembled) every model file by now
        for value in local:
            path = resolve_model_path(value)
            servers = worker_servers(path, workers)
            say(f"mltb: local model {value[1]} ready ({path}, {path.stat().st_size / 1e9:.1f} GB, hash-checked); "
                f"starting {len(servers)} llama.cpp server(s)")
            for server in servers:
                started = time.monotonic()
                try:
                    server.acquire()
                except Exception as exc:  # noqa: BLE001 - reported, and every trial will say it again
                    self.errors.append(f"local model server for {value[1]} failed to start: {exc}")
                    say(f"mltb: {self.errors[-1]}")
                    continue
                self.held.append(server)
                say(f"mltb: llama.cpp server on port {server.port} answering after {time.monotonic() - started:.1f} s")

    def stop(self) -> None:
        for server in self.held:
            server.release()
        self.held.clear()
