"""Progress lines while measuring, written past pytest's output capture."""

from __future__ import annotations

import time
from typing import Any

import pytest

MAIN_PHASES = ("eager reference", "compiling", "warming up", "sampling (repeat 1/")
"""What `auto` shows; `yes` shows every phase (each repeat, memory, drift)."""


class ProgressWriter:
    """Writes `[perfguard] <item>: <phase>` lines where pytest shows output.

    pytest captures output during a test, so lines go through the terminal reporter with
    capture suspended, the way pytest's live logging does. `mode`: auto (on unless -q -q
    or output is not shown), yes, no.
    """

    def __init__(self, config: pytest.Config, mode: str) -> None:
        self._config = config
        verbose = config.get_verbosity()
        self._on = mode == "yes" or (mode == "auto" and verbose > -2)
        self._mode = mode
        self._item = ""
        self._start = time.monotonic()

    def start(self, item: str) -> None:
        self._item = item
        self._start = time.monotonic()

    def __call__(self, phase: str) -> None:
        if not self._on:
            return
        if self._mode == "auto" and not phase.startswith(MAIN_PHASES):
            return
        elapsed = time.monotonic() - self._start
        self._write(f"[perfguard] {self._item}: {phase} ({elapsed:.1f}s)")

    def note(self, text: str) -> None:
        """A line about the session rather than one item (shown unless progress is off)."""
        if self._on:
            self._write(f"[perfguard] {text}")

    def _write(self, line: str) -> None:
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capman = self._config.pluginmanager.get_plugin("capturemanager")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                _write_line(reporter, line)
        else:
            _write_line(reporter, line)


def _write_line(reporter: Any, line: str) -> None:
    """A line of its own, also after pytest's progress dots (`[100%]` ends no line)."""
    reporter.ensure_newline()
    writer = getattr(reporter, "_tw", None)
    if writer is not None and getattr(writer, "width_of_current_line", False):
        reporter.write("\n")
    reporter.write_line(line)
