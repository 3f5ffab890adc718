"""Same-job A/B samples until decided: the looks, their levels, the stop, the verdict."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import mstats

from perfguard.pytest_plugin.ab.driver import Design, Driver, SideOutcome
from perfguard.records import Details, Run, VariantResult
from perfguard.stats.sequential import LOOKS, look, look_alpha, should_stop
from perfguard.stats.significance import (
    log_ratio_interval,
    paired_t_test,
    paired_test,
    paired_trimmed_test,
)
from perfguard.stats.verdicts import compare_runs
from tests.factories import from_blocks


def test_the_looks_spend_exactly_alpha_and_early_looks_least() -> None:
    levels = [look_alpha(n, 0.05) for n in LOOKS]
    assert all(level is not None and 0 < level < 0.05 for level in levels)
    assert math.isclose(sum(level or 0 for level in levels), 0.05)
    assert look_alpha(7, 0.05) is None  # no look planned there


def test_a_look_decides_each_way_or_waits() -> None:
    rng = np.random.default_rng(0)
    quiet = rng.normal(0.0, 0.01, 6)
    assert look(quiet, 0.014, 5.0).verdict == "unchanged"
    slower = rng.normal(math.log(1.5), 0.01, 6)
    found = look(slower, 0.014, 5.0)
    assert (found.verdict, found.decided) == ("regression", True)
    assert 45 < found.change_pct < 55 and found.interval_pct[0] > 0
    assert look(-slower, 0.014, 5.0).verdict == "improvement"
    noisy = rng.normal(math.log(1.06), 0.08, 6)
    assert (look(noisy, 0.014, 5.0).verdict, look(noisy, 0.014, 5.0).decided) == (
        "undecided",
        False,
    )
    # the last look decides whatever it finds
    assert look(noisy, 0.014, 5.0, last=True).decided


def test_a_change_is_called_only_where_the_runs_correction_will_agree() -> None:
    rng = np.random.default_rng(4)
    ratios = rng.normal(math.log(1.10), 0.035, 6)  # +10%, significant alone, not among many
    assert look(ratios, 0.014, 5.0).verdict == "regression"
    assert look(ratios, 0.014, 5.0, tests=60).verdict == "undecided"


def test_unchanged_rules_out_the_margin_and_a_change_is_called_from_the_bar() -> None:
    # identical code, pairs scattering by 3% (a quiet item on a VM): six pairs cannot rule
    # out a 5% change, they do rule out 10%, the smallest change that matters
    quiet = np.array([0.03, -0.035, 0.02, -0.025, 0.04, -0.03])
    assert look(quiet, 0.014, 5.0, tests=6).verdict == "undecided"
    assert look(quiet, 0.014, 5.0, tests=6, margin_pct=10.0).verdict == "unchanged"
    # a margin below the bar is the bar
    assert look(quiet, 0.014, 5.0, tests=6, margin_pct=2.0).verdict == "undecided"
    # +6.5% with an interval inside 10%: not called at this look, and not unchanged either
    # (more pairs may call it; a stop would end in `inconclusive`)
    near = quiet * 0.5 + math.log(1.065)
    _, low, high = log_ratio_interval(near, 0.014 / 2, "mean")
    assert math.log(0.9) < low and high < math.log(1.1)
    assert look(near, 0.014, 5.0, tests=60, margin_pct=10.0).verdict == "undecided"
    assert look(near, 0.014, 5.0, tests=1, margin_pct=10.0).verdict == "regression"


def test_a_change_at_the_margin_is_almost_never_stopped_as_unchanged() -> None:
    stopped_unchanged = 0
    for seed in range(400):  # +10%, pairs scattering by 4%, looked at as the driver does
        ratios = np.random.default_rng(seed).normal(math.log(1.10), 0.04, 32)
        for pairs in LOOKS:
            alpha_k = look_alpha(pairs, 0.05) or 0.0
            found = look(ratios[:pairs], alpha_k, 5.0, tests=6, margin_pct=10.0)
            if found.decided:
                stopped_unchanged += found.verdict == "unchanged"
                break
    assert stopped_unchanged <= 4  # the design's bound is alpha / 4 (one tail): 1.25%


def _bursty(change: float, n: int, seed: int, hit: float = 0.3) -> np.ndarray:
    """Log ratios of pairs on a busy host: a share `hit` of them had a burst of other work
    cover one block (which side, at random), doubling its time."""
    rng = np.random.default_rng(seed)
    ratios = rng.normal(math.log1p(change), 0.02, n)
    burst = rng.random(n) < hit
    return ratios + np.where(burst, rng.choice([-1.0, 1.0], n) * math.log(2.0), 0.0)


def test_pairs_a_burst_hit_on_one_side_do_not_hide_a_change() -> None:
    called = mean_alone = 0
    for seed in range(40):  # +20% at the last look, a third of the pairs hit by a burst
        ratios = _bursty(0.20, 32, seed, hit=0.35)
        called += look(ratios, 0.0086, 5.0, tests=6).verdict == "regression"
        low = log_ratio_interval(ratios, 0.0086 / 2 / 6, "mean")[1]
        mean_alone += low > 0
    assert called >= 30  # 31 of 40 with these seeds
    assert mean_alone <= 10  # the mean alone called 6 of them


def test_a_large_change_split_by_bursts_is_called_by_the_mean() -> None:
    # +100%, and a burst on the head side of every other pair: two clusters, 0.69 and 1.39
    ratios = np.array([math.log(2.0), math.log(4.0)] * 5) + np.linspace(-0.01, 0.01, 10)
    found = look(ratios, look_alpha(10, 0.05) or 0.0, 5.0, tests=6)
    assert (found.verdict, found.statistic) == ("regression", "mean")


def test_identical_code_on_a_bursty_host_is_rarely_called_a_change() -> None:
    called = 0
    for seed in range(400):
        ratios = _bursty(0.0, 32, seed)
        for pairs in LOOKS:
            found = look(ratios[:pairs], look_alpha(pairs, 0.05) or 0.0, 5.0, tests=6)
            if found.decided:
                called += found.verdict in ("regression", "improvement")
                break
    assert called <= 4  # 1%; the design's bound is alpha / M = 0.8%


def test_the_trimmed_test_agrees_with_scipys_trimmed_mean_interval() -> None:
    rng = np.random.default_rng(7)
    base = rng.uniform(1.0, 2.0, 12)
    head = base * np.exp(_bursty(0.08, 12, seed=7))
    _, p, df = paired_trimmed_test(base, head)
    assert df == 12 - 2 * 3 - 1
    d = np.log(head / base)
    for level in (0.001, 0.01, 0.05, 0.2):
        low, high = mstats.trimmed_mean_ci(d, limits=(0.25, 0.25), alpha=level)
        assert (p < level) == (low > 0 or high < 0)
    assert paired_test(base, head) == min(1.0, 2 * min(p, paired_t_test(base, head)[1]))


def test_the_trimmed_mean_and_its_error_are_scipys() -> None:
    rng = np.random.default_rng(11)
    for n in (2, 3, 4, 5, 6, 7, 10, 16, 24, 32):
        for _ in range(20):
            d = _bursty(0.05, n, int(rng.integers(1 << 30)))
            est, low, high = log_ratio_interval(d, 0.01, "trimmed")
            assert math.isclose(est, float(mstats.trimmed_mean(d, limits=(0.25, 0.25))))
            se = float(mstats.trimmed_stde(d, limits=(0.25, 0.25)))
            assert math.isclose((high - low) / 2, _t_half(0.01, n) * se, rel_tol=1e-9)


def _t_half(level: float, n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(1 - level / 2, max(n - 2 * int(0.25 * n) - 1, 1)))


def _blocks(center: float, spread: float, n: int, rng: random.Random) -> list[tuple[float, ...]]:
    return [tuple(center * (1 + rng.gauss(0, spread)) for _ in range(20)) for _ in range(n)]


def test_the_stop_waits_for_a_look_and_for_the_median() -> None:
    rng = random.Random(1)
    base, head = _blocks(1.0, 0.002, 8, rng), _blocks(1.0, 0.002, 8, rng)
    assert should_stop(base[:5], head[:5], alpha=0.05, bar_pct=5)[0] is False  # no look at 5
    stop, found = should_stop(base[:6], head[:6], alpha=0.05, bar_pct=5)
    assert stop and found["latency_p50_ms"]["verdict"] == "unchanged"
    assert set(found) == {"latency_p50_ms"}


class FakeSide:
    """A worker that hands over blocks of a given center and noise, deterministically, and
    writes each step the driver asks of it in `log` (shared by both sides)."""

    def __init__(
        self, name: str, center: float, spread: float, seed: int, log: list[str] | None = None
    ) -> None:
        self.name, self.label = name, f"side {name}"
        self.repeats = 10
        self.center, self.spread = center, spread
        self.rng = random.Random(seed)
        self.blocks = 0
        self.alive = True  # started: the driver need not start it
        self.log = [] if log is None else log
        self.fails_to_build: SideOutcome | None = None
        self.time_limit: float | None = None
        self.call_ms: float | None = center
        self.delays: list[float] = []  # the canary's delay each block was asked for
        self.op_blocks = 0  # profiled blocks after the timed ones: a test asks for some

    def limit(self, seconds: float | None) -> None:
        self.time_limit = seconds

    def begin(self, nodeid: str, remaining: Any, floor: Any = None) -> None:
        self.log.append(f"{self.name} begin")

    def built(self) -> SideOutcome | None:
        self.log.append(f"{self.name} built")
        return self.fails_to_build

    def take_turn(self) -> None:
        self.log.append(f"{self.name} turn")

    def block(self, slower_ms: float = 0.0) -> tuple[float, ...]:
        self.log.append(f"{self.name} block")
        self.delays.append(slower_ms)
        self.blocks += 1
        # the whole block shares the host's state of the moment: noise per block
        level = self.center * math.exp(self.rng.gauss(0, self.spread))
        return tuple(level * (1 + self.rng.gauss(0, 0.002)) for _ in range(30))

    def op_block(self) -> None:
        self.log.append(f"{self.name} ops")

    def finish(self) -> SideOutcome:
        return SideOutcome(None, "passed")

    def stop(self, at_once: bool = False) -> None:
        pass


def _driver(
    tmp_path: Path, head_center: float, spread: float, seed: int = 0, log: list[str] | None = None
) -> Driver:
    driver = Driver(tmp_path, "base", tmp_path, lambda _root: [], seed=seed)
    driver.a = FakeSide("A", 1.0, spread, seed, log)  # type: ignore[assignment]
    driver.b = FakeSide("B", head_center, spread, seed + 1, log)  # type: ignore[assignment]
    return driver


def test_a_canary_is_a_share_of_the_timed_calls_not_of_the_warm_up(tmp_path: Path) -> None:
    """A training step's warm-up calls ran twice its steady time: a +10% canary sized from
    them added 20%. Once a block was timed without a delay, the delay is a share of that
    block's call time; only a first block before any such one falls back on the warm-up."""
    from perfguard.pytest_plugin.ab.calibrating import Canary

    log: list[str] = []
    driver = _driver(tmp_path, 1.0, 0.001, log=log)
    driver.b.call_ms = 2.0  # what the worker saw at the end of its warm-up
    driver.slowing = Canary(10.0, lambda: driver.b.call_ms)  # the calibrating roles' seam
    driver.measure("t::x", ["t::x"], lambda _: None, Design())
    b = driver.b.delays  # type: ignore[attr-defined]
    first_b = log.index("B block") < log.index("A block")
    assert b[0] == pytest.approx(0.2 if first_b else 0.1, rel=0.02)
    assert b[1:] == pytest.approx([0.1] * (len(b) - 1), rel=0.02)
    assert driver.a.delays == [0.0] * len(driver.a.delays)  # type: ignore[attr-defined]


