"""`--perfguard-timeout`: the most one perf item may take, all its phases together.

A model that hangs (in its build, a compile, warm-up or sampling) would otherwise hold the
runner until the job's own limit, and a cancelled job measured nothing after it. Past its
limit the item is ended: it fails with a line naming the limit, its result is an error,
the run records it as a gap, and the session goes on with the next item. The alarm is
SIGALRM in the measuring process's main thread, which ends Python code and any call that
returns to Python; an A/B worker holds it still while it waits for its driver (`paused`), so
its limit counts its own work; the driver also stops waiting for a worker past the limit
(and a grace), and kills it (`ab/side.py`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from perfguard.pytest_plugin.marker import settings_of


class ItemTimeout(BaseException):
    """An item past its time limit. A BaseException: no `except Exception` on the way (a
    model's failure made into its error result, a reference given up) may take it for the
    model's own error and carry on past the limit."""


def message(seconds: float) -> str:
    return f"ended at its time limit of {seconds:g} s (--perfguard-timeout, marker key timeout_s)"


def limit_of(item: pytest.Item, default: float) -> float:
    """The item's limit: its marker's `timeout_s` (checked where the marker was read), else
    the session's."""
    settings = settings_of(item)
    return default if settings is None else settings.timeout_s


@contextlib.contextmanager
def time_limit(seconds: float, expired: Callable[[], None]) -> Iterator[None]:
    """Raise ItemTimeout in this thread once `seconds` have passed (`expired` is called
    first). Outside the main thread, or where there is no SIGALRM, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def expire(_signum: int, _frame: Any) -> None:
        expired()
        raise ItemTimeout(message(seconds))

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """An item's alarm held still while the block runs: an A/B worker waiting for its
    driver's word (its turn, the next block) is not the item's own time, and an alarm in the
    middle of reading the driver's message would break their connection."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return
    left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left)
