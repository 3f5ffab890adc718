"""`--perfguard-timeout`: the most one perf item may take, all its phases together.

A model that hangs (in its build, a compile, warm-up or sampling) would otherwise hold the
runner until the job's own limit, and a cancelled job measured nothing after it. Past its
limit the item is ended: it fails with a line naming the limit, its result is an error, the
run records it as a gap, and the session goes on with the next item.

Two layers keep the limit, whatever the item runs:
- in the measuring process, a timer thread sends the main thread a signal of perfguard's own
  (a real-time signal; not SIGALRM, which pytest-timeout and others own) at the limit, and its
  handler raises `ItemTimeout`: that ends Python code and any call that returns to Python.
  Each attempt of an item gets the whole limit (pytest-rerunfailures runs an item again);
  an A/B worker holds it still while it waits for its driver (`paused`), so its limit counts
  its own work;
- outside it, a supervisor (`perfguard.watchdog` for a session the user started, the A/B
  driver for its workers) ends the process when the item has not ended a grace after its
  limit: a loop in native code, a kernel or a collective that never returns. The watchdog
  first writes what the session had measured (the results file and the report, the hung item
  a gap), then ends it.

The same limit bounds importing each test module: a hang there is a collection error naming
the module, or, in native code, the watchdog's gap.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from perfguard.pytest_plugin.marker import settings_of

SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
"""perfguard's own signal: no other plugin times with it."""


class ItemTimeout(BaseException):
    """An item past its time limit. A BaseException: no `except Exception` on the way (a
    model's failure made into its error result, a reference given up) may take it for the
    model's own error and carry on past the limit."""


def message(seconds: float) -> str:
    return f"ended at its time limit of {seconds:g} s (--perfguard-timeout, marker key timeout_s)"


def import_message(seconds: float) -> str:
    return f"importing it ended at the import limit of {seconds:g} s (--perfguard-import-timeout)"


def limit_of(item: pytest.Item, default: float) -> float:
    """The item's limit: its marker's `timeout_s` (checked where the marker was read), else
    the session's."""
    settings = settings_of(item)
    return default if settings is None else settings.timeout_s


class _Alarm:
    """One per process: a deadline, kept by a thread, that signals the main thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._left: float | None = None  # paused with this much left
        self._on_expiry: Callable[[], None] | None = None
        self._fired = False
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, on_expiry: Callable[[], None]) -> None:
        with self._cond:
            self._deadline = time.monotonic() + seconds
            self._left, self._on_expiry, self._fired = None, on_expiry, False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="perfguard-timeout", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = self._left = self._on_expiry = None
            self._cond.notify()

    def pause(self) -> bool:
        """Hold the deadline still; whether one was running."""
        with self._cond:
            if self._deadline is None:
                return False
            self._left = max(self._deadline - time.monotonic(), 0.0)
            self._deadline = None
            return True

    def remaining(self) -> float | None:
        """Seconds the running (or paused) item has left; None: no limit is kept."""
        with self._cond:
            if self._deadline is not None:
                return max(self._deadline - time.monotonic(), 0.0)
            return self._left

    def resume(self) -> None:
        with self._cond:
            if self._left is not None:
                self._deadline = time.monotonic() + self._left
                self._left = None
                self._cond.notify()

    def _run(self) -> None:
        main = threading.main_thread().ident
        while True:
            with self._cond:
                while self._deadline is None:
                    self._cond.wait()
                wait = self._deadline - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._deadline = None
                self._fired = True
            if main is not None:
                signal.pthread_kill(main, SIGNAL)

    def expire(self) -> None:
        """In the main thread, at the signal: end the item, if its limit is what fired (a
        signal that comes after its item ended is let go)."""
        with self._cond:
            fired, on_expiry = self._fired, self._on_expiry
            self._fired = False
        if fired and on_expiry is not None:
            on_expiry()


_ALARM = _Alarm()
_INSTALLED: list[bool] = []


def _handler(_signum: int, _frame: Any) -> None:
    _ALARM.expire()


def _usable() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_kill")


def begin(
    seconds: float, expired: Callable[[], None], said: Callable[[float], str] = message
) -> None:
    """From now, raise ItemTimeout (its text `said(seconds)`) in the main thread once
    `seconds` have passed (`expired` is called first), until `end`. Outside the main
    thread, or where threads cannot be signalled, nothing is kept."""
    if not _usable():
        return
    if not _INSTALLED:  # once, for the process: a late signal finds a handler that lets it go
        signal.signal(SIGNAL, _handler)
        _INSTALLED.append(True)

    def on_expiry() -> None:
        expired()
        raise ItemTimeout(said(seconds))

    _ALARM.arm(seconds, on_expiry)


def remaining() -> float | None:
    """Seconds the current item has left before its limit (None: none is kept here)."""
    return _ALARM.remaining() if _usable() else None


def end() -> None:
    if _usable():
        _ALARM.disarm()


@contextlib.contextmanager
def time_limit(seconds: float, expired: Callable[[], None]) -> Iterator[None]:
    """The block within `seconds` (`begin`, `end`)."""
    begin(seconds, expired)
    try:
        yield
    finally:
        end()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """An item's limit held still while the block runs: an A/B worker waiting for its
    driver's word (its turn, the next block) is not the item's own time, and an expiry in
    the middle of reading the driver's message would break their connection."""
    if not _usable():
        yield
        return
    running = _ALARM.pause()
    try:
        yield
    finally:
        if running:
            _ALARM.resume()