def test_a_pull_requests_driver_slows_nothing_and_never_names_the_canary(tmp_path: Path) -> None:
    """The canary enters through one seam that only the calibrating roles set: a pull
    request's driver and its confirmation neither read it nor branch on it."""
    import perfguard.pytest_plugin.ab.driver as driver_module
    import perfguard.pytest_plugin.confirm as confirm_module

    driver = _driver(tmp_path, 1.0, 0.001)
    driver.measure("t::x", ["t::x"], lambda _: None, Design())
    assert set(driver.a.delays) | set(driver.b.delays) == {0.0}  # type: ignore[attr-defined]
    for module in (driver_module, confirm_module):
        text = Path(str(module.__file__)).read_text(encoding="utf-8").lower()
        assert "canary" not in text, module.__name__


def test_both_sides_build_at_once_and_time_one_after_the_other(tmp_path: Path) -> None:
    log: list[str] = []
    driver = _driver(tmp_path, 1.5, 0.01, log=log)
    driver.measure("t::x", ["t::x"], lambda _: None, Design())
    # both start the item before either is waited for; the turns come one by one, after
    # both are built, and before the first block
    assert log[:6] == ["A begin", "B begin", "A built", "B built", "A turn", "B turn"]
    assert set(log[6:]) == {"A block", "B block"}


