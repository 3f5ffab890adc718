"""What a calibration says: each round judged as a pull request's check judges its A/B run,
then per item the false alarms, the canaries caught, the smallest change called reliably, the
bar to advise and the cost.

The same statistics as the pull request's path, by the same functions: the rounds of one kind
at one index (every item's k-th identical round, or every item's k-th round of one canary)
form a run, compared paired (`stats.verdicts.compare_runs`: the sequential look's level, the
run-wide Benjamini-Hochberg correction, the bars), and its flags re-measured
(`confirm.confirm_same_job`, replaying the confirmation rounds the calibration took).

What these rounds show is what one long-lived pair of workers sees. A pull request measures on
a fresh pair, and two processes differ by an offset of their own (where the allocator put
things, which core's cache holds what), fixed for the pair's life: a pair's rounds all carry
it, so it never shows as their spread. With rounds from several pairs, each pair's mean change
over its identical rounds is its offset, and every round is judged again as if taken on a
fresh pair: moved off its own pair's offset onto one drawn from those the pairs showed, with a
random sign (which process is "A" is arbitrary, so an offset is as likely either way), its
confirmation (another pair's round) onto a draw of its own, `DRAWS` times. The draw is from
the pairs seen, not from a normal law: on the CPU VM most fresh pairs of the CNN agreed within
1% and about one in four was off by 10-40%, which a normal law fitted to a few pairs predicts
either none of or far too much of. Those shares are the prediction for the pull request's
check; the plain counts are what these pairs saw, and a canary caught in none of them is the
check that cannot fire. The spread between pairs (the variance of the pairs' means less what
their own rounds' noise explains) is reported beside the spread within one, and the advised
bar is taken from both.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfguard.calibrate.record import Calibration, Comparison, Item
from perfguard.calibrate.report import Canary, ItemReport, Offsets, Report
from perfguard.confirm import confirm_same_job, replay
from perfguard.records import Comparison as Verdict
from perfguard.records import Details, Metrics, Run, VariantResult
from perfguard.stats.latency import Pending, latency_comparisons
from perfguard.stats.summary import summarize
from perfguard.stats.thresholds import LATENCY_METRICS, Thresholds
from perfguard.stats.verdicts import compare_runs

DRAWS = 25
"""Fresh pairs drawn for each round (see the module)."""


def analyze(calibration: Calibration, draws: int = DRAWS) -> Report:
    """Judge every round as the pull request's check would, and sum them up per item; with
    rounds from two pairs of workers or more, also judge them again as taken on fresh pairs
    (`draws` times; see the module)."""
    thresholds = Thresholds.from_json(calibration.thresholds)
    seen = _judged(calibration, thresholds)
    offsets = {key: _offsets(kinds.get(0.0, [])) for key, kinds in seen.items()}
    fresh = (
        _fresh(calibration, thresholds, offsets, draws)
        if any(o is not None for o in offsets.values())
        else {}
    )
    reports = []
    for item in calibration.items:
        key = (item.test, item.variant)
        bar = thresholds.for_test(item.test).ab_min_change_pct
        if item.error is not None or not item.rounds:
            reports.append(ItemReport(item.test, item.variant, bar, item.error or "no rounds"))
            continue
        mine, elsewhere, offset = seen.get(key, {}), fresh.get(key), offsets.get(key)
        canaries = tuple(
            Canary(
                pct,
                len(mine.get(pct, [])),
                sum(j.flagged for j in mine.get(pct, [])),
                _median([j.change for j in mine.get(pct, [])]),
                None if elsewhere is None else elsewhere.get(pct),
            )
            for pct in calibration.canary
        )
        compared = [c for r in item.rounds for c in (r.main, *r.confirmations)]
        identical = mine.get(0.0, [])
        reports.append(
            ItemReport(
                test=item.test,
                variant=item.variant,
                bar_pct=bar,
                call_ms=item.call_ms,
                delay=item.delay,
                identical=len(identical),
                false_alarms=sum(j.flagged for j in identical),
                changes_pct=tuple(j.change for j in identical if j.change is not None),
                canaries=canaries,
                device_s=sum(c.device_ms for c in compared) / 1000 / len(item.rounds),
                wall_s=sum(c.wall_s for c in compared) / len(item.rounds),
                offsets=offset,
                fresh_false_alarms=None if elsewhere is None else elsewhere.get(0.0),
            )
        )
    return Report(calibration, tuple(reports))


@dataclass(frozen=True)
class Judged:
    """One round as the pull request's check judged it: flagged after confirmation, the
    paired change of the median, and the pair of workers that took it."""

    flagged: bool
    change: float | None
    pair: int


def _judged(
    calibration: Calibration, thresholds: Thresholds
) -> dict[tuple[str, str], dict[float, list[Judged]]]:
    """Every round judged, per item and kind, in order."""
    found: dict[tuple[str, str], dict[float, list[Judged]]] = {}
    for kind in (0.0, *calibration.canary):
        for index in range(_most_rounds(calibration.items, kind)):
            for key, judged in _judge_run(calibration, thresholds, kind, index).items():
                found.setdefault(key, {}).setdefault(kind, []).append(judged)
    return found


def _offsets(identical: Sequence[Judged]) -> Offsets | None:
    """The spread between pairs, from the identical rounds' paired changes: the variance of
    the pairs' means less what their rounds' own noise puts into a mean (a one-way random
    effects estimate, 0 at least). None with fewer than two pairs, or no spread within one."""
    by_pair: dict[int, list[float]] = {}
    for judged in identical:
        if judged.change is not None:
            by_pair.setdefault(judged.pair, []).append(judged.change)
    rounds = sum(len(v) for v in by_pair.values())
    if len(by_pair) < 2 or rounds <= len(by_pair):
        return None
    means = {pair: statistics.fmean(v) for pair, v in by_pair.items()}
    within = sum((x - means[p]) ** 2 for p, v in by_pair.items() for x in v) / (
        rounds - len(by_pair)
    )
    noise_in_means = within * statistics.fmean(1 / len(v) for v in by_pair.values())
    between = max(statistics.variance(means.values()) - noise_in_means, 0.0)
    return Offsets(math.sqrt(within), math.sqrt(between), means)


def _fresh(
    calibration: Calibration,
    thresholds: Thresholds,
    offsets: Mapping[tuple[str, str], Offsets | None],
    draws: int,
) -> dict[tuple[str, str], dict[float, float]]:
    """Per item and kind, the share of rounds flagged when each comparison is moved from its
    own pair's offset to one drawn for a fresh pair (see the module), over `draws` draws."""
    flagged: dict[tuple[str, str], dict[float, list[bool]]] = {}
    for draw in range(draws):
        rng = random.Random(f"calibrate:fresh:{draw}")
        moved = replace(
            calibration,
            items=tuple(
                _moved(item, offsets.get((item.test, item.variant)), rng)
                for item in calibration.items
            ),
        )
        for key, kinds in _judged(moved, thresholds).items():
            for kind, judged in kinds.items():
                flagged.setdefault(key, {}).setdefault(kind, []).extend(j.flagged for j in judged)
    return {
        key: {kind: statistics.fmean(v) for kind, v in kinds.items() if v}
        for key, kinds in flagged.items()
        if offsets.get(key) is not None
    }


