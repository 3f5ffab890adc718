"""One plugin object per kind of session, each registering only the hooks of its role.

`pytest_configure` registers exactly one:
- `Skipping`: without `--perfguard`, perf items are skipped with the reason;
- `Measuring`: the session the user started measures each perf item here;
- `AbDriving`: `--perfguard-ab`: the same, but two worker sessions (the base's worktree and
  this tree) run the perf tests, interleaved, and this session drives them;
- `AbWorker`: a worker of an A/B driver: it runs the items the driver asks for, when asked;
- `Counting`: a session under callgrind counting instructions for a measuring session.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard import PerfguardWarning
from perfguard.pytest_plugin.ab import session as ab_session
from perfguard.pytest_plugin.ab.protocol import Collected, Ended
from perfguard.pytest_plugin.benchmark_bridge import result_from_benchmark
from perfguard.pytest_plugin.collection import SKIP_REASON, shard_items, test_id, variant_of
from perfguard.pytest_plugin.finish import finish_session, terminal_summary
from perfguard.pytest_plugin.fixture import PerfguardFixture
from perfguard.pytest_plugin.gaps import first_line
from perfguard.pytest_plugin.selection import select
from perfguard.pytest_plugin.state import SessionState
from perfguard.pytest_plugin.timeout import limit_of, time_limit
from perfguard.pytest_plugin.timeout import message as timeout_message
from perfguard.records import VariantResult

if TYPE_CHECKING:
    from perfguard.pytest_plugin.ab.session import AbSession


def role_for(state: SessionState) -> object:
    """The plugin object of this session's role."""
    if not state.options.enabled:
        return Skipping()
    if state.worker is not None:
        return AbWorker(state)
    if state.counting is not None:
        return Counting(state)
    if state.options.ab is not None:
        return AbDriving(state)
    return Measuring(state)


class Skipping:
    """Without `--perfguard`: perf items are collected, and skipped with the reason."""

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        skip = pytest.mark.skip(reason=SKIP_REASON)
        for item in items:
            if variant_of(item) is not None:
                item.add_marker(skip)


class Counting:
    """Under callgrind, for a measuring session: its shard's items, counted; nothing else
    (no runner health, no comparison: the measuring session keeps the figures)."""

    def __init__(self, state: SessionState) -> None:
        self.state = state

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        _keep_shard(self.state, config, items)


