"""The driver of same-job A/B, in the pytest session the user started.

One worker process per tree (A: the base revision's worktree, B: this tree), each a pytest
session over the same perf items. For each item the driver lets both sides build it at once
(the test's own set-up, the eager reference, the variant: nothing timed), then A compile and
warm up, then B, then asks for blocks in pairs, the order inside each pair drawn at random,
so slow drift and heat hit both sides alike. From the first compile on, only one process
works at any moment: nothing either side times (compile time, warm-up, blocks, the
profile) shares the machine with the other.
"""

# long module: the driver whole: an item's steps in order (build, compile, the timed pairs,
# the operators' pairs, memory and drift) and the two workers' lives around them

from __future__ import annotations

import functools
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from perfguard import scratch
from perfguard.environments import BaseEnvironment, make_shim
from perfguard.orders import Orders
from perfguard.pytest_plugin.ab.channel import Launch
from perfguard.pytest_plugin.ab.side import Side, SideOutcome, WorkerExitedError
from perfguard.records.reach import Reach
from perfguard.stats.sequential import LOOKS, should_stop

__all__ = [
    "Design",
    "Driver",
    "Pairing",
    "Side",
    "SideOutcome",
    "Slowing",
    "Taken",
    "WorkerExitedError",
]

Progress = Callable[[str], None]


@dataclass
class Pairing:
    """How one item's blocks were taken: the order inside each pair, e.g. ("AB", "BA"),
    and, when both sides ran, where the sequential design stopped and what it saw."""

    orders: tuple[str, ...]
    sequential: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pairs": len(self.orders), "order": " ".join(self.orders)}
        if self.sequential is not None:
            out["sequential"] = self.sequential
        return out


@dataclass(frozen=True)
class Taken:
    """The blocks of one sequential comparison (each side's, in pair order) and how they
    were taken."""

    a: tuple[tuple[float, ...], ...]
    b: tuple[tuple[float, ...], ...]
    pairing: Pairing


class Slowing(Protocol):
    """How much slower a side's calls are made in its next block, and what each block showed
    (`perfguard calibrate`'s canaries: the calibrating roles set one on their driver; a pull
    request's driver keeps `UNSLOWED`, which slows nothing)."""

    def delay_ms(self, side: str) -> float:
        """The delay added to each call of `side`'s ("A" or "B") next block."""
        ...

    def saw(self, side: str, block: tuple[float, ...], delay_ms: float) -> None:
        """`side`'s block was timed with that delay per call."""
        ...


class Unslowed:
    """Every call as it is."""

    def delay_ms(self, side: str) -> float:
        return 0.0

    def saw(self, side: str, block: tuple[float, ...], delay_ms: float) -> None:
        return None


UNSLOWED: Slowing = Unslowed()


@dataclass(frozen=True)
class Design:
    """The stopping rule of one item: its level, the smallest change it may call (the
    bar) and the smallest change that matters (`unchanged` rules it out)."""

    alpha: float = 0.05
    bar_pct: float = 5.0
    tests: int = 1  # latency p-values the run's correction shares (items x metrics)
    margin_pct: float = 10.0


