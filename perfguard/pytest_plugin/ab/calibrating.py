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
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard.calibrate.analysis import flagged_before_correction
from perfguard.calibrate.record import Calibration, Comparison, Item, Round, schedule
from perfguard.files import write_json_atomic
from perfguard.pytest_plugin.ab import session as ab_session
from perfguard.pytest_plugin.ab.roles import AbDriving

if TYPE_CHECKING:
    from perfguard.pytest_plugin.ab.driver import Driver, Taken
    from perfguard.pytest_plugin.ab.session import AbSession
    from perfguard.pytest_plugin.ab.side import SideOutcome
    from perfguard.stats.thresholds import Thresholds


class Calibrating(AbDriving):
    """See the module's docstring."""

    def __init__(self, state: Any) -> None:
        super().__init__(state)
        asked = dict(state.options.orders.calibrate or {})
        self.out = Path(str(asked["out"]))
        self.rounds = int(asked.get("rounds", 20))
        self.canary = tuple(float(c) for c in asked.get("canary", ()))
        self.canary_rounds = int(asked.get("canary_rounds", 0))
        self.items: list[Item] = []
        self.began = time.monotonic()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        config = session.config
        paths = ab_session.session_paths(config)
        if paths is None or config.option.collectonly:
            return
        self.state.ab = ab_session.start(
            Path(config.rootpath), self.state.options, None, paths, same_tree=True
        )

    def start(self, session: pytest.Session) -> None:
        from perfguard.pytest_plugin.collection import measured_in_ab

        perf_items = [i.nodeid for i in session.items if measured_in_ab(i)]
        if perf_items and self.state.ab is None:
            root = Path(session.config.rootpath)
            self.state.ab = ab_session.start(root, self.state.options, perf_items, same_tree=True)
        super().start(session)

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
        th = state.thresholds().for_test(test)
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
        rounds: list[Round] = []
        for k, kind in enumerate(kinds):
            label = "identical" if not kind else f"canary +{kind:g}%"
            progress(f"calibrate: round {k + 1} of {len(kinds)} ({label})")
            main = self._compare(driver, active, outcomes, rng, design, kind)
            if main is None:
                break
            again: list[Comparison] = []
            if flagged_before_correction(test, variant, main[0], th):
                for _ in range(self.state.options.confirm):
                    progress(f"calibrate: round {k + 1} confirmed")
                    taken = self._compare(driver, active, outcomes, rng, design, kind)
                    if taken is None:
                        break
                    again.append(taken[0])
            rounds.append(Round(kind, main[1], main[0], tuple(again)))
            if len(active) < 2:
                break
        crashed = len(active) < 2
        driver.close_item(active, outcomes, progress)
        delay = "device" if _cuda_timed(outcomes) else "host"
        error = None
        if crashed:
            ended = outcomes.get("A") or outcomes.get("B")
            error = f"a worker ended during round {len(rounds) + 1}: " + (
                ended.message if ended is not None else "crashed"
            )
        call_ms = driver.steady_ms or driver.b.call_ms
        return Item(test, variant, tuple(rounds), call_ms, delay, error)

    def _compare(
        self,
        driver: Driver,
        active: list[Any],
        outcomes: dict[str, SideOutcome],
        rng: random.Random,
        design: Any,
        slower_pct: float,
    ) -> tuple[Comparison, float] | None:
        """One comparison (pairs until the design decides); None when a worker ended."""
        began = time.monotonic()
        taken: Taken = driver.take_pairs(
            active, outcomes, rng, self.state.progress, design, slower_pct
        )
        if len(active) < 2:
            return None
        timed = sum(sum(block) for block in (*taken.a, *taken.b))
        comparison = Comparison(
            taken.a, taken.b, taken.pairing.to_json(), time.monotonic() - began, timed
        )
        return comparison, taken.slower_ms

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        ab = self.state.ab
        launches = {} if ab is None else {"A": ab.driver.a.launches, "B": ab.driver.b.launches}
        calibration = Calibration(
            rounds=self.rounds,
            canary=self.canary,
            canary_rounds=self.canary_rounds,
            confirm=self.state.options.confirm,
            thresholds=self.state.thresholds().to_json(),
            items=tuple(self.items),
            device=self.state.options.device,
            launches=launches,
            wall_s=time.monotonic() - self.began,
        )
        write_json_atomic(self.out, calibration.to_json())
        if ab is not None:  # nothing to compare with: the base side is this tree itself
            ab.close(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
            self.state.ab = None
        super().pytest_sessionfinish(session, exitstatus)


def _cuda_timed(outcomes: dict[str, SideOutcome]) -> bool:
    head = outcomes.get("B")
    clock = None if head is None or head.result is None else head.result.details.clock
    return bool(clock and clock.startswith("cuda_event"))
