"""One side of same-job A/B: a tree and the pytest worker process that measures it there.

The worker is started on demand (and again after a crash), talks to the driver over a
local connection, and is stopped within 30 s, or killed, when the driver is done.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from perfguard.errors import PerfguardError
from perfguard.measure.sampling import TIMED
from perfguard.orders import Orders, child_environment
from perfguard.pytest_plugin.ab import protocol
from perfguard.pytest_plugin.ab.channel import Launch, open_listener
from perfguard.records import RecordError, VariantResult
from perfguard.records.reach import Reach

BENCHMARK = "pytest-benchmark"  # the variant of pytest-benchmark's timings

LIMIT_GRACE_S = 60.0  # past an item's limit, the worker's own alarm's time to end it
CONNECT_TIMEOUT_S = 300.0  # importing torch and collecting on a cold runner can be slow
POLL_S = 1.0
LOG_TAIL = 1500

# perfguard itself always comes from this installation, whatever the tree holds; the
# user's code comes from the tree (cwd and PYTHONPATH)
# (a worker ends with the driver, even when the driver is killed)
BOOT = (
    "import sys; sys.path.insert(0, {where!r}); from perfguard.processes import follow_parent; "
    "follow_parent({parent}); import perfguard.pytest_plugin; "
    "from perfguard.processes import end_worker; del sys.path[0]; import pytest; "
    "end_worker(int(pytest.main(sys.argv[1:])))"
)


def _spins_while_idle(name: str, value: str) -> bool:
    """OpenMP told to spin while waiting: a worker waiting for its turn would then keep a
    core busy beside the one measuring (100% of a core, benchmarks/idle_worker.py). OpenMP's
    default spins briefly and sleeps (0% while waiting), so the setting is left out."""
    return name == "OMP_WAIT_POLICY" and value.strip().upper() == "ACTIVE"


class WorkerExitedError(PerfguardError, RuntimeError):
    """A worker process ended or hung up; the message holds the end of its output."""


@dataclass
class SideOutcome:
    """What one tree gave for one item."""

    result: VariantResult | None  # None: nothing was measured on this side
    outcome: str  # passed, failed, skipped, absent (no such item) or crashed
    message: str = ""
    environment: dict[str, Any] | None = None
    # a perf item that also timed itself: pytest-benchmark's timings beside its own result
    extra: tuple[VariantResult, ...] = ()


@dataclass
class Side:
    """One tree and its worker process (started on demand, restarted after a crash)."""

    name: str  # "A" (base) or "B" (this tree)
    label: str
    rootdir: Path
    args: Sequence[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    conn: Connection | None = None
    collected: set[str] = field(default_factory=set)
    repeats: int = 0  # blocks the worker's settings ask for, learnt from its `ready`
    op_blocks: int = 0  # profiled blocks its settings ask for, learnt from its `ready`
    call_ms: float | None = None  # a call's time after warm-up, learnt from its `ready`
    launches: int = 0  # worker processes started for this side
    cuda: bool | None = None  # whether CUDA is available there (None: not known)
    traces: Path | None = None  # where the worker writes its Chrome traces
    reach: Path | None = None  # where its workers write what each test ran (one file each)
    orders: Orders = field(default_factory=Orders)  # what its worker is told (and `launch` adds)
    collection_errors: tuple[str, ...] = ()  # modules of its tree that did not collect
    others: tuple[tuple[str, str], ...] = ()  # (test, variant) of its tree the driver lacks
    thresholds: dict[str, Any] | None = None  # its tree's rules, as its worker read them
    environment: dict[str, Any] | None = None  # what its worker measures on
    settings: dict[str, Any] | None = None  # its tree's guarded settings, as its worker read
    # the interpreter of another environment its worker runs in (None: this one's), and the
    # folder that makes this perfguard importable there (`perfguard.environments.shim`)
    python: Path | None = None
    shim: Path | None = None
    refused: str | None = None  # why its worker cannot start at all (its environment)
    _limit: float | None = field(default=None, repr=False)  # the item's time limit (s)
    _deadline: float | None = field(default=None, repr=False)  # time.monotonic() to kill at

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.conn is not None

    def start(self, items: Sequence[str]) -> None:
        """A fresh worker over `items` (node ids, in the driver's order)."""
        self.connect(self.launch(items))

    def launch(self, items: Sequence[str] | None, paths: Sequence[str] = ()) -> Launch:
        """Start a fresh worker process over `items`; `connect` waits for it. (Two workers
        launched before either is awaited import torch and collect at the same time.)

        `items` None: launched before the driver has collected; the worker collects `paths`
        (the session's own test paths, relative to the tree) and `connect` sends it the
        items. FileNotFoundError when none of `paths` is in this tree."""
        self.stop()
        if self.refused is not None:
            raise WorkerExitedError(self.refused)
        self.launches += 1
        top = self.rootdir
        # whole files: a test new in this tree is no node id in the other
        wanted = paths if items is None else items
        files = sorted({w.split("::")[0] for w in wanted if (top / w.split("::")[0]).exists()})
        if items is None and not files:
            raise FileNotFoundError(f"none of {list(paths)} is in the {self.label} tree")
        listener, (address, key), folder = open_listener()
        imports = [str(top), *([str(top / "src")] if (top / "src").is_dir() else [])]
        if self.shim is not None:  # perfguard first, then the tree, in another environment
            imports.insert(0, str(self.shim))
        elif os.environ.get("PYTHONPATH"):
            imports.append(os.environ["PYTHONPATH"])
        listing = None
        if items is not None:
            listing = self.log.with_suffix(".items")
            listing.write_text("\n".join(items) + "\n", encoding="utf-8")
        orders = self.orders.with_(
            side=self.name,
            address=address,
            key=key,
            items=None if listing is None else str(listing),
            traces=None if self.traces is None else str(self.traces),
            reach=None if self.reach is None else str(self.reach),
        )
        env = child_environment(
            orders, {k: v for k, v in os.environ.items() if not _spins_while_idle(k, v)}
        )
        env["PYTHONPATH"] = os.pathsep.join(imports)
        if self.python is not None:  # that environment's, first on PATH for what tests start
            env["VIRTUAL_ENV"] = str(self.python.parent.parent)
            env["PATH"] = f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}"
        # the folder perfguard is in: this installation's, or the shim's in another environment
        where = str(self.shim or Path(__file__).resolve().parents[3])
        launch = Launch(listener, folder, items_later=items is None)
        with contextlib.ExitStack() as failed, self.log.open("ab") as out:
            failed.callback(launch.close)  # no worker: stop listening for it
            self.proc = subprocess.Popen(
                [
                    str(self.python or sys.executable),
                    "-c",
                    BOOT.format(where=where, parent=os.getpid()),
                    *self.args,
                    *files,
                ],
                cwd=top,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            failed.pop_all()
        return launch

    def connect(self, launch: Launch, items: Sequence[str] = ()) -> None:
        """Wait for the launched worker to connect and say what it collected (of `items`,
        sent to it when it was launched before the driver had them)."""
        try:
            waited = 0.0
            while (conn := launch.wait(POLL_S)) is None and waited < CONNECT_TIMEOUT_S:
                waited += POLL_S
                if self.proc is not None and self.proc.poll() is not None:
                    break
        finally:
            launch.close()
        if conn is None:
            raise WorkerExitedError(self._why("did not connect"))
        self.conn = conn
        if launch.items_later:
            self.send(protocol.Items(tuple(items)))
        hello = protocol.expect(self.recv(), protocol.Collected)
        self.collected = set(hello.items)
        self.cuda = hello.cuda
        # a worker restarted for the items after its last one collects again: what every
        # start found is kept
        errors = (*self.collection_errors, *hello.errors)
        self.collection_errors = tuple(dict.fromkeys(errors))
        others = (*self.others, *((str(t), str(v)) for t, v in hello.others))
        self.others = tuple(dict.fromkeys(others))
        if hello.thresholds is not None:
            self.thresholds = dict(hello.thresholds)
        if hello.environment is not None:
            self.environment = dict(hello.environment)
        if hello.settings is not None:
            self.settings = dict(hello.settings)

    def _why(self, what: str) -> str:
        code = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=5)  # a hang-up is usually an exit under way
        if code is not None and what == "hung up":
            what = "exited"
        tail = ""
        with contextlib.suppress(OSError):
            tail = self.log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL:].strip()
        status = f"exit code {code}" if code is not None else "still running"
        last = tail.splitlines()[-1] if tail else "no output"
        return f"the {self.label} worker {what} ({status}): {last} (log: {self.log})"

    def send(self, command: protocol.Message) -> None:
        if self.conn is None:
            raise WorkerExitedError(self._why("is not running"))
        try:
            self.conn.send(command.wire())
        except OSError:
            raise WorkerExitedError(self._why("hung up")) from None

    def limit(self, seconds: float | None) -> None:
        """From now on, the item's time limit (None: none): past it and `LIMIT_GRACE_S`, the
        worker is killed (its own alarm should have ended the item first)."""
        self._limit = seconds
        self._deadline = None if seconds is None else time.monotonic() + seconds + LIMIT_GRACE_S

    def recv(self) -> protocol.Report:
        """The next report; waits as long as the worker lives (compiling can take minutes),
        and no longer than the item's time limit (`limit`)."""
        if self.conn is None:
            raise WorkerExitedError(self._why("is not running"))
        try:
            while not self.conn.poll(POLL_S):
                if self.proc is not None and self.proc.poll() is not None:
                    raise WorkerExitedError(self._why("exited"))
                if self._deadline is not None and time.monotonic() > self._deadline:
                    self.stop(at_once=True)
                    raise WorkerExitedError(
                        f"the {self.label} worker went past the item's time limit of "
                        f"{self._limit or 0:g} s (--perfguard-timeout) and did not end it: "
                        "killed"
                    )
            data = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerExitedError(self._why("hung up")) from None
        return protocol.report(data)

    def begin(
        self, nodeid: str, remaining: Sequence[str], floor: dict[str, Any] | None = None
    ) -> SideOutcome | None:
        """Let the worker start `nodeid` (it builds it, then waits; see `built`), with the
        item settings `floor` (`protocol.Go`). None: it is running the item."""
        if not self.alive:
            self.start(remaining)
        if nodeid not in self.collected:
            return SideOutcome(None, "absent", f"not collected in {self.label}")
        while True:
            message = self.recv()
            if isinstance(message, protocol.Ended):
                continue  # how an item skipped below ended there
            if protocol.expect(message, protocol.Next).item == nodeid:
                self.send(protocol.Go(floor))
                return None
            self.send(protocol.Skip())  # an item the driver did not run: skip it there

    def built(self) -> SideOutcome | None:
        """Wait until the item's variant is built. None: it waits for its turn to time; an
        outcome: the item ended first (it failed to build, skipped, or measured nothing)."""
        return self._until_ended(until=protocol.Built)

    def until_ended(self) -> SideOutcome:
        """Wait for a test that times itself to end (its result, then how it ended)."""
        outcome = self._until_ended(until=None)
        assert outcome is not None  # only an `until` message gives None
        return outcome

    def take_turn(self) -> SideOutcome | None:
        """Let the worker compile and warm up its built variant. None: it is ready to sample;
        an outcome: it failed before sampling (compile)."""
        self.send(protocol.Time())
        return self._until_ended(until=protocol.Ready)

    def _until_ended(
        self, *, until: type[protocol.Built | protocol.Ready] | None
    ) -> SideOutcome | None:
        """Read the item's result, if any, until it ends; None on an `until` message."""
        results: list[VariantResult] = []
        environment = None
        while True:
            match self.recv():
                case message if until is not None and isinstance(message, until):
                    if isinstance(message, protocol.Ready):
                        self.repeats, self.call_ms = message.repeats, message.call_ms
                        self.op_blocks = message.op_blocks
                    return None
                case protocol.Result() as message:
                    results.append(VariantResult.from_json(message.result))
                    environment = message.environment
                case protocol.Ended() as message:
                    own = [r for r in results if r.variant != BENCHMARK] or results[:1]
                    extra = tuple(r for r in results if r not in own)
                    return SideOutcome(
                        own[-1] if own else None,
                        message.outcome,
                        message.message,
                        environment,
                        extra,
                    )
                case message:
                    due = (*((until,) if until else ()), protocol.Result, protocol.Ended)
                    raise protocol.unexpected(message, *due)

    def block(self, slower_ms: float = 0.0) -> tuple[float, ...]:
        """One block's times; `slower_ms`: each of its calls made that much slower (a
        canary)."""
        TIMED.set()  # the worker times it: the driver's health monitor reads the clocks
        try:
            self.send(protocol.Block(slower_ms))
            message = self.recv()
        finally:
            TIMED.clear()
        return protocol.expect(message, protocol.Times).times

    def op_block(self) -> int:
        """One profiled block (untimed); how many places it kept (0: none here)."""
        self.send(protocol.Ops())
        return protocol.expect(self.recv(), protocol.OpsTaken).places

    def finish(self) -> SideOutcome:
        self.send(protocol.Finish())
        outcome = self._until_ended(until=None)
        assert outcome is not None  # only an `until` message gives None
        return outcome

    def read_reach(self) -> Reach | None:
        """What each test ran, as this side's workers recorded it (a worker restarted after
        a crash wrote its own file: they are joined); None where none wrote one, or one is
        unreadable (the run then carries no record: the next pull request measures all)."""
        if self.reach is None:
            return None
        found: Reach | None = None
        for path in sorted(self.reach.parent.glob(f"{self.reach.name}.*")):
            try:
                read = Reach.from_json(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, RecordError):
                return None
            found = read if found is None else found.merged(read)
        return found

    def hang_up(self) -> None:
        """Close the connection: the worker finishes its item and exits (`stop` waits)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def stop(self, *, at_once: bool = False) -> None:
        """End the worker: it finishes its item and exits within 30 s, or is killed;
        `at_once` (the session was interrupted) terminates it without waiting."""
        self.hang_up()
        if self.proc is not None:
            if at_once:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=5 if at_once else 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            except KeyboardInterrupt:  # stopped while waiting: the worker goes now
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                raise
            self.proc = None
