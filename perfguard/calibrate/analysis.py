"""What a calibration says: each round judged as a pull request's check judges its A/B run,
then per item the false alarms, the canaries caught, the smallest change called reliably, the
bar to advise and the cost.

The same statistics as the pull request's path, by the same functions: the rounds of one kind
at one index (every item's k-th identical round, or every item's k-th round of one canary)
form a run, compared paired (`stats.verdicts.compare_runs`: the sequential look's level, the
run-wide Benjamini-Hochberg correction, the bars), and its flags re-measured
(`confirm.confirm_same_job`, replaying the confirmation rounds the calibration took).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perfguard.calibrate.record import Calibration, Comparison, Item
from perfguard.confirm import confirm_same_job, replay
from perfguard.records import Comparison as Verdict
from perfguard.records import Details, Metrics, Run, VariantResult
from perfguard.stats.latency import Pending, latency_comparisons
from perfguard.stats.summary import summarize
from perfguard.stats.thresholds import LATENCY_METRICS, Thresholds
from perfguard.stats.verdicts import compare_runs

RELIABLE = 0.9
"""A canary is called reliably when at least this share of its rounds were caught."""
ADVISE_SDS = 3.0
"""The bar advised for an item: this many standard deviations of its identical rounds'
paired change, rounded up to half a percent, and at least 1%."""


@dataclass(frozen=True)
class Canary:
    """One canary level on one item: caught in `caught` of `rounds`; `measured_pct` the
    median of the paired change the rounds estimated (what the delay amounted to)."""

    pct: float
    rounds: int
    caught: int
    measured_pct: float | None

    @property
    def share(self) -> float:
        return self.caught / self.rounds if self.rounds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "pct": self.pct,
            "rounds": self.rounds,
            "caught": self.caught,
            "measured_pct": self.measured_pct,
        }


@dataclass(frozen=True)
class ItemReport:
    """What the calibration says of one item."""

    test: str
    variant: str
    bar_pct: float  # the item's bar as configured (`ab_min_change_pct`)
    error: str | None = None
    call_ms: float | None = None
    delay: str = "host"
    identical: int = 0  # identical rounds judged
    false_alarms: int = 0  # of them, flagged after confirmation
    changes_pct: tuple[float, ...] = ()  # the identical rounds' paired p50 change
    canaries: tuple[Canary, ...] = ()
    device_s: float = 0.0  # per comparison, confirmations included
    wall_s: float = 0.0

    @property
    def noise_pct(self) -> float | None:
        """The spread of the paired change over identical rounds (standard deviation)."""
        return statistics.stdev(self.changes_pct) if len(self.changes_pct) > 1 else None

    @property
    def reliable_pct(self) -> float | None:
        """The smallest canary caught reliably, every larger one too (None: none was)."""
        found = None
        for canary in sorted(self.canaries, key=lambda c: -c.pct):
            if canary.rounds == 0 or canary.share < RELIABLE:
                break
            found = canary.pct
        return found

    @property
    def advised_bar_pct(self) -> float | None:
        noise = self.noise_pct
        if noise is None:
            return None
        return max(1.0, math.ceil(ADVISE_SDS * noise * 2) / 2)

    @property
    def missed(self) -> tuple[float, ...]:
        """Canaries at or above the item's bar that no round caught: the check cannot fire
        on this item here."""
        return tuple(
            c.pct for c in self.canaries if c.pct >= self.bar_pct and c.rounds and not c.caught
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "error": self.error,
            "call_ms": self.call_ms,
            "delay": self.delay,
            "bar_pct": self.bar_pct,
            "identical": {
                "rounds": self.identical,
                "false_alarms": self.false_alarms,
                "noise_pct": self.noise_pct,
                "changes_pct": list(self.changes_pct),
            },
            "canaries": [c.to_json() for c in self.canaries],
            "reliable_pct": self.reliable_pct,
            "advised_bar_pct": self.advised_bar_pct,
            "missed": list(self.missed),
            "cost": {"device_s": self.device_s, "wall_s": self.wall_s},
        }


@dataclass(frozen=True)
class Report:
    """The calibration, judged."""

    calibration: Calibration
    items: tuple[ItemReport, ...] = field(default_factory=tuple)

    @property
    def missed(self) -> list[tuple[ItemReport, float]]:
        return [(item, pct) for item in self.items for pct in item.missed]

    @property
    def false_alarm_rate(self) -> float | None:
        rounds = sum(i.identical for i in self.items)
        return sum(i.false_alarms for i in self.items) / rounds if rounds else None

    def detection_rate(self, pct: float) -> float | None:
        found = [c for i in self.items for c in i.canaries if c.pct == pct]
        rounds = sum(c.rounds for c in found)
        return sum(c.caught for c in found) / rounds if rounds else None

    def to_json(self) -> dict[str, Any]:
        cal = self.calibration
        return {
            "rounds": cal.rounds,
            "canary": list(cal.canary),
            "canary_rounds": cal.canary_rounds,
            "confirm": cal.confirm,
            "device": cal.device,
            "launches": dict(cal.launches),
            "wall_s": cal.wall_s,
            "false_alarm_rate": self.false_alarm_rate,
            "detection_rate": {f"{p:g}": self.detection_rate(p) for p in cal.canary},
            "missed": [{"test": i.test, "variant": i.variant, "pct": p} for i, p in self.missed],
            "items": [i.to_json() for i in self.items],
        }


def analyze(calibration: Calibration) -> Report:
    """Judge every round as the pull request's check would, and sum them up per item."""
    thresholds = Thresholds.from_json(calibration.thresholds)
    flags: dict[tuple[str, str], dict[float, list[bool]]] = {}
    changes: dict[tuple[str, str], dict[float, list[float]]] = {}
    for kind in (0.0, *calibration.canary):
        for index in range(_most_rounds(calibration.items, kind)):
            judged = _judge_run(calibration, thresholds, kind, index)
            for key, (flagged, change) in judged.items():
                flags.setdefault(key, {}).setdefault(kind, []).append(flagged)
                if change is not None:
                    changes.setdefault(key, {}).setdefault(kind, []).append(change)
    reports = []
    for item in calibration.items:
        key = (item.test, item.variant)
        bar = thresholds.for_test(item.test).ab_min_change_pct
        if item.error is not None or not item.rounds:
            reports.append(ItemReport(item.test, item.variant, bar, item.error or "no rounds"))
            continue
        mine, moved = flags.get(key, {}), changes.get(key, {})
        canaries = tuple(
            Canary(
                pct,
                len(mine.get(pct, [])),
                sum(mine.get(pct, [])),
                statistics.median(moved[pct]) if moved.get(pct) else None,
            )
            for pct in calibration.canary
        )
        compared = [c for r in item.rounds for c in (r.main, *r.confirmations)]
        reports.append(
            ItemReport(
                test=item.test,
                variant=item.variant,
                bar_pct=bar,
                call_ms=item.call_ms,
                delay=item.delay,
                identical=len(mine.get(0.0, [])),
                false_alarms=sum(mine.get(0.0, [])),
                changes_pct=tuple(moved.get(0.0, [])),
                canaries=canaries,
                device_s=sum(c.device_ms for c in compared) / 1000 / len(item.rounds),
                wall_s=sum(c.wall_s for c in compared) / len(item.rounds),
            )
        )
    return Report(calibration, tuple(reports))


