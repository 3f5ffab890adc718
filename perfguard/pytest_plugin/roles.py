"""One plugin object per kind of session, each registering only the hooks of its role.

`pytest_configure` registers exactly one:
- `Skipping` (`skipping.py`): without `--perfguard`, perf items are skipped with the reason;
- `Measuring`: the session the user started measures each perf item here;
- `AbDriving` (`ab/roles.py`): `--perfguard-ab`: the same, but two worker sessions (the
  base's worktree and this tree) run the perf tests, interleaved, and this session drives them;
- `AbWorker` (`ab/roles.py`): a worker of an A/B driver: it runs the items the driver asks
  for, when asked;
- `Counting`: a session under callgrind counting instructions for a measuring session.

Each makes the session's plan right after collection (`planning`) and owns what it alone
writes: the health monitor and the watchdog the measuring session's, the A/B session its
driver's, the link to the driver its worker's, the regions to count the counting session's.
What the `perfguard` fixture asks of the session it measures in is a `Role`'s (`link`,
`counting`, `recording`, `references`).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.errors import PerfguardWarning
from perfguard.pytest_plugin import planning, timeout
from perfguard.pytest_plugin.benchmark_bridge import result_from_benchmark
from perfguard.pytest_plugin.collection import (
    measured_in_ab,
    shard_items,
    test_id,
    test_of,
    variant_of,
)
from perfguard.pytest_plugin.finish import Ending, finish_session, terminal_summary
from perfguard.pytest_plugin.fixture import PerfguardFixture
from perfguard.pytest_plugin.gaps import first_line
from perfguard.pytest_plugin.state import SessionState
from perfguard.pytest_plugin.timeout import limit_of
from perfguard.records import VariantResult

if TYPE_CHECKING:
    from perfguard.health import Monitor
    from perfguard.measure.callgrind import Regions
    from perfguard.measure.drift import Reference
    from perfguard.pytest_plugin.ab.worker import WorkerLink
    from perfguard.pytest_plugin.recording import Recording
    from perfguard.records.reach import Reach
    from perfguard.watchdog import Watchdog


def settle_heap() -> None:
    """Take what is alive once the tests are collected (torch, the test modules, what they
    imported: it lives as long as the session) out of the garbage collector's walks.

    Measuring collects garbage before it reads memory and after each variant, and each full
    collection walked every object of the process: 0.1-0.4 s, twice a variant, most of a
    small model's measurement (a run of 19 tiny tests: 9.1 s, 4.4 s with this). Garbage the
    tests make from here on is collected as before; a reference cycle among what was frozen
    that later becomes garbage is freed when the process ends."""
    import gc

    gc.collect()
    gc.freeze()


class Role:
    """What every role has: the session's shared state, and what the `perfguard` fixture
    asks of the session it measures in."""

    link: WorkerLink | None = None  # an A/B worker's link to its driver
    counting: tuple[tuple[str, ...], Regions] | None = None  # callgrind's regions to count

    def __init__(self, state: SessionState, recording: Recording | None = None) -> None:
        self.state = state
        self.recording = recording  # what each perf test runs, recorded in this process
        # the eager references of the tests measured last, by model (`fixture._reference`)
        self.references: OrderedDict[str, Reference] = OrderedDict()

    def measures_here(self) -> bool:
        """Whether this session runs its perf items itself (an A/B driver's workers do)."""
        return True

    def floor(self, nodeid: str) -> dict[str, Any]:
        """The item settings a perf item is measured with where this tree loosened the
        base's (the plan's floors)."""
        plan = self.state.plan
        return {} if plan is None else plan.floor(test_of(nodeid))

    def plan(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """The session's plan, made once its items are collected (and its selection
        applied)."""
        planning.make(self.state, config, items, self.state.environment)


class Counting(Role):
    """Under callgrind, for a measuring session: its shard's items, counted; nothing else
    (no runner health, no comparison: the measuring session keeps the figures)."""

    def __init__(self, state: SessionState, counting: tuple[tuple[str, ...], Regions]) -> None:
        super().__init__(state)
        self.counting = counting

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        keep_shard(self.state, config, items)


class Measuring(Role):
    """The session the user started, measuring each perf item in this process."""

    def __init__(
        self,
        state: SessionState,
        recording: Recording | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        super().__init__(state, recording)
        self.watchdog = watchdog  # the supervisor of a session the user started
        self.monitor: Monitor | None = None  # the runner's health while measuring
        self.exclusive_gpu = False  # EXCLUSIVE_PROCESS compute mode: no second process
        self.refused = False  # a usage error before anything ran
        if watchdog is not None:
            state.ledger.listeners.append(
                lambda result: watchdog.result(result.to_json(), state.environment)
            )

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """The plan, after `-k` and `-m` chose (what the user did not ask for is not listed
        as unaffected), and before the shard (every shard selects alike)."""
        self.plan(config, items)
        keep_shard(self.state, config, items)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, None]:
        """Each attempt of a perf item within its time limit (`--perfguard-timeout`), from
        its set-up to its teardown; one past it is an error result naming the limit, and the
        session goes on."""
        if self.measures_here():
            begin_item(self.state, item, self.watchdog)
        yield

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, None]:
        yield
        if self.measures_here():
            end_item(self.state, item, self.watchdog, record=True)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, None]:
        yield from within_import_limit(self.state, collector, self.watchdog)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tally_end(self.state, report)
        if report.when == "call" and report.failed:
            failed_after_measuring(self.state, report)

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
        try:
            refuse_benchmark_only(session.config, len(self.state.tally.expected))
        except pytest.UsageError:
            self.refused = True  # nothing was run: no results file, no gaps to say
            raise
        if session.items:
            self.start(session)
            if self.measures_here():
                settle_heap()

    def start(self, session: pytest.Session) -> None:
        from perfguard.health import Monitor, compute_mode

        state = self.state
        device = state.options.device
        if device == "auto":
            device = "cuda" if self.cuda_available() else "cpu"
        gpu = None
        if device.startswith("cuda"):
            self.check_cuda(device)
            from perfguard.environment import cuda_gpu_id
            from perfguard.health import EXCLUSIVE_PROCESS

            gpu = cuda_gpu_id(int(device.partition(":")[2] or 0))
            self.exclusive_gpu = compute_mode(gpu) == EXCLUSIVE_PROCESS
        self.check_device()
        from perfguard.measure.sampling import TIMED

        self.monitor = Monitor(device.partition(":")[0], gpu=gpu, timed=TIMED.is_set)
        self.monitor.start()

    def check_cuda(self, device: str) -> None:
        """A CUDA device asked for (`--perfguard-device`) that this machine has: a usage
        error naming the option before anything is measured."""
        if not self.cuda_available():
            raise pytest.UsageError(no_cuda(device))
        import torch

        index = int(device.partition(":")[2] or 0)
        count = torch.cuda.device_count()
        if index >= count:
            raise pytest.UsageError(
                f"--perfguard-device={device}: this machine has {count} CUDA device(s) "
                f"(cuda:0 to cuda:{count - 1})"
            )

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
            # a test that times itself is one result; a perf item that also does, one per
            # variant (the item's node id): each variant's benchmark is kept
            test = item.nodeid
            result = result_from_benchmark(test, bench)
            if result is not None:
                self.state.record(result, item.nodeid)

    def ending(self) -> Ending:
        """What the finish takes of this role (`finish.Ending`)."""
        return Ending(
            monitor=self.monitor,
            reach=None if self.recording is None else self.recorded,
            exclusive_gpu=self.exclusive_gpu,
        )

    def recorded(self) -> Reach | None:
        """What each perf test ran, as this process recorded it; a refused record is said."""
        assert self.recording is not None
        reach = self.recording.finish()
        if self.recording.why_not:
            self.state.notes.append(f"perfguard: {self.recording.why_not}")
        return reach

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.refused:
            finish_session(session, self.state, exitstatus, self.ending())
            return
        close = self.ending().close_beside  # refused before anything ran: workers go too
        if close is not None:
            close(session.config, True, False)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        terminal_summary(terminalreporter, config)


