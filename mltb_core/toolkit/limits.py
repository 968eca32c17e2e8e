"""Resource limits for tool calls and worker threads.

A tool call gets a wall-time limit (SIGALRM in the main thread, where pytest and
xdist run tests) so a runaway fit returns an error the model can read instead of
hanging the trial. The alarm is a Python signal: native code (a CatBoost or
LightGBM fit, a big numpy kernel) that never returns to Python is interrupted only
when it does, so the call overruns by the length of its current native stretch;
boosting tools also cap their own iterations.

A trial gets one memory budget for its whole life: its solver process caps its
address space (RLIMIT_AS) once, at what it maps when it starts plus the budget
(``MLTB_TOOL_MEMORY_LIMIT``, default 6 GiB; ``0``/``off`` disables it), so what a
trial keeps on its scratchpad counts across calls. An allocation past the cap
fails inside the call (numpy and Python raise MemoryError) and the call returns
"out of memory" to the model instead of the kernel's OOM killer taking the worker. C++ libraries report a failed allocation
their own way (LightGBM/XGBoost/CatBoost raise their error with ``bad_alloc``;
the executor shows it as the call's error); code that aborts on it kills the
solver process, which the trial records (see :mod:`mltb_core.runner.trial`).
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

from mltb_core.environment import default as environment_default, read as read_environment

__all__ = ["ToolTimeout", "ToolOutOfMemory", "call_with_time_limit", "call_with_limits", "set_memory_budget",
           "tool_memory_limit", "sandbox_quota", "parse_size", "size_setting", "limit_threads", "THREAD_ENV_VARS", "MEMORY_LIMIT_ENV",
           "DEFAULT_TOOL_MEMORY"]

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


MEMORY_LIMIT_ENV = "MLTB_TOOL_MEMORY_LIMIT"
SANDBOX_QUOTA_ENV = "MLTB_SANDBOX_QUOTA"
_SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


ALARM_REPEAT = 1.0   # seconds between repeated alarms once a call is past its limit


class ToolTimeout(TimeoutError):
    """A tool call ran past its wall-time limit."""


class ToolOutOfMemory(MemoryError):
    """A tool call's allocations went past its memory budget."""


def parse_size(text: str | int) -> int:
    """Bytes in ``"6G"``, ``"512M"``, ``"300MiB"``, ``"1.5g"`` or a plain number of bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", str(text), re.I)
    if not match:
        raise ValueError(f"not a size: {text!r} (use e.g. 6G, 512M or a number of bytes)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


DEFAULT_TOOL_MEMORY = parse_size(environment_default(MEMORY_LIMIT_ENV))      # the environment table's "6 GiB"
DEFAULT_SANDBOX_QUOTA = parse_size(environment_default(SANDBOX_QUOTA_ENV))


def tool_memory_limit() -> int | None:
    """The per-trial memory budget in bytes from ``MLTB_TOOL_MEMORY_LIMIT`` (None: no budget)."""
    return size_setting(MEMORY_LIMIT_ENV, read_environment(MEMORY_LIMIT_ENV), DEFAULT_TOOL_MEMORY)


def size_setting(name: str, value: str | None, default: int) -> int | None:
    """A size variable's ``value``: unset is ``default``; 0/off/none/unlimited is None (no limit)."""
    raw = (value or "").strip()
    if not raw:
        return default
    if raw.lower() in ("0", "off", "none", "unlimited"):
        return None
    try:
        return parse_size(raw) or None
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def sandbox_quota() -> int | None:
    """Bytes a trial's sandbox and scratch directory may hold, from ``MLTB_SANDBOX_QUOTA`` (None: no quota)."""
    return size_setting(SANDBOX_QUOTA_ENV, read_environment(SANDBOX_QUOTA_ENV), DEFAULT_SANDBOX_QUOTA)