def test_profiled_pairs_come_after_the_timed_ones_each_side_once_a_pair(tmp_path: Path) -> None:
    log: list[str] = []
    driver = _driver(tmp_path, 1.0, 0.01, log=log)
    driver.a.op_blocks, driver.b.op_blocks = 5, 3  # the fewer: 3 pairs
    driver.measure("t::x", ["t::x"], lambda _: None, Design())
    first = log.index("A ops")
    assert "A block" not in log[first:] and "B block" not in log[first:]
    ops = log[first - 1 if log[first - 1] == "B ops" else first :]
    assert sorted(ops[0:2]) == sorted(ops[2:4]) == sorted(ops[4:6]) == ["A ops", "B ops"]
    assert len(ops) == 6
    driver.recording_sites = True  # memory by site: the profiler is taken, no op pairs
    log.clear()
    driver.measure("t::x", ["t::x"], lambda _: None, Design())
    assert "A ops" not in log


def test_a_side_that_fails_to_build_leaves_the_other_measured_alone(tmp_path: Path) -> None:
    log: list[str] = []
    driver = _driver(tmp_path, 1.0, 0.01, log=log)
    failed = SideOutcome(None, "failed", "RuntimeError: boom")
    driver.a.fails_to_build = failed  # type: ignore[attr-defined]
    base, head, pairing = driver.measure("t::x", ["t::x"], lambda _: None, Design())
    assert base is failed and head.outcome == "passed"
    assert "A turn" not in log and "A block" not in log
    assert pairing.sequential is None  # nothing to pair: B takes its own repeats
    assert len(pairing.orders) == driver.b.repeats == log.count("B block")


