"""`perfguard calibrate`'s driving session: each perf item compared with itself, round after
round, on one pair of worker processes of this tree.

The role is same-job A/B's (`AbDriving`) with both sides this tree, and instead of one
comparison per item, the calibration's rounds: the item is built, compiled and warmed up once
on each side, then compared as a pull request's A/B compares it (pairs of blocks until the
sequential design decides), `rounds` times with identical sides and `canary_rounds` times
at each canary, with this tree's side's calls made that share slower, in one shuffled order
(`calibrate.schedule`). A round that could be flagged once its run is judged is given its
confirmation rounds at once, while the workers hold the item. What was taken is written to
the calibration record its orders name; `perfguard calibrate` judges it.

The canaries enter the driver through its one seam for them (`Driver.slowing`), which only
the roles here set: `Calibrating`, and `CanaryDriving`, the calibration's own check of the
pull-request path (a plain A/B run with every item's calls on this tree's side made a share
slower, its confirmation rounds slowed alike).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.calibrate.analysis import flagged_before_correction
from perfguard.calibrate.record import Calibration, Comparison, Item, Round, schedule
from perfguard.files import write_json_atomic
from perfguard.orders import Orders
from perfguard.pytest_plugin.ab import session as ab_session
from perfguard.pytest_plugin.ab.roles import AbDriving
from perfguard.pytest_plugin.finish import Ending
from perfguard.pytest_plugin.state import SessionState
from perfguard.stats.op_verdicts import op_noise

if TYPE_CHECKING:
    from perfguard.plan import BaseSaid
    from perfguard.pytest_plugin.ab.driver import Driver, Taken
    from perfguard.pytest_plugin.ab.session import AbSession
    from perfguard.pytest_plugin.ab.side import SideOutcome
    from perfguard.pytest_plugin.recording import Recording
    from perfguard.stats.thresholds import Thresholds
    from perfguard.watchdog import Watchdog

OP_ROUNDS = 5  # comparisons of the operators' blocks per item, at most


class Canary:
    """This tree's side's calls made `pct` percent slower (0: as they are), each delay sized
    to the item's call time as the latest block timed without a delay showed it (either
    side: both run the same code in a calibration), before any such block the call time
    this tree's worker saw at the end of its warm-up (`call_ms`). Warm-up calls can be slower
    than timed ones (a training step's first calls ran twice as long: a +10% canary sized
    from them measured +19.6%). One per item."""

    def __init__(self, pct: float, call_ms: Callable[[], float | None]) -> None:
        self.pct = pct
        self.call_ms = call_ms
        self.steady_ms: float | None = None  # a call, as the latest block without a delay
        self.delays: list[float] = []  # this tree's delays since `pct` was last set

    def slow(self, pct: float) -> None:
        """From now on, `pct` percent slower."""
        self.pct, self.delays = pct, []

    def delay_ms(self, side: str) -> float:
        if side != "B" or self.pct <= 0:
            return 0.0
        return self.pct / 100.0 * (self.steady_ms or self.call_ms() or 0.0)

    def saw(self, side: str, block: tuple[float, ...], delay_ms: float) -> None:
        if side == "B":
            self.delays.append(delay_ms)
        if not delay_ms and block:
            self.steady_ms = statistics.median(block)

    @property
    def mean_ms(self) -> float:
        """The delay per call this tree's side had, on average, since `pct` was set."""
        return statistics.fmean(self.delays) if self.delays else 0.0


class CanaryDriving(AbDriving):
    """A pull request's A/B run with every item's calls on this tree's side made the share
    its orders say slower (`canary_pct`), and its confirmation rounds alike: the
    calibration's check of what a pull request's path catches."""

    @property
    def pct(self) -> float:
        return float(self.state.options.orders.canary_pct or 0.0)

    def run_item(
        self, ab: AbSession, nodeid: str, test: str, variant: str, limit: float | None = None
    ) -> None:
        side = ab.driver.b
        ab.driver.slowing = Canary(self.pct, lambda: side.call_ms)
        super().run_item(ab, nodeid, test, variant, limit)

    def ending(self) -> Ending:
        return replace(super().ending(), remeasure_orders=Orders(canary_pct=self.pct))


