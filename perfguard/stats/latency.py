"""Latency comparisons: per-repeat percentiles, Welch or paired tests, one correction per run.

Latency is judged on independent repeats (per-repeat percentiles), never on raw per-call
samples, which are autocorrelated within a process. A regression needs significance after
the run-wide Benjamini-Hochberg correction and a practical change (`practical_bar`; in
same-job A/B, `ab_bar`: `ab_min_change_pct`, twice that for the tails).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfguard.records import Comparison, Metric, Reason, VariantResult, Verdict, reason
from perfguard.stats.sequential import look_alpha
from perfguard.stats.significance import (
    benjamini_hochberg,
    bootstrap_ci,
    cohens_d,
    min_detectable_pct,
    paired_change_interval,
    paired_cohens_d,
    paired_min_detectable_pct,
    paired_test,
    welch_t_test,
)
from perfguard.stats.thresholds import (
    LATENCY_METRICS,
    PHASE_METRICS,
    NoiseFloor,
    Thresholds,
    change_pct,
    practical_bar,
    repeat_figures,
)


def _sequential_level(head: VariantResult, pairs: int, alpha: float) -> float:
    """The level of the look a sequential A/B item stopped at; `alpha` for a fixed design
    (results written before sampling until decided, or a run without it)."""
    ab = head.details.ab
    if ab is None or "sequential" not in ab:
        return alpha
    return look_alpha(pairs, alpha) or alpha


@dataclass
class Pending:
    """A latency comparison waiting for the run-wide correction of its p-value."""

    comparison: Comparison
    practical_pct: float
    raw_p: float


@dataclass(frozen=True)
class _Test:
    """What the test of one latency metric found, before the run-wide correction."""

    p: float
    d: float
    practical_pct: float  # the smallest change the verdict may act on
    detectable_pct: float  # the smallest change this test could have flagged
    reasons: tuple[Reason, ...]
    change_ci: tuple[float, float] | None = None  # paired: the change's interval, in percent


TAIL_BAR_FACTOR = 2.0
"""In same-job A/B the tails (p95, p99) are held to this multiple of the bar. Pairs cancel
what changes between blocks, not what differs between the two processes, and that offset
is larger in the tails: on identical code (this project's 2-core runner, 100 comparisons
with no other work) the median moved by at most 2.4% in 95 of 100, the p95 by up to 10.7%,
and two p95s passed the 5% bar with significance."""


def ab_bar(metric: str, th: Thresholds) -> float:
    """The smallest change a same-job A/B latency verdict may act on, for this metric."""
    factor = 1.0 if metric.endswith("_p50_ms") else TAIL_BAR_FACTOR
    return th.ab_min_change_pct * factor


def _paired(
    a: list[float], b: list[float], head: VariantResult, th: Thresholds, metric: str
) -> _Test:
    """Same-job A/B: block i of each side ran back to back, so their ratios are tested;
    the history's noise floor (movement between runs) does not apply here, and the tails
    need twice the bar (`TAIL_BAR_FACTOR`)."""
    p = paired_test(a, b)  # mean and trimmed mean of the log ratios
    level = _sequential_level(head, len(a), th.alpha)
    # sampled until decided: the look it stopped at spends alpha_k of alpha, so p is scaled
    # to be held to alpha like the others (BH over the run included)
    p = min(1.0, p * th.alpha / level)
    how = (
        reason("paired", pairs=len(a))
        if level == th.alpha
        else reason("paired_sequential", pairs=len(a), level=level)
    )
    return _Test(
        p=p,
        d=paired_cohens_d(a, b),
        practical_pct=ab_bar(metric, th),
        detectable_pct=paired_min_detectable_pct(a, b, alpha=level),
        reasons=(how,),
        change_ci=paired_change_interval(a, b, level),
    )


def _unpaired(
    a: list[float], b: list[float], key: tuple[str, str, str], th: Thresholds, noise: NoiseFloor
) -> _Test:
    """Against a stored baseline: Welch's t-test, and the history's noise floor."""
    floor = noise.get(key, 0.0)
    return _Test(
        p=welch_t_test(a, b)[1],
        d=cohens_d(a, b),
        practical_pct=practical_bar(*key, th, noise),
        detectable_pct=min_detectable_pct(a, b, alpha=th.alpha),
        reasons=(reason("noise_floor", pct=floor),) if floor else (),
    )


def latency_comparisons(
    base: VariantResult,
    head: VariantResult,
    th: Thresholds,
    noise: NoiseFloor,
    *,
    paired: bool = False,
) -> list[Pending | Comparison]:
    """p50, p95 and p99 of one item (and of a generation's TTFT and TPOT, where both sides
    have them); the tested ones wait for the run's correction."""
    out: list[Pending | Comparison] = []
    for metric, a, b in _per_repeat(base, head):
        b_val, h_val = getattr(base.metrics, metric), getattr(head.metrics, metric)
        row = Comparison(
            test=head.test,
            variant=head.variant,
            metric=metric,
            baseline=b_val,
            current=h_val,
            change_pct=change_pct(b_val, h_val),
            p_value=None,
            cohens_d=None,
            verdict="inconclusive",
            gating=not metric.endswith("_p99_ms") or th.gate_p99,
        )
        if len(a) < th.min_repeats or len(b) < th.min_repeats:
            few = reason("too_few_repeats", base=len(a), head=len(b), need=th.min_repeats)
            out.append(row.with_reason(few))
            continue
        if paired and len(a) == len(b):
            found = _paired(a, b, head, th, metric)
        else:
            found = _unpaired(a, b, (head.test, head.variant, metric), th, noise)
        # what could have been flagged: the test's power limit, and never below the
        # practical minimum the rules demand
        mde = max(found.detectable_pct, found.practical_pct)
        tested = replace(
            row,
            p_value=found.p,
            cohens_d=None if math.isinf(found.d) else found.d,
            verdict="unchanged",
            min_detectable_pct=None if math.isinf(mde) else mde,
            reasons=found.reasons,
            baseline_ci=bootstrap_ci(a),
            current_ci=bootstrap_ci(b),
            change_ci=found.change_ci,
        )
        out.append(Pending(tested, found.practical_pct, found.p))
    return out


