"""Same-job A/B samples until decided: the looks, their levels, the stop, the verdict."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.ab.driver import Design, Driver, SideOutcome
from perfguard.records import Run, VariantResult
from perfguard.stats.sequential import LOOKS, look, look_alpha, should_stop
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
    """A worker that hands over blocks of a given center and noise, deterministically."""

    def __init__(self, name: str, center: float, spread: float, seed: int) -> None:
        self.name, self.label = name, f"side {name}"
        self.repeats = 10
        self.center, self.spread = center, spread
        self.rng = random.Random(seed)
        self.blocks = 0
        self.alive = True  # started: the driver need not start it

    def begin(self, nodeid: str, remaining: Any) -> None:
        return None

    def block(self) -> tuple[float, ...]:
        self.blocks += 1
        # the whole block shares the host's state of the moment: noise per block
        level = self.center * math.exp(self.rng.gauss(0, self.spread))
        return tuple(level * (1 + self.rng.gauss(0, 0.002)) for _ in range(30))

    def finish(self) -> SideOutcome:
        return SideOutcome(None, "passed")

    def stop(self, at_once: bool = False) -> None:
        pass


def _driver(tmp_path: Path, head_center: float, spread: float, seed: int = 0) -> Driver:
    driver = Driver(tmp_path, "base", tmp_path, lambda _root: [], seed=seed)
    driver.a = FakeSide("A", 1.0, spread, seed)  # type: ignore[assignment]
    driver.b = FakeSide("B", head_center, spread, seed + 1)  # type: ignore[assignment]
    return driver


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
    return from_blocks(blocks, {"ab": ab})


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
    assert "sequential" in (seq.note or "") and "sequential" not in (fixed.note or "")