class Calibrating(AbDriving):
    """See the module's docstring."""

    def __init__(
        self,
        state: SessionState,
        recording: Recording | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        super().__init__(state, recording, watchdog)
        asked = dict(state.options.orders.calibrate or {})
        self.out = Path(str(asked["out"]))
        self.rounds = int(asked.get("rounds", 20))
        self.canary = tuple(float(c) for c in asked.get("canary", ()))
        self.canary_rounds = int(asked.get("canary_rounds", 0))
        self.items: list[Item] = []
        self.began = time.monotonic()

    def start_ab(self, root: Path, items: list[str] | None, paths: Sequence[str] = ()) -> AbSession:
        """Both sides this tree."""
        return ab_session.start(root, self.state.options, items, paths, same_tree=True)

    def base_said(self, ab: AbSession) -> BaseSaid | None:
        """Nothing to compare with: the base side is this tree itself."""
        return None

    def nothing_to_compare(self, items: list[pytest.Item]) -> str:
        return ""

    def run_whole(self, ab: AbSession, item: pytest.Item) -> None:
        pytest.skip("perfguard calibrate measures perf items; this test times itself")

    def run_item(
        self, ab: AbSession, nodeid: str, test: str, variant: str, limit: float | None = None
    ) -> None:
        """The item's calibration rounds (see the module's docstring); the item passes as
        this tree's side ended it."""
        from perfguard.pytest_plugin.ab.driver import Design
        from perfguard.stats.latency import ab_bar
        from perfguard.stats.verdicts import LATENCY_METRICS

        state = self.state
        state.progress.start(nodeid)
        position = ab.items.index(nodeid) if nodeid in ab.items else 0
        th = state.planned.thresholds.for_test(test)
        design = Design(
            alpha=th.alpha,
            bar_pct=ab_bar("latency_p50_ms", th),
            tests=max(len(ab.items), 1) * len(LATENCY_METRICS),
            margin_pct=th.min_change_pct,
        )
        driver = ab.driver
        driver.connect(ab.items[position:], state.progress)
        kinds = schedule(self.rounds, self.canary, self.canary_rounds, state.options.seed)
        # the item's limit, for its build and for each round (and its confirmations)
        rounds = len(kinds) * (1 + state.options.confirm)
        for side in (driver.a, driver.b):
            side.limit(None if limit is None else limit * (1 + rounds))
        outcomes: dict[str, SideOutcome] = {}
        try:
            item = self._calibrate(
                driver, (nodeid, test, variant), ab.items[position:], kinds, design, th, outcomes
            )
        finally:
            for side in (driver.a, driver.b):
                side.limit(None)
        self.items.append(item)
        head = outcomes.get("B")
        if head is not None and head.result is not None:
            state.record(head.result, nodeid)
        if item.error is not None:
            pytest.fail(f"not calibrated: {item.error}", pytrace=False)

    def _calibrate(
        self,
        driver: Driver,
        names: tuple[str, str, str],
        remaining: list[str],
        kinds: list[float],
        design: Any,
        th: Thresholds,
        outcomes: dict[str, SideOutcome],
    ) -> Item:
        nodeid, test, variant = names
        progress = self.state.progress
        active = driver.open_item(nodeid, remaining, progress, outcomes)
        if len(active) < 2:
            ended = next(iter(outcomes.values()), None)
            why = "a side did not start it" if ended is None else ended.message or ended.outcome
            driver.close_item(active, outcomes, progress)
            return Item(test, variant, error=why)
        rng = random.Random(f"{self.state.options.seed}:{nodeid}")
        canary = driver.slowing = Canary(0.0, lambda: driver.b.call_ms)
        rounds: list[Round] = []
        for k, kind in enumerate(kinds):
            label = "identical" if not kind else f"canary +{kind:g}%"
            progress(f"calibrate: round {k + 1} of {len(kinds)} ({label})")
            canary.slow(kind)
            main = self._compare(driver, active, outcomes, rng, design)
            if main is None:
                break
            slower_ms = canary.mean_ms
            again: list[Comparison] = []
            if flagged_before_correction(test, variant, main, th):
                for _ in range(self.state.options.confirm):
                    progress(f"calibrate: round {k + 1} confirmed")
                    taken = self._compare(driver, active, outcomes, rng, design)
                    if taken is None:
                        break
                    again.append(taken)
            rounds.append(Round(kind, slower_ms, main, tuple(again)))
            if len(active) < 2:
                break
        # the operators' blocks, as many comparisons of them as identical rounds (at most 5)
        op_rounds = 0
        for _ in range(min(sum(1 for kind in kinds if not kind), OP_ROUNDS)):
            if len(active) < 2 or not driver.take_op_pairs(active, outcomes, rng, progress):
                break
            op_rounds += 1
        crashed = len(active) < 2
        driver.close_item(active, outcomes, progress)
        delay = "device" if _cuda_timed(outcomes) else "host"
        error = None
        if crashed:
            ended = outcomes.get("A") or outcomes.get("B")
            error = f"a worker ended during round {len(rounds) + 1}: " + (
                ended.message if ended is not None else "crashed"
            )
        call_ms = canary.steady_ms or driver.b.call_ms
        ops = None if crashed else _op_noise(outcomes, op_rounds, th)
        return Item(test, variant, tuple(rounds), call_ms, delay, error, ops)

    def _compare(
        self,
        driver: Driver,
        active: list[Any],
        outcomes: dict[str, SideOutcome],
        rng: random.Random,
        design: Any,
    ) -> Comparison | None:
        """One comparison (pairs until the design decides); None when a worker ended."""
        began = time.monotonic()
        taken: Taken = driver.take_pairs(active, outcomes, rng, self.state.progress, design)
        if len(active) < 2:
            return None
        timed = sum(sum(block) for block in (*taken.a, *taken.b))
        return Comparison(
            taken.a, taken.b, taken.pairing.to_json(), time.monotonic() - began, timed
        )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        ab = self.ab
        launches = {} if ab is None else {"A": ab.driver.a.launches, "B": ab.driver.b.launches}
        calibration = Calibration(
            rounds=self.rounds,
            canary=self.canary,
            canary_rounds=self.canary_rounds,
            confirm=self.state.options.confirm,
            thresholds=self.state.planned.thresholds.to_json(),
            items=tuple(self.items),
            device=self.state.options.device,
            launches=launches,
            wall_s=time.monotonic() - self.began,
        )
        write_json_atomic(self.out, calibration.to_json())
        if ab is not None:  # nothing to compare with: the base side is this tree itself
            ab.close(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
            self.ab = None
        super().pytest_sessionfinish(session, exitstatus)


def _op_noise(
    outcomes: dict[str, SideOutcome], rounds: int, th: Thresholds
) -> dict[str, Any] | None:
    """What both sides read for each operator or kernel, where both kept their times."""
    a, b = outcomes.get("A"), outcomes.get("B")
    if a is None or b is None or a.result is None or b.result is None:
        return None
    base, head = a.result.details.op_times, b.result.details.op_times
    if base is None or head is None:
        return None
    return op_noise(base, head, rounds, th)


def _cuda_timed(outcomes: dict[str, SideOutcome]) -> bool:
    head = outcomes.get("B")
    clock = None if head is None or head.result is None else head.result.details.clock
    return bool(clock and clock.startswith("cuda_event"))
