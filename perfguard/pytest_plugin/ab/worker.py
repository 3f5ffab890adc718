"""The worker's end of same-job A/B: inside a pytest session run in one tree.

The driver decides when each item may start, when its variant may be compiled and timed,
when each block is sampled and when sampling ends, so the two workers never time anything
at the same time. The worker runs the user's test as usual; only the measurement waits for
the driver: before its first timed step (`wait_turn`) and between blocks
(`sample_on_demand`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from perfguard.errors import PerfguardError
from perfguard.measure.canary import delay_for, slowed
from perfguard.measure.clock import Clock
from perfguard.measure.placement import on_one_cpu
from perfguard.measure.residency import Residency
from perfguard.measure.sampling import (
    Command,
    Sampler,
    SamplingSettings,
    WarmupOutcome,
    sample_on_demand,
)
from perfguard.orders import Orders
from perfguard.pytest_plugin.ab import protocol
from perfguard.pytest_plugin.ab.channel import connect
from perfguard.pytest_plugin.timeout import paused


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
        command = protocol.expect(self.recv(), protocol.Block, protocol.Finish)
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
                protocol.Ready(repeats=settings.repeats, warmup_calls=warmup.calls, call_ms=call_ms)
            )

        def hand_over(block: tuple[float, ...]) -> None:
            self.send(protocol.Times(tuple(block)))

        sampling = functools.partial(
            sample_on_demand,
            ready=ready,
            next_command=self._sampling_command,
            hand_over=hand_over,
            around_block=on_one_cpu,
        )

        @contextlib.contextmanager
        def around_block() -> Iterator[None]:
            turn = contextlib.nullcontext() if residency is None else residency.turn()
            with turn, on_one_cpu():
                yield

        def sampler(call: Callable[[], Any], clock: Clock, *args: Any) -> Any:
            # a canary's block (`perfguard calibrate`): each call slower by what it asks
            canaried = slowed(call, delay_for(clock), lambda: self.slower_ms)
            try:
                return sampling(canaried, clock, *args, around_block=around_block)
            finally:
                if residency is not None:
                    residency.give_back()

        return sampler

    def close(self) -> None:
        self.conn.close()
