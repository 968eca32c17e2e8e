"""Which code ran a trial or wrote a report: the mltb version and, in a git checkout of mltb, its commit.

Every record carries it (``TrialRecord.code``) because a run directory outlives the code: ``--resume`` and
later sessions add trials to it, and the config hash says which settings a trial ran with, not which code.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["git_commit", "code_version", "trial_code", "NOT_RECORDED", "UNCOMMITTED", "code_difference", "code_note",
           "code_recorded",
           "machine_facts", "machine_label", "machine_counts", "LoadMeter", "LOAD_SAMPLE_SECONDS"]

NOT_RECORDED = "not recorded"   # records written before mltb stamped its code on them
UNCOMMITTED = "with uncommitted changes"   # in a record's code: the checkout differed from its commit
# What a run may rewrite in its own checkout without changing the code that runs: the reports it writes
# (benchmarks/local_llm_table.py's default) and prose. Uncommitted changes anywhere else flag the commit.
NOT_CODE = (":(exclude)reports/", ":(exclude)*.md")
# the directory holding mltb_core/: a git checkout of mltb, or site-packages for an installed copy
ROOT = Path(__file__).resolve().parents[2]


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=10)


@functools.lru_cache(maxsize=None)
def git_commit(root: Path = ROOT) -> str | None:
    """The commit of the checkout mltb runs from (12 hex digits), with ``(with uncommitted changes <diff>)``
    when tracked files other than reports and prose (:data:`NOT_CODE`) differ from it — ``<diff>`` the first 8
    hex digits of the SHA-256 of ``git diff HEAD`` over those files, so two runs on uncommitted changes can be
    told apart (:data:`UNCOMMITTED`) — or None when ``root`` is not the top of a git checkout: an installed
    copy in a virtual environment that lives inside some other repository must not report that repository's
    commit. Read once per process."""
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
            return None
        head = _git(root, "rev-parse", "--short=12", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_CODE)
        diff = _git(root, "diff", "--binary", "HEAD", "--", ".", *NOT_CODE) if dirty.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    if diff is None:
        return head.stdout.strip()
    digest = hashlib.sha256(diff.stdout.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{head.stdout.strip()} ({UNCOMMITTED} {digest})"


def code_version() -> str:
    """``mltb <version>``, plus ``@ <commit>`` when running from a git checkout of mltb."""
    from mltb_core import __version__

    commit = git_commit()
    return f"mltb {__version__}" + (f" @ {commit}" if commit else "")


@functools.lru_cache(maxsize=None)
def machine_facts() -> dict[str, Any]:
    """What the machine a trial ran on was (every record carries it, so a comparison can tell machines
    apart): CPU model, cores, memory, system, Python, and the llama.cpp build the local backend used (the
    llama-cpp-python release; None without it). Read once per process; no load figures (they vary)."""
    import os
    import platform
    from importlib import metadata

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        memory = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory = None
    try:
        llama = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        llama = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory,
            "system": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "llama_cpp": llama}


def machine_label(facts: dict[str, Any] | None) -> str:
    """One machine in a few words (what tells machines apart: CPU, cores, memory); :data:`NOT_RECORDED` for
    records written before mltb stamped the machine."""
    if not facts:
        return NOT_RECORDED
    memory = f", {facts['memory_gib']} GiB" if facts.get("memory_gib") is not None else ""
    return f"{facts.get('cpu') or 'unknown CPU'}, {facts.get('cores')} cores{memory}"


def machine_counts(records: Iterable[Any]) -> Counter:
    """Trials per machine (:func:`machine_label`); more than one key means the figures mix machines."""
    return Counter(machine_label(getattr(record, "machine", None)) for record in records)


def trial_code(records: Iterable[Any], markup: Callable[[str], str] = str) -> str:
    """Which code ran these trials, most trials first: ``mltb 0.1.0 @ 1a2b3c4d5e6f (40), not recorded (5)``;
    ``markup`` makes each record's ``code`` (a records file's text) safe for the output format."""
    counts = Counter(record.code or NOT_RECORDED for record in records)
    return ", ".join(f"{markup(code)} ({n})" for code, n in counts.most_common())


def _knowable(code: str) -> bool:
    """Whether two trials stamped ``code`` ran the same code: not for a record without one, nor for uncommitted
    changes stamped before they carried their diff's digest."""
    return code != NOT_RECORDED and not code.endswith(f"({UNCOMMITTED})")


def code_difference(a: Iterable[Any], b: Iterable[Any]) -> str | None:
    """How the code that ran trials ``a`` differs from the code that ran ``b`` (``mltb compare``: A → B), in
    words, e.g. ``code: mltb 0.1.0 @ 1a2b3c4d5e6f (with uncommitted changes 0c1d2e3f) (6) → mltb 0.1.0 @
    1a2b3c4d5e6f (6)``; None when every trial of both ran the same committed code (or the same uncommitted
    changes, by their digest), or when no trial of either records its code (nothing to tell: see
    :func:`code_recorded`). Code that cannot be told the same (uncommitted changes stamped before they
    carried a digest, a side without records of its code) is named."""
    a, b = list(a), list(b)
    codes = {record.code or NOT_RECORDED for record in [*a, *b]}
    if len(codes) == 1 and (_knowable(next(iter(codes))) or not code_recorded([*a, *b])):
        return None
    return f"code: {trial_code(a)} → {trial_code(b)}"


def code_recorded(records: Iterable[Any]) -> bool:
    """Whether any of ``records`` says which code ran it (records before schema 2 do not)."""
    return any(record.code for record in records)


def code_note(records: Iterable[Any]) -> str | None:
    """A sentence for a report's legend when its trials did not all run one committed code (several commits, or
    uncommitted changes): the config hash pins the settings, not the code. None when they did."""
    records = list(records)
    codes = {record.code or NOT_RECORDED for record in records}
    if len(codes) > 1:
        return (f"The trials ran on different code: {trial_code(records)}; a configuration's hash pins its settings, "
                "not its code, so a column may mix code versions.")
    if codes and UNCOMMITTED in next(iter(codes)):
        return f"The trials ran on uncommitted changes: {trial_code(records)}."
    return None


LOAD_SAMPLE_SECONDS = 30.0   # how often a LoadMeter samples the load average between a trial's start and end


class LoadMeter:
    """How busy the machine was while a trial ran: the mean of its 1-minute load average per core, sampled
    at the start, every ``every`` seconds and when :meth:`mean` is read (:data:`mltb_core.analysis.sections.
    LOAD_NOTE` says how to read it). A thread samples, not the planner's own steps: one LLM call can take
    minutes. No figure (None) where the system has no load average."""

    def __init__(self, every: float = LOAD_SAMPLE_SECONDS):
        self._every = every
        self._cores = machine_facts()["cores"] or 1
        self._samples: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        try:
            value = os.getloadavg()[0] / self._cores   # looked up here: some systems have none
        except (OSError, AttributeError):
            return
        with self._lock:
            self._samples.append(value)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._sample()

    def start(self) -> LoadMeter:
        self._sample()
        self._thread = threading.Thread(target=self._run, name="mltb-load-meter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> LoadMeter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mean(self) -> float | None:
        """The mean load per core so far, 2 decimals, after one more sample (now); None without samples."""
        self._sample()
        with self._lock:
            return round(sum(self._samples) / len(self._samples), 2) if self._samples else None