def _most_rounds(items: Sequence[Item], kind: float) -> int:
    return max((sum(r.slower_pct == kind for r in i.rounds) for i in items), default=0)


def _judge_run(
    calibration: Calibration, thresholds: Thresholds, kind: float, index: int
) -> dict[tuple[str, str], tuple[bool, float | None]]:
    """The run of every item's `index`-th round of `kind`, judged as a pull request's A/B
    run: (flagged after confirmation, the paired change of the median) per item."""
    base: list[VariantResult] = []
    head: list[VariantResult] = []
    confirm_base: list[list[VariantResult]] = [[] for _ in range(calibration.confirm)]
    confirm_head: list[list[VariantResult]] = [[] for _ in range(calibration.confirm)]
    for item in calibration.items:
        rounds = [r for r in item.rounds if r.slower_pct == kind]
        if item.error is not None or index >= len(rounds):
            continue
        chosen = rounds[index]
        a, b = results_of(item.test, item.variant, chosen.main)
        base.append(a)
        head.append(b)
        for k, again in enumerate(chosen.confirmations[: calibration.confirm]):
            ca, cb = results_of(item.test, item.variant, again)
            confirm_base[k].append(ca)
            confirm_head[k].append(cb)
    if not head:
        return {}
    base_run = Run(commit=None, machine="calibration", environment={}, results=tuple(base))
    head_run = Run(commit=None, machine="calibration", environment={}, results=tuple(head))
    run = replace(head_run, comparisons=compare_runs(base_run, head_run, thresholds, paired=True))
    if calibration.confirm > 0:
        remeasure = replay(confirm_head, confirm_base)
        run = confirm_same_job(run, "calibration", remeasure, calibration.confirm, thresholds, [])
    return {r.key: _verdict(run.comparisons, r.key) for r in head}


def _verdict(comparisons: Sequence[Verdict], key: tuple[str, str]) -> tuple[bool, float | None]:
    mine = [c for c in comparisons if (c.test, c.variant) == key and c.metric in LATENCY_METRICS]
    flagged = any(c.gating and c.verdict in ("regression", "improvement") for c in mine)
    median = next((c.change_pct for c in mine if c.metric == "latency_p50_ms"), None)
    return flagged, median


def results_of(
    test: str, variant: str, comparison: Comparison
) -> tuple[VariantResult, VariantResult]:
    """Each side's result of one comparison, as its worker would have reported the blocks:
    the samples by block, their latency figures, and how the pairs were taken."""
    return (
        _result(test, variant, comparison.a, comparison.pairing),
        _result(test, variant, comparison.b, comparison.pairing),
    )


def _result(
    test: str, variant: str, blocks: Sequence[Sequence[float]], pairing: Mapping[str, Any]
) -> VariantResult:
    samples = tuple(t for block in blocks for t in block)
    if not samples:
        return VariantResult(test=test, variant=variant, status="error", error="no blocks taken")
    return VariantResult(
        test=test,
        variant=variant,
        status="ok",
        metrics=Metrics(**summarize(samples).metric_fields()),
        samples_ms=samples,
        block_sizes=tuple(len(b) for b in blocks),
        details=Details(ab=dict(pairing)),
    )


def flagged_before_correction(
    test: str, variant: str, comparison: Comparison, thresholds: Thresholds
) -> bool:
    """Whether a comparison could be flagged once its run is judged: a gating latency metric
    that moved by its bar with a p-value under the level before the run-wide correction (which
    only raises a p-value). Such a round is given its confirmation rounds at once, while the
    workers hold the item, as the pull request's check would re-measure it."""
    a, b = results_of(test, variant, comparison)
    th = thresholds.for_test(test)
    for found in latency_comparisons(a, b, th, {}, paired=True):
        if not isinstance(found, Pending) or not found.comparison.gating:
            continue
        moved = abs(found.comparison.change_pct or 0.0) >= found.practical_pct
        if moved and found.raw_p < th.alpha:
            return True
    return False
