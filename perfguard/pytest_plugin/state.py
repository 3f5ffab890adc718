"""What every role of a measuring session shares (kept in `config.stash`).

The options, the progress lines, the plan (made once after collection: `perfguard.plan`),
the results measured so far (`Ledger`), how each perf item fared (`Tally`), the environment
measured on, and the lines for the terminal summary. Whatever one role alone writes (the A/B
session, a worker's link to its driver, the health monitor, the watchdog, the recording) is
that role's own (`roles`, `ab/roles`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfguard.pytest_plugin.gaps import Tally
from perfguard.pytest_plugin.options import Options
from perfguard.pytest_plugin.progress import ProgressWriter
from perfguard.records import VariantResult

if TYPE_CHECKING:
    from perfguard.plan import Plan


@dataclass
class Ledger:
    """The results a session measured, each with the item that measured it and when."""

    results: list[VariantResult] = field(default_factory=list)
    nodeids: dict[tuple[str, str], str] = field(default_factory=dict)  # result key -> item
    measured_at: dict[str, float] = field(default_factory=dict)  # item -> time.monotonic()
    # told of each result as it is recorded (a watchdog keeps it past a native hang)
    listeners: list[Callable[[VariantResult], None]] = field(default_factory=list)

    def result_of(self, key: tuple[str, str]) -> VariantResult | None:
        return next((r for r in self.results if r.key == key), None)

    def record(self, result: VariantResult, nodeid: str) -> None:
        self.results = [r for r in self.results if r.key != result.key]
        self.results.append(result)
        self.nodeids[result.key] = nodeid
        self.measured_at[nodeid] = time.monotonic()
        for listener in self.listeners:
            listener(result)


@dataclass
class SessionState:
    """See the module's docstring."""

    options: Options
    progress: ProgressWriter
    root: Path = field(default_factory=Path.cwd)  # the session's rootdir
    plan: Plan | None = None  # made once, right after collection
    ledger: Ledger = field(default_factory=Ledger)
    tally: Tally = field(default_factory=Tally)  # what it was asked to measure, and how it fared
    environment: dict[str, Any] | None = None  # what it measures on
    notes: list[str] = field(default_factory=list)  # lines for the terminal summary
    started: float = field(default_factory=time.monotonic)  # the run's cost counts from here

    def record(self, result: VariantResult, nodeid: str) -> None:
        """Keep an item's result (an attempt that measured clears its time-out: a rerun)."""
        self.ledger.record(result, nodeid)
        if result.status == "ok":
            self.tally.timed_out.pop(nodeid, None)

    @property
    def planned(self) -> Plan:
        """The plan (an item is measured only after collection made it)."""
        if self.plan is None:
            raise RuntimeError("the session's plan is made after collection")
        return self.plan
