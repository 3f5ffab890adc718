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
import os
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NoReturn

from perfguard.ab import protocol
from perfguard.ab.channel import ENV_ITEMS, ENV_SIDE, connect_from_env
from perfguard.errors import PerfguardError
from perfguard.measure.placement import on_one_cpu
from perfguard.measure.sampling import (
    Command,
    Sampler,
    SamplingSettings,
    WarmupOutcome,
    sample_on_demand,
)


def follow_parent(parent: int) -> None:
    """End this worker when the driver process ends, even by SIGKILL (which lets the driver
    clean nothing up): the kernel's parent-death signal on Linux, a watchdog elsewhere."""
    import signal
    import sys
    import threading
    import time

    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    else:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="perfguard-follow-parent", daemon=True).start()
    if os.getppid() != parent:  # the driver ended before the signal was armed
        os._exit(1)


def end_worker(code: int) -> NoReturn:
    """Exit with the worker session's `code`, without the interpreter's teardown: freeing
    the modules of torch and its compiler takes 0.6-0.7 s (benchmarks/worker_exit.py), paid
    by both workers while the driver waits for them. The exit handlers still run and the
    output is flushed; a thread of the tests still running (not a daemon) gets the usual
    exit, which waits for it."""
    import atexit
    import sys
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class DriverGoneError(PerfguardError, RuntimeError):
    """The driving pytest session closed the connection: this worker stops."""


class WorkerLink:
    def __init__(self, conn: Connection, side: str, items: list[str] | None) -> None:
        self.conn = conn
        self.side = side
        self._items = items  # None: the driver sends them once it has collected

    @classmethod
    def from_env(cls) -> WorkerLink | None:
        conn = connect_from_env()
        if conn is None:
            return None
        listing = os.environ.get(ENV_ITEMS)
        items = Path(listing).read_text(encoding="utf-8").splitlines() if listing else None
        return cls(
            conn, os.environ.get(ENV_SIDE, "?"), None if items is None else [i for i in items if i]
        )

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
            data = self.conn.recv()
        except (EOFError, OSError):
            raise DriverGoneError("the A/B driver closed the connection") from None
        return protocol.command(data)

    def may_start(self, nodeid: str) -> bool:
        """Ask the driver whether to run this item now (it waits its turn); False: skip it."""
        self.send(protocol.Next(nodeid))
        return isinstance(protocol.expect(self.recv(), protocol.Go, protocol.Skip), protocol.Go)

    def wait_turn(self) -> None:
        """Say the item's variant is built, then wait until the driver gives this side its
        turn to compile and time it (both sides build at once, one times at a time)."""
        self.send(protocol.Built())
        protocol.expect(self.recv(), protocol.Time)

    def _sampling_command(self) -> Command:
        return protocol.expect(self.recv(), protocol.Block, protocol.Finish).KIND

    def sampler(self) -> Sampler:
        """Sampling that announces `ready` after warm-up and then samples on command, each
        block timed from the CPU the other side's blocks are timed from too."""

        def ready(warmup: WarmupOutcome, settings: SamplingSettings) -> None:
            self.send(protocol.Ready(repeats=settings.repeats, warmup_calls=warmup.calls))

        def hand_over(block: tuple[float, ...]) -> None:
            self.send(protocol.Times(tuple(block)))

        return functools.partial(
            sample_on_demand,
            ready=ready,
            next_command=self._sampling_command,
            hand_over=hand_over,
            around_block=on_one_cpu,
        )

    def close(self) -> None:
        self.conn.close()
