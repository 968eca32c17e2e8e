"""What a running trial reports as it goes, for a front end to show: after each LLM request, the calls
made, the budget, the furthest stage reached and the time since the search started.

A front end listens around one trial with :func:`listening`; the episode calls :func:`report`. A trial runs
in one thread, so a ContextVar holds the listener: trials in other threads or processes are not heard.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["TrialProgress", "listening", "report"]


@dataclass(frozen=True)
class TrialProgress:
    llm_calls: int
    max_llm_calls: int | None     # None: no call budget
    stage: int                    # furthest stage reached so far (stages/specs.py)
    elapsed: float                # seconds since the search started


_LISTENER: ContextVar[Callable[[TrialProgress], None] | None] = ContextVar("mltb_trial_progress", default=None)


@contextmanager
def listening(callback: Callable[[TrialProgress], None]) -> Iterator[None]:
    """Call ``callback`` with every :class:`TrialProgress` reported in this context."""
    token = _LISTENER.set(callback)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def report(progress: TrialProgress) -> None:
    listener = _LISTENER.get()
    if listener is not None:
        listener(progress)