def _mapped_bytes() -> int | None:
    """The process's current address-space size (VmSize), or None where /proc is unavailable."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


_process_budget: int | None = None   # the budget set_memory_budget applied in this process


def set_memory_budget(nbytes: int | None) -> int | None:
    """Cap this process's address space at its current size plus ``nbytes``, for the rest of its life.

    Called once by a trial's tool worker (see :mod:`mltb_core.runner.worker`) before any tool runs:
    the budget is the whole trial's, so objects a trial keeps on its scratchpad count against it
    across calls. Returns the cap in bytes (None: no budget, no ``resource`` module or no /proc).
    An existing tighter limit is kept.
    """
    global _process_budget
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    current = _mapped_bytes()
    if not nbytes or current is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = current + int(nbytes)
    for limit in (soft, hard):
        if limit != resource.RLIM_INFINITY:
            cap = min(cap, limit)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    _process_budget = int(nbytes)
    return cap


def _size_text(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.3g} MiB"


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` or an exception it was raised from/while handling is a ``kind``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def call_with_limits(func: Callable[..., Any], kwargs: dict[str, Any], seconds: float | None,
                     label: str = "tool") -> Any:
    """``func(**kwargs)`` under a wall-time limit (None: none), within the process's memory budget.

    Raises :class:`ToolTimeout` or :class:`ToolOutOfMemory` with a message the model can act on,
    also when the tool wrapped the MemoryError in an error of its own.
    """
    try:
        return call_with_time_limit(func, kwargs, seconds, label=label)
    except (ToolOutOfMemory, ToolTimeout):
        raise
    except Exception as exc:
        if not _caused_by(exc, MemoryError):
            raise
        budget = f" (the trial's memory budget is {_size_text(_process_budget)})" if _process_budget else ""
        raise ToolOutOfMemory(f"{label} ran out of memory{budget}; objects kept on the scratchpad count too. "
                              "Try a cheaper call (fewer rows or columns, fewer levels to encode, a smaller "
                              "model)") from exc


def call_with_time_limit(func: Callable[..., Any], kwargs: dict[str, Any], seconds: float | None,
                         label: str = "tool") -> Any:
    """``func(**kwargs)``, raising :class:`ToolTimeout` after ``seconds`` (main thread only; None: no limit).

    A tool that catches the timeout (a broad ``except`` that wraps or ignores it) still ends in
    ToolTimeout: the limit is a fact about the call, not an exception the tool may handle.
    """
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        return func(**kwargs)
    message = (f"{label} exceeded its {seconds:g} s time limit; try a cheaper call "
               "(fewer rows/columns, fewer estimators, a smaller grid)")
    fired = threading.Event()

    def on_alarm(signum: int, frame: FrameType | None) -> NoReturn:  # noqa: ARG001
        fired.set()
        raise ToolTimeout(message)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    # The alarm repeats every ALARM_REPEAT seconds after the first: code that swallows the first
    # ToolTimeout (an ``except OSError`` in an import, a native library that checks signals only at
    # some points) meets it again instead of running on for ever.
    signal.setitimer(signal.ITIMER_REAL, seconds, ALARM_REPEAT)
    try:
        result = func(**kwargs)
    except ToolTimeout:
        raise
    except BaseException as exc:
        # Native libraries re-raise our alarm their own way (CatBoost turns it into KeyboardInterrupt):
        # whatever comes out after the alarm fired is the timeout. A KeyboardInterrupt without our
        # alarm is a real Ctrl-C and propagates.
        if fired.is_set():
            raise ToolTimeout(message) from exc
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if fired.is_set():
        raise ToolTimeout(message)
    return result


_thread_count = 1


def thread_count() -> int:
    """Threads a tool may use (model ``n_jobs``/``thread_count``)."""
    return _thread_count


@contextlib.contextmanager
def limit_threads(n: int) -> Iterator[None]:
    """Cap native thread pools at ``n`` so parallel trials don't oversubscribe cores."""
    global _thread_count
    from threadpoolctl import threadpool_limits

    old = _thread_count
    _thread_count = max(1, int(n))
    try:
        with threadpool_limits(limits=_thread_count):
            yield
    finally:
        _thread_count = old