def no_cuda(device: str) -> str:
    return (
        f"--perfguard-device={device}: CUDA is not available here (no GPU, or a CPU build of "
        "torch): use --perfguard-device=cpu, or auto"
    )


def begin_item(state: SessionState, item: pytest.Item, watchdog: Watchdog | None) -> None:
    """An attempt of a perf item (or a test that times itself) begins (its set-up): its
    whole limit from now, in this process, and at its watchdog (a session the user
    started)."""
    if not measured_in_ab(item):
        return
    limit = limit_of(item, state.options.timeout_s)

    def expired() -> None:
        state.tally.timed_out[item.nodeid] = limit

    timeout.begin(limit, expired)
    if watchdog is not None:
        after = state.tally.expected
        rest = after[after.index(item.nodeid) :] if item.nodeid in after else [item.nodeid]
        watchdog.arm(limit, item.nodeid, "timeout", rest)


def end_item(
    state: SessionState, item: pytest.Item, watchdog: Watchdog | None, *, record: bool
) -> None:
    """An attempt of a perf item ended (its teardown). `record`: one that ran out of time
    without a result gets an error result naming the limit (a worker's driver records the
    item itself)."""
    if not measured_in_ab(item):
        return
    timeout.end()
    if watchdog is not None:
        watchdog.disarm()
    variant = variant_of(item)
    limit = state.tally.timed_out.get(item.nodeid)
    if record and limit is not None and variant is not None:
        key = (test_id(item, variant), variant)
        if state.ledger.nodeids.get(key) != item.nodeid:  # ended before it had a result
            error = VariantResult(
                test=key[0], variant=variant, status="error", error=timeout.message(limit)
            )
            state.record(error, item.nodeid)