class Driver:
    """Runs each perf item in both trees, interleaved; see the module docstring."""

    def __init__(
        self,
        base_rootdir: Path,
        base_label: str,
        head_rootdir: Path,
        worker_args: Callable[[Path], Sequence[str]],
        *,
        seed: int = 0,
        traces: Path | None = None,
        record: bool = False,
        orders: Orders | None = None,
        cache: str | None = None,
        base_env: BaseEnvironment | None = None,
    ) -> None:
        """`worker_args(rootdir)`: the pytest arguments of a worker in that tree; `traces`:
        where both workers write their Chrome traces (beside the session's report);
        `record`: this tree's worker records what each test runs (`reach`, read at close);
        `orders`: this session's own, passed on to both workers with theirs; `cache`: what
        this tree's worker does with main's compile cache ("write" in main's run; the
        base's loads it); `base_env`: the environment the base's worker runs in (None: this
        one)."""
        self._logs = scratch.make(f"{scratch.PREFIX}logs-")
        self.a = Side(
            "A", base_label, base_rootdir, worker_args(base_rootdir), self._logs / "base.log"
        )
        self.b = Side(
            "B", "this tree", head_rootdir, worker_args(head_rootdir), self._logs / "head.log"
        )
        self.seed = seed
        self.crashed = False
        self._pending: list[tuple[Side, Launch]] = []  # launched, not yet connected
        self.a.traces = self.b.traces = traces
        given = (orders or Orders()).for_workers()
        # a child session that records allocation sites: one untimed call matters, one pair
        self.recording_sites = given.sites
        self.a.orders = given.with_(compile_cache="load")
        self.b.orders = given.with_(compile_cache=cache or given.compile_cache)
        self._record = record
        if record:
            self.b.reach = self._logs / "head.reach"
        self.reach: Reach | None = None  # this tree's record, read when the workers stop
        self.slowing = UNSLOWED  # calls made slower by a known amount (a calibrating role's)
        if base_env is not None and base_env.error is not None:
            self.a.refused = f"the base's environment could not be built: {base_env.error}"
        elif base_env is not None and base_env.python is not None:
            self.a.python = base_env.python
            self.a.shim = make_shim(self._logs / "perfguard-shim")

    def measure(
        self,
        nodeid: str,
        remaining: Sequence[str],
        progress: Progress,
        design: Design | None = None,
        limit_s: float | None = None,
        floor: dict[str, Any] | None = None,
    ) -> tuple[SideOutcome, SideOutcome, Pairing]:
        """Both sides of one item. `remaining`: this item and those after it, in order.
        `floor`: the item settings both sides measure it with, where this tree loosened the
        base's (`Side.begin`).
        `limit_s`: the item's time limit; a worker that has not finished it by then (and a
        grace, for the worker's own alarm to end it first) is killed, and its side crashed.

        With both sides running, pairs are taken until the sequential design
        (`perfguard.stats.sequential`) decides, at most its last look; one side alone takes
        the blocks its settings ask for."""
        outcomes: dict[str, SideOutcome] = {}
        self.connect(remaining, progress)
        for side in (self.a, self.b):
            side.limit(limit_s)
        try:
            return self._measure(nodeid, remaining, progress, design, outcomes, floor)
        finally:
            for side in (self.a, self.b):
                side.limit(None)

    def _measure(
        self,
        nodeid: str,
        remaining: Sequence[str],
        progress: Progress,
        design: Design | None,
        outcomes: dict[str, SideOutcome],
        floor: dict[str, Any] | None = None,
    ) -> tuple[SideOutcome, SideOutcome, Pairing]:
        active = self.open_item(nodeid, remaining, progress, outcomes, floor)
        rng = random.Random(f"{self.seed}:{nodeid}")
        taken = self.take_pairs(active, outcomes, rng, progress, design)
        self.take_op_pairs(active, outcomes, rng, progress)
        self.close_item(active, outcomes, progress)
        return outcomes["A"], outcomes["B"], taken.pairing

    def open_item(
        self,
        nodeid: str,
        remaining: Sequence[str],
        progress: Progress,
        outcomes: dict[str, SideOutcome],
        floor: dict[str, Any] | None = None,
    ) -> list[Side]:
        """Start the item on both sides: they build it at once, then compile and warm up one
        after the other. The sides ready to sample (an ended one's outcome is in
        `outcomes`)."""
        going = [
            side
            for side in (self.a, self.b)
            if self._step(side, functools.partial(side.begin, nodeid, remaining, floor), outcomes)
        ]
        if going:
            who = "both sides" if len(going) == 2 else going[0].label
            progress(f"A/B: {who} build")
        built = [side for side in going if self._step(side, side.built, outcomes)]
        active: list[Side] = []
        for side in built:
            progress(f"A/B: {side.label} compiles and warms up")
            if self._step(side, side.take_turn, outcomes):
                active.append(side)
        return active

    def take_pairs(
        self,
        active: list[Side],
        outcomes: dict[str, SideOutcome],
        rng: random.Random,
        progress: Progress,
        design: Design | None = None,
    ) -> Taken:
        """Pairs of blocks until the sequential design decides (one side alone: the blocks
        its settings ask for); each side's calls as `slowing` says. A side that crashes
        leaves `active`, its outcome in `outcomes`."""
        paired = len(active) == 2
        pairs = LOOKS[-1] if paired else max((s.repeats for s in active), default=0)
        if self.recording_sites:  # no verdict is taken from these blocks
            pairs, paired = min(pairs, 1), False
        orders: list[str] = []
        blocks: dict[str, list[tuple[float, ...]]] = {"A": [], "B": []}
        sequential: dict[str, Any] | None = None
        for index in range(pairs):
            if not active:
                break
            order = list(active)
            rng.shuffle(order)
            orders.append("".join(s.name for s in order))
            upto = f"up to {pairs}" if paired else str(pairs)
            progress(f"A/B: pair {index + 1} of {upto} ({orders[-1]})")
            for side in order:
                delay = self.slowing.delay_ms(side.name)
                try:
                    block = side.block(delay)
                except WorkerExitedError as exc:
                    outcomes[side.name] = self._crash(side, exc)
                    active.remove(side)
                    continue
                blocks[side.name].append(block)
                self.slowing.saw(side.name, block, delay)
            if paired and len(active) == 2:
                d = design or Design()
                stop, found = should_stop(
                    blocks["A"],
                    blocks["B"],
                    alpha=d.alpha,
                    bar_pct=d.bar_pct,
                    tests=d.tests,
                    margin_pct=d.margin_pct,
                )
                if found:
                    sequential = {"looks": list(LOOKS), "stopped_at": index + 1, **found}
                if stop:
                    break
        pairing = Pairing(tuple(orders), sequential)
        return Taken(tuple(blocks["A"]), tuple(blocks["B"]), pairing)

    def take_op_pairs(
        self,
        active: list[Side],
        outcomes: dict[str, SideOutcome],
        rng: random.Random,
        progress: Progress,
    ) -> int:
        """After the timed pairs, pairs of profiled blocks (each operator's and kernel's
        time), the order inside each pair drawn at random as the timed pairs' is: as many as
        both sides' settings ask for (the fewer), none for one side alone. How many pairs."""
        if len(active) < 2 or self.recording_sites:
            return 0
        pairs = min(side.op_blocks for side in active)
        for index in range(pairs):
            order = list(active)
            rng.shuffle(order)
            progress(f"A/B: operators' times, pair {index + 1} of {pairs}")
            for side in order:
                try:
                    side.op_block()
                except WorkerExitedError as exc:
                    outcomes[side.name] = self._crash(side, exc)
                    active.remove(side)
                    return index
        return pairs

    def close_item(
        self, active: list[Side], outcomes: dict[str, SideOutcome], progress: Progress
    ) -> None:
        """Sampling is over: each side measures memory and drift and ends the item."""
        for side in active:
            progress(f"A/B: {side.label} memory and drift")
            try:
                outcomes[side.name] = side.finish()
            except WorkerExitedError as exc:
                outcomes[side.name] = self._crash(side, exc)

    def measure_whole(
        self,
        nodeid: str,
        remaining: Sequence[str],
        progress: Progress,
        limit_s: float | None = None,
    ) -> tuple[SideOutcome, SideOutcome]:
        """A test that times itself (pytest-benchmark's `benchmark` fixture) in both trees:
        each side runs it whole, one after the other (never both at once), the order drawn
        at random per test so that drift hits both alike."""
        outcomes: dict[str, SideOutcome] = {}
        self.connect(remaining, progress)
        order = [self.a, self.b]
        random.Random(f"{self.seed}:{nodeid}").shuffle(order)
        for side in order:
            progress(f"A/B: {side.label} runs it")
            side.limit(limit_s)
            try:
                if self._step(side, functools.partial(side.begin, nodeid, remaining), outcomes):
                    self._step(side, side.until_ended, outcomes)
            finally:
                side.limit(None)
        return outcomes["A"], outcomes["B"]

    def launch_both(self, items: Sequence[str] | None, paths: Sequence[str] = ()) -> None:
        """Start both workers now, without waiting for them: they import torch and collect
        the suite (seconds) while this session gets ready, and while each other do. `items`
        None: before this session has collected; each worker collects `paths` and is sent
        the items when it is first needed (`Side.launch`)."""
        self._pending = []
        for side in (self.a, self.b):
            try:
                self._pending.append((side, side.launch(items, paths)))
            except (OSError, WorkerExitedError):  # `begin` starts it again, and says why
                side.stop()

    @property
    def cuda(self) -> bool | None:
        """Whether CUDA is available to the workers (this tree's, else the base's)."""
        known = [side.cuda for side in (self.b, self.a) if side.alive and side.cuda is not None]
        return known[0] if known else None

    def connect(self, remaining: Sequence[str], progress: Progress) -> None:
        """Connect the launched workers, or start the ones not running side by side (at
        the first item, or earlier when asked: they have collected the suite and imported
        torch once this returns). A worker that fails to start is left for `begin`, which
        tries again and reports it for that side."""
        launched, self._pending = self._pending, []
        if not launched:
            idle = [side for side in (self.a, self.b) if not side.alive]
            if len(idle) < 2:
                return
            progress("A/B: starting both workers")
            for side in idle:
                try:
                    launched.append((side, side.launch(remaining)))
                except (OSError, WorkerExitedError):  # `begin` says why, for its item
                    side.stop()
        for side, handle in launched:
            try:
                side.connect(handle, remaining)
            except WorkerExitedError:
                side.stop()

    def _step(
        self, side: Side, step: Callable[[], SideOutcome | None], outcomes: dict[str, SideOutcome]
    ) -> bool:
        """Run one step of an item on one side. True: the item goes on there; False: it
        ended (its outcome is in `outcomes`), or the worker crashed."""
        try:
            early = step()
        except WorkerExitedError as exc:
            early = self._crash(side, exc)
        if early is None:
            return True
        outcomes[side.name] = early
        return False

    def _crash(self, side: Side, exc: WorkerExitedError) -> SideOutcome:
        side.stop()
        self.crashed = True
        return SideOutcome(None, "crashed", str(exc))

    def close(self, *, at_once: bool = False) -> None:
        """Stop both workers; their logs are kept only when one of them crashed."""
        pending, self._pending = self._pending, []
        for side, launch in pending:  # launched, never used: no need to wait
            launch.close()
            side.stop(at_once=True)
        for side in (self.a, self.b):  # both exit at once
            side.hang_up()
        for side in (self.a, self.b):
            side.stop(at_once=at_once)
        self.reach = self.b.read_reach() if self._record and not at_once else None
        if self.crashed:
            scratch.give_up(self._logs)
        else:
            shutil.rmtree(self._logs, ignore_errors=True)