def _moved(item: Item, offsets: Offsets | None, rng: random.Random) -> Item:
    """`item` with every comparison (main and confirmations) moved off its pair's offset
    onto a fresh pair's: one of the pairs' offsets, either sign."""
    if offsets is None:
        return item
    seen = sorted(offsets.means.values())

    def move(comparison: Comparison) -> Comparison:
        own = offsets.means.get(comparison.pair, 0.0)
        drawn = rng.choice(seen) * rng.choice((-1.0, 1.0))
        return comparison.shifted((1 + drawn / 100) / (1 + own / 100))

    rounds = tuple(
        replace(r, main=move(r.main), confirmations=tuple(move(c) for c in r.confirmations))
        for r in item.rounds
    )
    return replace(item, rounds=rounds)


def _median(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _most_rounds(items: Sequence[Item], kind: float) -> int:
    return max((sum(r.slower_pct == kind for r in i.rounds) for i in items), default=0)


def _judge_run(
    calibration: Calibration, thresholds: Thresholds, kind: float, index: int
) -> dict[tuple[str, str], Judged]:
    """The run of every item's `index`-th round of `kind`, judged as a pull request's A/B
    run, per item."""
    base: list[VariantResult] = []
    head: list[VariantResult] = []
    pairs: dict[tuple[str, str], int] = {}
    confirm_base: list[list[VariantResult]] = [[] for _ in range(calibration.confirm)]
    confirm_head: list[list[VariantResult]] = [[] for _ in range(calibration.confirm)]
    for item in calibration.items:
        rounds = [r for r in item.rounds if r.slower_pct == kind]
        if item.error is not None or index >= len(rounds):
            continue
        chosen = rounds[index]
        pairs[(item.test, item.variant)] = chosen.main.pair
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
    return {r.key: _verdict(run.comparisons, r.key, pairs[r.key]) for r in head}


def _verdict(comparisons: Sequence[Verdict], key: tuple[str, str], pair: int) -> Judged:
    mine = [c for c in comparisons if (c.test, c.variant) == key and c.metric in LATENCY_METRICS]
    flagged = any(c.gating and c.verdict in ("regression", "improvement") for c in mine)
    median = next((c.change_pct for c in mine if c.metric == "latency_p50_ms"), None)
    return Judged(flagged, median, pair)


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