def _per_repeat(
    base: VariantResult, head: VariantResult
) -> list[tuple[Metric, list[float], list[float]]]:
    """Each timed metric with its figure per repeat on either side."""
    timed = [*LATENCY_METRICS, *(PHASE_METRICS if base.phases and head.phases else ())]
    return [(m, repeat_figures(base, m), repeat_figures(head, m)) for m in timed]


def decide_latency(
    items: Sequence[Pending | Comparison], th_all: Thresholds
) -> tuple[Comparison, ...]:
    """The run's comparisons, the pending ones decided after one Benjamini-Hochberg
    correction over all of them."""
    pending = [i for i in items if isinstance(i, Pending)]
    adjusted = benjamini_hochberg([p.raw_p for p in pending])
    decided = {
        id(p): _decide(p, q, th_all.for_test(p.comparison.test).alpha)
        for p, q in zip(pending, adjusted, strict=True)
    }
    return tuple(decided[id(i)] if isinstance(i, Pending) else i for i in items)


def _decide(pending: Pending, adjusted_p: float, alpha: float) -> Comparison:
    c = pending.comparison
    change = c.change_pct or 0.0
    significant = adjusted_p < alpha
    practical = abs(change) >= pending.practical_pct
    verdict: Verdict
    reasons = list(c.reasons)
    if significant and practical:
        verdict = "regression" if change > 0 else "improvement"
    elif practical:
        verdict = "inconclusive"
        reasons.append(reason("within_noise"))
    else:
        verdict = "unchanged"
    if adjusted_p != pending.raw_p:
        reasons.append(reason("adjusted", p=adjusted_p))
    return replace(c, verdict=verdict, reasons=tuple(reasons))