class Measuring:
    """The session the user started, measuring each perf item in this process."""

    def __init__(self, state: SessionState) -> None:
        self.state = state

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """A pull request's partial run first (every shard selects alike), then the shard."""
        select(self.state, config, items)
        _keep_shard(self.state, config, items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        """A perf item within its time limit (`--perfguard-timeout`); one past it is an
        error result naming the limit, and the session goes on."""
        yield from _within_limit(self.state, item, record=True)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _tally_end(self.state, report)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        """Every perf item of this tree, before -k, -m or sharding chose: in A/B, a base test
        this tree lacks is one it deleted, not one deselected here."""
        variant = variant_of(item)
        if variant is not None:
            self.state.tally.collected.add((test_id(item, variant), variant))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Note the perf items to measure (after -k, -m and sharding have chosen); start the
        runner health monitor once there is something to measure."""
        self.state.tally.expected = [i.nodeid for i in session.items if variant_of(i) is not None]
        if session.items:
            self.start(session)

    def start(self, session: pytest.Session) -> None:
        from perfguard.health import Monitor, compute_mode

        state = self.state
        device = state.options.device
        if device == "auto":
            device = "cuda" if self.cuda_available() else "cpu"
        gpu = None
        if device.startswith("cuda"):
            from perfguard.environment import cuda_gpu_id
            from perfguard.health import EXCLUSIVE_PROCESS

            gpu = cuda_gpu_id(int(device.partition(":")[2] or 0))
            state.exclusive_gpu = compute_mode(gpu) == EXCLUSIVE_PROCESS
        self.check_device()
        from perfguard.measure.sampling import TIMED

        state.monitor = Monitor(device.partition(":")[0], gpu=gpu, timed=TIMED.is_set)
        state.monitor.start()

    def cuda_available(self) -> bool:
        """Whether `auto` means CUDA here (this imports torch)."""
        import torch

        return bool(torch.cuda.is_available())

    def check_device(self) -> None:
        """What this role needs of the device, before the monitor starts."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        outcome = yield
        fixture = getattr(item, "funcargs", {}).get("perfguard")
        unused = isinstance(fixture, PerfguardFixture) and fixture.result is None
        if unused and outcome.excinfo is None:
            self.state.tally.unused.add(item.nodeid)  # a gap of the run, as well as a warning
            warnings.warn(
                PerfguardWarning(
                    f"{item.nodeid} uses the perfguard fixture but never called "
                    "perfguard.run(model, inputs) or perfguard.train_step(...): nothing was "
                    "measured. Call one, or drop the "
                    "fixture"
                ),
                stacklevel=1,
            )
        bench = getattr(item, "funcargs", {}).get("benchmark")
        if bench is not None and outcome.excinfo is None:
            result = result_from_benchmark(item.nodeid, bench)
            if result is not None:
                self.state.record(result, item.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        finish_session(session, self.state, exitstatus)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        terminal_summary(terminalreporter, config)


class AbDriving(Measuring):
    """`--perfguard-ab`: the workers run each perf item, the base's and this tree's,
    interleaved; this session drives them and compares the pairs."""

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The workers start now, before this session collects: importing torch and
        collecting the suite take seconds, in each of the three processes at once. (Where a
        test path lies outside the rootdir, they start once this session has collected.)"""
        config = session.config
        paths = ab_session.session_paths(config)
        if paths is None or config.option.collectonly:
            return
        self.state.ab = ab_session.start(Path(config.rootpath), self.state.options, None, paths)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        ab = self.state.ab
        if ab is not None and not any(variant_of(i) is not None for i in session.items):
            self.state.ab = None  # nothing for the workers to run
            ab.close()
        super().pytest_collection_finish(session)

    def start(self, session: pytest.Session) -> None:
        perf_items = [i.nodeid for i in session.items if variant_of(i) is not None]
        if perf_items and self.state.ab is not None:
            self.state.ab.items = perf_items  # sent to the workers when they are connected
        elif perf_items:
            # first: its workers start (import torch, collect) while this session does
            root = Path(session.config.rootpath)
            self.state.ab = ab_session.start(root, self.state.options, perf_items)
        super().start(session)

    def cuda_available(self) -> bool:
        """Asked of the workers, which import torch anyway: this session measures nothing
        and need not import it (1-2 s of CPU while both workers start)."""
        ab = self.state.ab
        if ab is not None:
            ab.driver.connect(ab.items, self.state.progress.note)
            if (cuda := ab.driver.cuda) is not None:
                return cuda
        return super().cuda_available()

    def check_device(self) -> None:
        from perfguard.health import EXCLUSIVE_ADVICE

        if self.state.ab is not None and self.state.exclusive_gpu:
            self.state.ab.close(interrupted=True)
            self.state.ab = None
            raise pytest.UsageError(f"--perfguard-ab: {EXCLUSIVE_ADVICE}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """The workers run the perf test; this session does not."""
        variant = variant_of(pyfuncitem)
        if self.state.ab is None or variant is None:
            return None
        limit = limit_of(pyfuncitem, self.state.options.timeout_s)
        test = test_id(pyfuncitem, variant)
        self.run_item(self.state.ab, pyfuncitem.nodeid, test, variant, limit)
        return True

    def run_item(
        self, ab: AbSession, nodeid: str, test: str, variant: str, limit: float | None = None
    ) -> None:
        """Measure one perf item in both trees; this item passes or fails as the head's does."""
        from perfguard.pytest_plugin.ab.driver import Design
        from perfguard.stats.latency import ab_bar
        from perfguard.stats.verdicts import LATENCY_METRICS

        state = self.state
        state.progress.start(nodeid)
        position = ab.items.index(nodeid) if nodeid in ab.items else 0
        th = ab_session.guarded(state.thresholds(), ab).for_test(test)
        # the run's correction shares each p-value with every latency comparison of the run
        tests = max(len(ab.items), 1) * len(LATENCY_METRICS)
        # the stop waits for the median alone (`perfguard.stats.sequential.METRICS`)
        design = Design(
            alpha=th.alpha,
            bar_pct=ab_bar("latency_p50_ms", th),
            tests=tests,
            margin_pct=th.min_change_pct,
        )
        base, head, pairing = ab.driver.measure(
            nodeid, ab.items[position:], state.progress, design, limit_s=limit
        )
        if (
            limit is not None
            and head.outcome in ("failed", "crashed")
            and "time limit" in (head.message)
        ):
            state.tally.timed_out[nodeid] = limit
        base_result = ab_session.base_result(base, test, variant)
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

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        if self.state.ab is not None:
            yield  # the workers called the test: nothing of it is here to look at
            return
        yield from super().pytest_runtest_call(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        if self.state.ab is not None:
            yield  # the workers keep the limit; the driver stops waiting past it
            return
        yield from super().pytest_runtest_protocol(item)


class AbWorker:
    """A worker of an A/B driver: only the driver's items, in its order, each when asked;
    it tells the driver how each ended."""

    def __init__(self, state: SessionState) -> None:
        assert state.worker is not None
        self.state = state
        self.link = state.worker

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        try:  # while the driver gets ready
            from perfguard.measure.isolation import preload

            cuda: bool | None = preload()
        except Exception:  # torch did not import: each item that needs it says why
            cuda = None
        rank = {nodeid: i for i, nodeid in enumerate(self.link.items)}
        kept = sorted((i for i in items if i.nodeid in rank), key=lambda i: rank[i.nodeid])
        dropped = [i for i in items if i.nodeid not in rank]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        others = tuple((test_id(i, v), v) for i in dropped if (v := variant_of(i)) is not None)
        errors = tuple(f"{where}: {line}" for where, line in self.state.tally.collection)
        rules = self.state.thresholds().to_json()  # its tree's markers: the base's bar
        self.link.send(Collected(tuple(i.nodeid for i in kept), cuda, errors, others, rules))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Block until the driver lets this item run; skip it when the driver does not."""
        from perfguard.pytest_plugin.ab.worker import DriverGoneError

        if variant_of(item) is None:
            return
        try:
            go = self.link.may_start(item.nodeid)
        except DriverGoneError as exc:
            pytest.exit(str(exc), returncode=0)
        if not go:
            pytest.skip("not run in this A/B session")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        yield from _within_limit(self.state, item, record=False)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, None]:
        outcome = yield
        if variant_of(item) is not None:
            self.report_end(outcome.get_result())

    def report_end(self, report: pytest.TestReport) -> None:
        """Tell the driver how the item ended (after its call, or a setup that did not pass)."""
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        if report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        else:
            lines = report.longreprtext.strip().splitlines()
            errors = [line[1:].strip() for line in lines if line.startswith("E ")]
            message = " ".join(errors[:2]) if errors else (lines[-1] if lines else "")
        # when the driver is gone, the next item's setup ends the session
        with contextlib.suppress(OSError):
            self.link.send(Ended(report.nodeid, report.outcome, message))

    def pytest_sessionfinish(self) -> None:
        self.link.close()


def _within_limit(
    state: SessionState, item: pytest.Item, *, record: bool
) -> Generator[None, Any, None]:
    """Run a perf item's protocol within its time limit. `record`: an item that ran out of
    time without a result gets an error result naming the limit (a worker's driver records
    the item itself)."""
    variant = variant_of(item)
    if variant is None:
        yield
        return
    limit = limit_of(item, state.options.timeout_s)

    def expired() -> None:
        state.tally.timed_out[item.nodeid] = limit

    with time_limit(limit, expired):
        yield
    if record and item.nodeid in state.tally.timed_out:
        key = (test_id(item, variant), variant)
        if state.nodeids.get(key) != item.nodeid:  # ended before it had a result
            error = VariantResult(
                test=key[0], variant=variant, status="error", error=timeout_message(limit)
            )
            state.record(error, item.nodeid)


def _tally_end(state: SessionState, report: pytest.TestReport) -> None:
    """How a perf item ended: its call, or the first phase that did not pass."""
    if report.when == "call" or report.outcome != "passed":
        state.tally.ended_as(report.nodeid, report.outcome, first_line(report))


def _keep_shard(state: SessionState, config: pytest.Config, items: list[pytest.Item]) -> None:
    if state.options.shard is not None:
        kept, dropped = shard_items(items, *state.options.shard)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