def within_import_limit(
    state: SessionState, collector: pytest.Collector, watchdog: Watchdog | None
) -> Generator[None, Any, None]:
    """Importing a test module within the import limit (`--perfguard-import-timeout`, not an
    item's: on a busy runner `import torch` alone can outlast a short item limit): a hang
    there is a collection error naming the module (or, in native code, the watchdog's
    gap). The signal never lands inside torch's own import (`signals.HeldImport`)."""
    if not isinstance(collector, pytest.Module):
        yield
        return
    limit = state.options.import_timeout_s
    timeout.begin(limit, lambda: None, timeout.import_message)
    if watchdog is not None:
        watchdog.arm(limit, collector.nodeid, "collection_error", [])
    try:
        yield
    finally:
        timeout.end()
        if watchdog is not None:
            watchdog.disarm()


def refuse_benchmark_only(config: pytest.Config, perf_items: int) -> None:
    """pytest-benchmark's `--benchmark-only` skips every test without its fixture: beside
    `--perfguard` with perf items to measure, that is a usage error, not a silent skip."""
    try:
        only = bool(config.getoption("benchmark_only"))
    except ValueError:  # pytest-benchmark is not installed
        return
    if only and perf_items:
        raise pytest.UsageError(
            f"--benchmark-only skips every test that does not use pytest-benchmark's fixture: "
            f"the {perf_items} perf item(s) would not be measured. Drop --benchmark-only "
            "(perfguard records the benchmark tests as well)"
        )


def failed_after_measuring(state: SessionState, report: pytest.TestReport) -> None:
    """A perf test whose own assertion failed after it measured: its figures are an error
    result, never an ok one (nor a baseline's)."""
    for key, nodeid in list(state.ledger.nodeids.items()):
        found = state.ledger.result_of(key)
        if nodeid == report.nodeid and found is not None and found.status == "ok":
            line = first_line(report) or "the test failed"
            state.record(
                replace(found, status="error", error=f"the test failed after measuring: {line}"),
                nodeid,
            )


def tally_end(state: SessionState, report: pytest.TestReport) -> None:
    """How a perf item ended: its call, or the first phase that did not pass."""
    if report.when == "call" or report.outcome != "passed":
        state.tally.ended_as(report.nodeid, report.outcome, first_line(report))


def keep_shard(state: SessionState, config: pytest.Config, items: list[pytest.Item]) -> None:
    if state.options.shard is not None:
        kept, dropped = shard_items(items, *state.options.shard)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
