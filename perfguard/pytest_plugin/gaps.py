"""What a session was asked to measure and did not, tallied as it runs.

The session notes each module that failed to collect, how each perf item ended, the items
it ended for their time limit, and a signal that stopped it; at its end the perf items
without a result become the run's gaps (`perfguard.records.gaps`), each with why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from perfguard.records.gaps import Gap, deleted_gap

NEVER_CALLED = "it never called perfguard.run, train_step or generate"


@dataclass
class Tally:
    """How the session's perf items fared, as pytest reported them."""

    expected: list[str] = field(default_factory=list)  # perf items this session runs
    collection: list[tuple[str, str]] = field(default_factory=list)  # (where, first line)
    ended: dict[str, tuple[str, str]] = field(default_factory=dict)  # item -> (outcome, line)
    unused: set[str] = field(default_factory=set)  # passed without measuring anything
    timed_out: dict[str, float] = field(default_factory=dict)  # item -> its limit (s)
    base_failure: str | None = None  # same-job A/B: why the base tree failed as a whole
    # A/B: items this tree measured and the base tree had but could not measure (failed,
    # crashed, past its time limit): item -> the base's error
    base_errors: dict[str, str] = field(default_factory=dict)
    collected: set[tuple[str, str]] = field(default_factory=set)  # (test, variant), before -k
    deleted: tuple[tuple[str, str], ...] = ()  # A/B: the base's perf tests this tree lacks

    def ended_as(self, nodeid: str, outcome: str, line: str) -> None:
        """An item's end (the first phase that did not pass, or its call)."""
        if nodeid not in self.ended or self.ended[nodeid][0] == "passed":
            self.ended[nodeid] = (outcome, line)

    def gaps(
        self, measured: Iterable[str], interrupted: bool, signal: str | None = None
    ) -> list[Gap]:
        """The run's gaps: what was asked and not measured, and why. `signal`: the one
        that stopped the session (SIGTERM), if any."""
        found: list[Gap] = []
        if self.collection:
            found.append(
                Gap(
                    kind="collection_error",
                    detail=f"{len(self.collection)} test module(s) did not collect, so none "
                    f"of their perf items ran ({self.collection[0][0]}: "
                    f"{self.collection[0][1]})",
                    items=tuple(where for where, _ in self.collection),
                )
            )
        if self.base_failure:
            found.append(Gap(kind="base_failed", detail=self.base_failure))
        elif self.base_errors:
            first, why = next(iter(self.base_errors.items()))
            found.append(
                Gap(
                    kind="base_failed",
                    detail=f"the base tree could not measure {len(self.base_errors)} perf "
                    f"item(s) this tree measured, so they are not compared (the first, "
                    f"{first}: {why})",
                    items=tuple(self.base_errors),
                )
            )
        if self.deleted:
            found.append(deleted_gap(self.deleted))
        if self.timed_out:
            limits = sorted(set(self.timed_out.values()))
            found.append(
                Gap(
                    kind="timeout",
                    detail=f"ended at their time limit ({', '.join(f'{s:g} s' for s in limits)}, "
                    "--perfguard-timeout)",
                    items=tuple(self.timed_out),
                )
            )
        found.extend(self._unmeasured(set(measured), interrupted, signal))
        return found

    def _unmeasured(self, done: set[str], interrupted: bool, signal: str | None) -> list[Gap]:
        """The perf items without a result, by why: failed, measured nothing, not reached."""
        found: list[Gap] = []
        missing = [
            n
            for n in self.expected
            if n not in done
            and n not in self.timed_out
            and self.ended.get(n, ("",))[0] != "skipped"
        ]
        failed = [n for n in missing if n in self.ended and n not in self.unused]
        unused = [n for n in missing if n in self.unused]
        unreached = [n for n in missing if n not in self.ended]
        if failed:
            first = self.ended[failed[0]][1]
            found.append(
                Gap(
                    kind="not_measured",
                    detail=f"{len(failed)} perf item(s) failed before measuring ({first})",
                    items=tuple(failed),
                )
            )
        if unused:
            found.append(
                Gap(
                    kind="not_measured",
                    detail=f"{len(unused)} perf item(s) passed without measuring: {NEVER_CALLED}",
                    items=tuple(unused),
                )
            )
        # (pytest also says "interrupted" when collection errors stopped it: that gap is said)
        if signal or (interrupted and not self.collection):
            how = signal or "an interrupt"
            found.append(
                Gap(
                    kind="interrupted",
                    detail=f"the session was stopped ({how}) with {len(unreached)} of "
                    f"{len(self.expected)} perf item(s) not measured",
                    items=tuple(unreached),
                )
            )
        elif unreached:
            found.append(
                Gap(
                    kind="not_measured",
                    detail=f"{len(unreached)} perf item(s) never ran",
                    items=tuple(unreached),
                )
            )
        return found


def first_line(report: Any) -> str:
    """A report's one line: the `E` lines of its traceback, or its last line."""
    if getattr(report, "skipped", False) and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    lines = str(getattr(report, "longreprtext", "") or "").strip().splitlines()
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return " ".join(errors[:2]) if errors else (lines[-1] if lines else "")
