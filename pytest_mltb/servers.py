"""What a run's backends need for the whole session (controller side), asked of every backend in the plan:
how many xdist workers the machine holds for them (:func:`worker_cap`, which caps xdist's worker count), and
what they keep alive from the first trial to the last (:class:`SessionHolds`, e.g. one model server per
worker). A backend says both through its spec (``BackendSpec.worker_needs``, ``session_start``/``session_end``
in mltb_core/llm/backends.py); nothing here knows which backend needs what."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from mltb_core import environment

__all__ = ["SessionHolds", "WorkerCap", "worker_cap", "cap_xdist_workers", "names_the_suite"]

_GIB = float(1 << 30)


def _distinct(models) -> list[Any]:
    """Every distinct model (as a parsed ModelRef) of ``models``, in a stable order."""
    from mltb_core.llm.backends import as_model_ref

    refs: dict[tuple[str, str], Any] = {}
    for ref in map(as_model_ref, models):
        refs.setdefault((ref.kind, repr(ref.value)), ref)
    return [refs[key] for key in sorted(refs)]


@dataclass(frozen=True)
class WorkerCap:
    """How many xdist workers (each running what its models need, e.g. a server per model) this machine holds."""

    requested: int
    workers: int
    cores: int
    memory: int | None      # bytes available
    need: int | None        # bytes per worker (None: a model's need is not known yet)
    backends: str           # the backends that need something per worker, for the line
    what: str               # what each worker runs for them

    @property
    def capped(self) -> bool:
        return self.workers < self.requested

    def line(self) -> str:
        """One line for the session header: how many workers/servers, and why."""
        why = [f"{self.cores} core(s)"]
        if self.memory is not None and self.need is not None:
            why.append(f"{self.memory / _GIB:.1f} GiB available / {self.need / _GIB:.1f} GiB per worker")
        elif self.need is None:
            why.append("memory not checked: a model file is not on disk yet")
        head = f"mltb: {self.backends} model: {self.workers} xdist worker(s), each with its own {self.what}"
        if self.capped:
            return (f"{head} (-n {self.requested} capped to {self.workers}: {', '.join(why)}; each worker needs "
                    "its own cores and memory, so more workers would only queue)")
        return f"{head} ({', '.join(why)})"


def worker_cap(models, requested: int, cores: int | None = None, memory: int | None = None) -> WorkerCap | None:
    """The rule, defined once: ``min(requested, cores // cores per worker, (available memory - shared) //
    memory per worker)``, at least 1, where a worker's memory is the sum of its models' and the shared memory
    (e.g. the machine's prefix cache) the largest one's (``BackendSpec.worker_needs``).

    None when no model needs anything per worker (API models are I/O bound and ``sim`` is cheap: their
    worker count is left alone). ``cores``/``memory`` default to this machine's.
    """
    needs = [(ref, n) for ref in _distinct(models) if (n := ref.spec.worker_needs(ref.value)) is not None]
    if not needs:
        return None
    cores = environment.available_cores() if cores is None else cores
    memory = environment.available_memory() if memory is None else memory
    memories = [n.memory for _, n in needs]
    need = None if None in memories else sum(m for m in memories if m is not None)
    limit = min(requested, max(cores // max(max(n.cores for _, n in needs), 1), 1))  # one trial, one model at a time
    if memory is not None and need:
        limit = min(limit, (memory - max(n.shared_memory for _, n in needs)) // need)
    return WorkerCap(requested=requested, workers=max(int(limit), 1), cores=cores, memory=memory, need=need,
                     backends="/".join(sorted({ref.kind for ref, _ in needs})),
                     what=" + ".join(sorted({n.what for _, n in needs})))


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
    A ``--tx`` given by hand is left alone. Returns the cap applied (None when no model needs anything per
    worker, or no -n).
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


class SessionHolds:
    """What every backend in the plan keeps alive for the whole run (``BackendSpec.session_start``), e.g. the
    local model's llama.cpp servers, one per xdist worker, which the workers' backends join instead of
    starting one per trial. A failure to start is not fatal here: it is listed in ``errors`` and the trials
    report it as an infrastructure error."""

    def __init__(self) -> None:
        self.held: list[tuple[Any, Any]] = []
        self.errors: list[str] = []

    def start(self, models, workers: int = 0, say: Callable[[str], None] = lambda line: None) -> None:
        """Ask every backend in ``models`` to start what its trials share (``workers`` xdist workers, 0 without
        xdist); ``say`` gets a line as things start (a cold model server takes seconds to minutes)."""
        for ref in _distinct(models):
            try:
                held, errors = ref.spec.session_start(ref.value, workers, say)
                self.held.append((ref.spec, held))
            except Exception as exc:  # noqa: BLE001 - reported, and every trial will say it again
                errors = [str(exc)]
            for error in errors:
                self.errors.append(error)
                say(f"mltb: {error}")

    def stop(self) -> None:
        while self.held:
            spec, held = self.held.pop()
            spec.session_end(held)
