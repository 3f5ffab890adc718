"""The worker's end of same-job A/B: inside a pytest session run in one tree, its role
(`AbWorker`) and its link to the driver (`WorkerLink`).

The driver decides when each item may start, when its variant may be compiled and timed,
when each block is sampled and when sampling ends, so the two workers never time anything
at the same time. The worker runs the user's test as usual; only the measurement waits for
the driver: before its first timed step (`wait_turn`) and between blocks
(`sample_on_demand`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Generator, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.errors import PerfguardError
from perfguard.measure.canary import delay_for, slowed
from perfguard.measure.clock import Clock
from perfguard.measure.placement import on_one_cpu
from perfguard.measure.residency import Residency
from perfguard.measure.sampling import (
    Command,
    OpBlock,
    Sampler,
    SamplingSettings,
    WarmupOutcome,
    sample_on_demand,
)
from perfguard.orders import Orders
from perfguard.pytest_plugin import planning
from perfguard.pytest_plugin.ab import protocol
from perfguard.pytest_plugin.ab.channel import connect
from perfguard.pytest_plugin.ab.protocol import Collected, Ended, Result
from perfguard.pytest_plugin.collection import measured_in_ab, test_id, times_itself, variant_of
from perfguard.pytest_plugin.options import configured
from perfguard.pytest_plugin.roles import (
    Role,
    begin_item,
    end_item,
    settle_heap,
    within_import_limit,
)
from perfguard.pytest_plugin.state import SessionState
from perfguard.pytest_plugin.timeout import paused

if TYPE_CHECKING:
    from perfguard.pytest_plugin.recording import Recording


class DriverGoneError(PerfguardError, RuntimeError):
    """The driving pytest session closed the connection: this worker stops."""


class WorkerLink:
    def __init__(self, conn: Connection, side: str, items: list[str] | None) -> None:
        self.conn = conn
        self.side = side
        self._items = items  # None: the driver sends them once it has collected
        self.floor: dict[str, Any] = {}  # the running item's settings, as the driver judged
        self.slower_ms = 0.0  # the block being timed: its calls made this much slower

    @classmethod
    def from_orders(cls, orders: Orders) -> WorkerLink | None:
        """The link its orders give an A/B worker (None: this session is none)."""
        conn = connect(orders.address, orders.key)
        if conn is None:
            return None
        listing = orders.items
        items = Path(listing).read_text(encoding="utf-8").splitlines() if listing else None
        return cls(conn, orders.side or "?", None if items is None else [i for i in items if i])

    @property
    def items(self) -> list[str]:
        """The items to run, in the driver's order (waits for the driver's list when this
        worker was started before the driver had collected)."""
        if self._items is None:
            self._items = list(protocol.expect(self.recv(), protocol.Items).items)
        return self._items

    def send(self, report: protocol.Report) -> None:
        self.conn.send(report.wire())

    def recv(self) -> protocol.Message:
        try:
            with paused():  # waiting for the driver is not the item's own time
                data = self.conn.recv()
        except (EOFError, OSError):
            raise DriverGoneError("the A/B driver closed the connection") from None
        return protocol.command(data)

    def may_start(self, nodeid: str) -> bool:
        """Ask the driver whether to run this item now (it waits its turn); False: skip it.
        The item's settings floor comes with the word to go (`floor`)."""
        self.send(protocol.Next(nodeid))
        answer = protocol.expect(self.recv(), protocol.Go, protocol.Skip)
        self.floor = dict(answer.floor or {}) if isinstance(answer, protocol.Go) else {}
        return isinstance(answer, protocol.Go)

    def wait_turn(self) -> None:
        """Say the item's variant is built, then wait until the driver gives this side its
        turn to compile and time it (both sides build at once, one times at a time)."""
        self.send(protocol.Built())
        protocol.expect(self.recv(), protocol.Time)

    def _sampling_command(self) -> Command:
        command = protocol.expect(self.recv(), protocol.Block, protocol.Ops, protocol.Finish)
        self.slower_ms = command.slower_ms if isinstance(command, protocol.Block) else 0.0
        return command.KIND

    def sampler(self, residency: Residency | None = None) -> Sampler:
        """Sampling that announces `ready` after warm-up and then samples on command, each
        block timed from the CPU the other side's blocks are timed from too. `residency`:
        where this side's weights wait between its blocks (on one GPU, the host's memory
        when both trees do not fit)."""

        def ready(warmup: WarmupOutcome, settings: SamplingSettings) -> None:
            last = sorted(warmup.times_ms[-5:])
            call_ms = last[len(last) // 2] if last else None
            self.send(
                protocol.Ready(
                    repeats=settings.repeats,
                    warmup_calls=warmup.calls,
                    call_ms=call_ms,
                    op_blocks=settings.op_blocks,
                )
            )

        def hand_over(block: tuple[float, ...]) -> None:
            self.send(protocol.Times(tuple(block)))

        def hand_over_ops(block: OpBlock | None) -> None:
            self.send(protocol.OpsTaken(0 if block is None else len(block[1])))

        sampling = functools.partial(
            sample_on_demand,
            ready=ready,
            next_command=self._sampling_command,
            hand_over=hand_over,
            hand_over_ops=hand_over_ops,
            around_block=on_one_cpu,
        )

        @contextlib.contextmanager
        def around_block() -> Iterator[None]:
            turn = contextlib.nullcontext() if residency is None else residency.turn()
            with turn, on_one_cpu():
                yield

        def sampler(call: Callable[[], Any], clock: Clock, *args: Any, **given: Any) -> Any:
            # a canary's block (`perfguard calibrate`): each call slower by what it asks
            canaried = slowed(call, delay_for(clock), lambda: self.slower_ms)
            try:
                return sampling(canaried, clock, *args, around_block=around_block, **given)
            finally:
                if residency is not None:
                    residency.give_back()

        return sampler

    def close(self) -> None:
        self.conn.close()


class AbWorker(Role):
    """A worker of an A/B driver: only the driver's items, in its order, each when asked;
    it tells the driver how each ended."""

    link: WorkerLink

    def __init__(
        self, state: SessionState, link: WorkerLink, recording: Recording | None = None
    ) -> None:
        super().__init__(state, recording)
        self.link = link

    def floor(self, nodeid: str) -> dict[str, Any]:
        """The running item's settings, as the driver judged them."""
        return dict(self.link.floor)

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        environment = None
        try:  # while the driver gets ready
            from perfguard.measure.isolation import preload
            from perfguard.pytest_plugin.planning import fallback_environment

            cuda: bool | None = preload()
            environment = fallback_environment(self.state.options.device)
        except Exception:  # torch did not import: each item that needs it says why
            cuda = None
        plan = planning.make(self.state, config, [], environment)
        rank = {nodeid: i for i, nodeid in enumerate(self.link.items)}
        kept = sorted((i for i in items if i.nodeid in rank), key=lambda i: rank[i.nodeid])
        dropped = [i for i in items if i.nodeid not in rank]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        others = tuple((test_id(i, v), v) for i in dropped if (v := variant_of(i)) is not None)
        errors = tuple(f"{where}: {line}" for where, line in self.state.tally.collection)
        rules = plan.thresholds.to_json()  # its tree's markers: the base's bar
        # its tree's own ini (both workers run the driver's command line) and markers
        settings = plan.guarded(configured(config, Path(config.rootpath)))
        self.link.send(
            Collected(
                tuple(i.nodeid for i in kept), cuda, errors, others, rules, environment, settings
            )
        )
        if kept:
            settle_heap()  # while the driver makes its plan

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, None]:
        """Block until the driver lets this item run (skip it when the driver does not),
        then run it within its limit, each attempt from its set-up to its teardown."""
        from perfguard.pytest_plugin.ab.worker import DriverGoneError

        if measured_in_ab(item):
            try:
                go = self.link.may_start(item.nodeid)
            except DriverGoneError as exc:
                pytest.exit(str(exc), returncode=0)
            if not go:
                pytest.skip("not run in this A/B session")
            begin_item(self.state, item, None)
        yield

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, None]:
        yield
        end_item(self.state, item, None, record=False)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, None]:
        yield from within_import_limit(self.state, collector, None)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, Any, None]:
        outcome = yield
        if measured_in_ab(item):
            report = outcome.get_result()
            timed = "benchmark" in getattr(item, "funcargs", {})
            if report.when == "call" and report.passed and (times_itself(item) or timed):
                self.send_benchmark(item)
            self.report_end(report)

    def send_benchmark(self, item: pytest.Item) -> None:
        """The timings of a test that timed itself (or of a perf item's own `benchmark`, one
        per variant: the item's node id), for the driver (before how it ended)."""
        from perfguard.pytest_plugin.benchmark_bridge import result_from_benchmark

        bench = getattr(item, "funcargs", {}).get("benchmark")
        result = None if bench is None else result_from_benchmark(item.nodeid, bench)
        if result is not None:
            with contextlib.suppress(OSError):
                self.link.send(Result(item.nodeid, result.to_json(), self.state.environment))

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
        """Write what each test ran, when the driver asked, then hang up."""
        if self.recording is not None:
            self.recording.write_for_driver()
        self.link.close()
