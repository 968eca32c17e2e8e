"""Resource limits for tool calls and worker threads.

A tool call gets a wall-time limit (SIGALRM in the main thread, where pytest and
xdist run tests) so a runaway fit returns an error the model can read instead of
hanging the trial. Native code that never returns to Python is interrupted as
soon as it does; boosting tools also cap their own iterations.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ToolTimeout", "call_with_time_limit", "limit_threads", "THREAD_ENV_VARS"]

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


class ToolTimeout(TimeoutError):
    """A tool call ran past its wall-time limit."""


def call_with_time_limit(func: Callable[..., Any], kwargs: dict[str, Any], seconds: float | None,
                         label: str = "tool") -> Any:
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        return func(**kwargs)

    def on_alarm(signum, frame):  # noqa: ARG001
        raise ToolTimeout(f"{label} exceeded its {seconds:g} s time limit; try a cheaper call "
                          "(fewer rows/columns, fewer estimators, a smaller grid)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return func(**kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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


def default_threads() -> int:
    """One thread per process unless MLTB_THREADS says otherwise."""
    raw = os.environ.get("MLTB_THREADS", "1")
    try:
        return max(1, int(raw))
    except ValueError:
        raise ValueError(f"MLTB_THREADS must be a positive integer, got {raw!r}") from None
