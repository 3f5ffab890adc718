"""pytest glue of same-job A/B (`--perfguard-ab`), both ends.

The driving session (the one the user started) checks the base revision out as a worktree
and, instead of calling each perf test itself, has the two workers run it (see
`perfguard.ab.driver`). A worker session (started by the driver) runs only the items it is
given, in the driver's order, each when the driver says so, and reports back.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.records import VariantResult

if TYPE_CHECKING:
    from perfguard.ab.driver import Driver, SideOutcome
    from perfguard.ab.worker import WorkerLink
    from perfguard.ab.worktree import Worktree
    from perfguard.pytest_plugin.fixture import SessionState
    from perfguard.pytest_plugin.options import Options


AB_REPEAT_FACTOR = 2
"""A/B splits the same budget into twice the blocks: the paired test gains more from pairs
than from long blocks, and a burst of load on the host then spoils a smaller share of them
(5 pairs left +10% at 83% detection in the study; see the README)."""


@dataclass
class AbSession:
    driver: Driver
    worktree: Worktree
    commit: str
    reason: str
    items: list[str]  # the perf items' node ids, in the order this session runs them
    base_results: list[VariantResult] = field(default_factory=list)
    base_environment: dict[str, Any] | None = None
    previous_sigterm: Any = None  # the SIGTERM handler before this session's

    def close(
        self, *, interrupted: bool = False, before_removal: Callable[[], None] | None = None
    ) -> None:
        """Stop the workers and remove the worktree (`before_removal` runs between)."""
        try:
            self.driver.close(at_once=interrupted)
            if before_removal is not None:
                before_removal()
            self.worktree.remove()
        finally:
            if self.previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self.previous_sigterm)
                self.previous_sigterm = None


def _interrupt_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (a cancelled CI job, `kill`) unwinds the session like Ctrl-C, so that the
    workers are stopped and the worktree removed on the way out."""
    raise KeyboardInterrupt(f"signal {signum}")


def worker_args(options: Options, rootdir: Path) -> list[str]:
    """The pytest command line of a worker: the measuring settings of this session."""
    return [
        *options.measuring_args(rootdir, AB_REPEAT_FACTOR * options.repeats),
        "--continue-on-collection-errors",
    ]


def start(root: Path, options: Options, items: list[str]) -> AbSession:
    """Find REF, check it out, prepare the driver. A usage error says what went wrong."""
    from perfguard.ab.driver import Driver
    from perfguard.ab.worktree import Worktree
    from perfguard.git import GitError, ab_reference, resolve
    from perfguard.pytest_plugin.fixture import trace_dir
    from perfguard.store.baselines import BaselineStore

    ref = options.ab or "auto"
    try:
        if ref == "auto":
            machine = options.machine
            store = BaselineStore(options.baseline_dir)
            choice = ab_reference(
                root,
                (lambda sha: store.has(machine, sha)) if machine else (lambda _sha: False),
                main_branch=options.main_branch,
                depth=options.baseline_depth,
            )
            if choice.commit is None:
                raise GitError(choice.reason)
            commit, reason = choice.commit, f"same-job A/B against {choice.reason}"
        else:
            commit = resolve(root, ref)
            reason = f"same-job A/B against --perfguard-ab={ref} ({commit[:10]})"
        worktree = Worktree(root, commit)
    except GitError as exc:
        raise pytest.UsageError(f"--perfguard-ab: {exc}") from None
    driver = Driver(
        worktree.rootdir,
        f"base {commit[:10]}",
        root,
        lambda rootdir: worker_args(options, rootdir),
        seed=options.seed,
        traces=trace_dir(options),
    )
    driver.launch_both(items)  # they get ready while this session does
    session = AbSession(driver, worktree, commit, reason, items)
    if threading.current_thread() is threading.main_thread():
        session.previous_sigterm = signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    return session


def _base_result(outcome: SideOutcome, test: str, variant: str) -> VariantResult | None:
    """The base side's result; a failure there becomes an error or skipped result."""
    if outcome.result is not None:
        return outcome.result
    if outcome.outcome == "absent":
        return None  # the test is new: every verdict is `new`
    message = outcome.message or outcome.outcome
    if outcome.outcome == "skipped":
        return VariantResult(test=test, variant=variant, status="skipped", error=message)
    return VariantResult(test=test, variant=variant, status="error", error=message)


def run_item(ab: AbSession, state: SessionState, nodeid: str, test: str, variant: str) -> None:
    """Measure one perf item in both trees; this item passes or fails as the head's does."""
    state.progress.start(nodeid)
    from perfguard.ab.driver import Design
    from perfguard.stats.verdicts import LATENCY_METRICS, Thresholds

    position = ab.items.index(nodeid) if nodeid in ab.items else 0
    th = Thresholds(
        ab_min_change_pct=state.options.ab_min_change_pct, per_test=state.per_test_thresholds
    ).for_test(test)
    # the run's correction shares each p-value with every latency comparison of the run
    tests = max(len(ab.items), 1) * len(LATENCY_METRICS)
    design = Design(alpha=th.alpha, bar_pct=th.ab_min_change_pct, tests=tests)
    base, head, pairing = ab.driver.measure(nodeid, ab.items[position:], state.progress, design)
    base_result = _base_result(base, test, variant)
    if base_result is not None:
        ab.base_results = [r for r in ab.base_results if r.key != base_result.key]
        ab.base_results.append(base_result)
    ab.base_environment = ab.base_environment or base.environment
    if state.environment is None and head.environment:
        state.environment = head.environment
    if head.result is not None:
        details = replace(head.result.details, ab=pairing.to_json())
        state.record(replace(head.result, details=details), nodeid)
    if head.outcome == "passed":
        return
    if head.outcome == "skipped":
        pytest.skip(head.message)
    pytest.fail(f"{head.message or head.outcome} (this tree's A/B worker)", pytrace=False)


# --- the worker's end ------------------------------------------------------------------


def order_items(
    link: WorkerLink, items: list[pytest.Item]
) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(kept, deselected): only the driver's items, in the driver's order."""
    rank = {nodeid: i for i, nodeid in enumerate(link.items)}
    kept = sorted((i for i in items if i.nodeid in rank), key=lambda i: rank[i.nodeid])
    return kept, [i for i in items if i.nodeid not in rank]


def wait_turn(link: WorkerLink, item: pytest.Item) -> None:
    """Block until the driver lets this item run; skip it when the driver does not."""
    from perfguard.ab.worker import DriverGoneError

    try:
        go = link.may_start(item.nodeid)
    except DriverGoneError as exc:
        pytest.exit(str(exc), returncode=0)
    if not go:
        pytest.skip("not run in this A/B session")


def report_end(link: WorkerLink, report: pytest.TestReport) -> None:
    """Tell the driver how the item ended (after its call, or a setup that did not pass)."""
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    if report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2]).removeprefix("Skipped: ")
    else:
        lines = report.longreprtext.strip().splitlines()
        errors = [line[1:].strip() for line in lines if line.startswith("E ")]
        message = " ".join(errors[:2]) if errors else (lines[-1] if lines else "")
    # when the driver is gone, the next wait_turn ends the session
    with contextlib.suppress(OSError):
        link.send("ended", item=report.nodeid, outcome=report.outcome, message=message)