@pytest.mark.parametrize(
    ("head", "spread", "pairs"),
    [
        (1.0, 0.01, 6),  # identical on a quiet host: the first look
        (1.5, 0.01, 6),  # +50% on a quiet host: the first look
        (1.0, 0.25, 32),  # a host so noisy nothing is decided: the cap
    ],
)
def test_the_driver_takes_pairs_until_decided(
    tmp_path: Path, head: float, spread: float, pairs: int
) -> None:
    driver = _driver(tmp_path, head, spread)
    _, _, pairing = driver.measure("t::x", ["t::x"], lambda _: None, Design(0.05, 5.0))
    assert len(pairing.orders) == pairs
    assert pairing.sequential is not None and pairing.sequential["stopped_at"] == pairs
    assert driver.a.blocks == driver.b.blocks == pairs  # type: ignore[attr-defined]


def test_a_driver_recording_allocation_sites_takes_one_pair(tmp_path: Path) -> None:
    """A child session that records allocation sites decides nothing from its blocks: one
    pair, however undecided (the noisy host above takes the cap of 32)."""
    driver = _driver(tmp_path, 1.0, 0.25)
    driver.recording_sites = True
    _, _, pairing = driver.measure("t::x", ["t::x"], lambda _: None, Design(0.05, 5.0))
    assert len(pairing.orders) == 1 and pairing.sequential is None
    assert driver.a.blocks == driver.b.blocks == 1  # type: ignore[attr-defined]


def test_a_noisier_host_gets_more_pairs_not_an_inconclusive(tmp_path: Path) -> None:
    taken, verdicts = [], []
    for seed in range(5):
        driver = _driver(tmp_path, 1.10, 0.05, seed)
        _, _, pairing = driver.measure("t::x", ["t::x"], lambda _: None, Design())
        assert pairing.sequential is not None
        taken.append(len(pairing.orders))
        verdicts.append(pairing.sequential["latency_p50_ms"]["verdict"])
    assert max(taken) > LOOKS[0]
    assert verdicts == ["regression"] * 5


def _result(blocks: list[tuple[float, ...]], sequential: bool) -> VariantResult:
    ab: dict[str, Any] = {"pairs": len(blocks)}
    if sequential:
        ab["sequential"] = {"looks": list(LOOKS), "stopped_at": len(blocks)}
    return from_blocks(blocks, Details(ab=ab))


def test_the_verdict_holds_a_sequential_item_to_the_level_of_its_look() -> None:
    rng = random.Random(3)
    base = _blocks(1.0, 0.003, 6, rng)
    # +7%, with pair noise that makes p about 1e-3: significant at 0.05, not at look 1's level
    head = [tuple(t * 1.07 * (1 + rng.gauss(0, 0.04)) for t in b) for b in base]
    head = [
        tuple(v * s for v in b)
        for b, s in zip(head, (1.0, 1.05, 0.96, 1.03, 0.98, 1.0), strict=True)
    ]

    def p50(sequential: bool) -> Any:
        run_a = Run(commit=None, machine="m", environment={}, results=(_result(base, sequential),))
        run_b = Run(commit=None, machine="m", environment={}, results=(_result(head, sequential),))
        [c] = [x for x in compare_runs(run_a, run_b, paired=True) if x.metric == "latency_p50_ms"]
        return c

    fixed, seq = p50(False), p50(True)
    level = look_alpha(6, 0.05)
    assert level is not None
    assert seq.p_value == pytest.approx(min(1.0, fixed.p_value * 0.05 / level))
    assert seq.reasons[0].kind == "paired_sequential" and fixed.reasons[0].kind == "paired"
