"""Verdicts per metric, baseline against current. Pure: two `Run`s in, `Comparison`s out.

Latency is judged on independent repeats (per-repeat percentiles), never on raw per-call
samples, which are autocorrelated within a process. A regression needs all of:
- statistical significance after a Benjamini-Hochberg correction over the whole run;
- a practical minimum change (`min_change_pct`, settable per test);
- a change beyond the noise floor learned from history, where one is known.
In same-job A/B mode (`paired=True`) the repeats of both sides were interleaved, so paired
tests on the log block ratios (their mean and their trimmed mean, Bonferroni) replace Welch,
and `ab_min_change_pct` the history noise floor.
Memory uses a small relative tolerance, compile time a generous ratio, and drift its
tolerance class (every run) and the baseline's drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from perfguard.records import Comparison, Reason, Run, VariantResult, Verdict, reason
from perfguard.records.environment import HARDWARE_KEYS
from perfguard.stats.exact import exact_comparisons
from perfguard.stats.latency import Pending, decide_latency, latency_comparisons
from perfguard.stats.rules import compile_time, drift, memory
from perfguard.stats.thresholds import (
    LATENCY_METRICS,
    NoiseFloor,
    Thresholds,
    change_pct,
    practical_bar,
)
from perfguard.variants.spec import RECORD_ONLY

__all__ = [
    "LATENCY_METRICS",
    "NoiseFloor",
    "Thresholds",
    "change_pct",
    "compare_runs",
    "hardware_change_reason",
    "practical_bar",
    "summarize_verdicts",
    "withhold_speed_verdicts",
]


def compare_runs(
    base: Run | None,
    head: Run,
    thresholds: Thresholds | None = None,
    noise: NoiseFloor | None = None,
    *,
    paired: bool = False,
) -> tuple[Comparison, ...]:
    """All comparisons of `head` against `base` (None: everything is `new`).

    `paired`: the two runs were measured in the same job, block i of each side back to
    back (same-job A/B), so latency is judged by a paired test on the block ratios.
    """
    th_all = thresholds or Thresholds()
    floor = noise or {}
    items: list[Pending | Comparison] = []
    for r in head.results:
        th = th_all.for_test(r.test)
        b = None if base is None else base.result(r.test, r.variant)
        state = _item_state(r, b)
        if state is not None:
            items.append(state)
            found = drift(None, r, th) if state.verdict == "new" else None
            if found is not None and found.verdict == "regression":
                items.append(found)  # wrong numbers are wrong without a baseline too
        elif r.status == "ok" and b is not None:
            items.extend(_metrics(b, r, th, floor, paired))
    if base is not None:
        head_keys = {r.key for r in head.results}
        items.extend(
            _state_row(r, "missing", reason("in_base_only"), baseline=r.metrics.latency_p50_ms)
            for r in base.results
            if r.key not in head_keys and r.status == "ok"
        )
    out = decide_latency(items, th_all)
    forbid = hardware_change_reason(base, head)
    return withhold_speed_verdicts(out, forbid) if forbid else out


def missing_row(test: str, variant: str) -> Comparison:
    """An item the base has and this run does not (a deleted test, seen in the base's tree
    beside it, not measured there): `missing`, as against a stored baseline."""
    return Comparison(
        test=test,
        variant=variant,
        metric="latency_p50_ms",
        baseline=None,
        current=None,
        change_pct=None,
        p_value=None,
        cohens_d=None,
        verdict="missing",
        reasons=(reason("in_base_only"),),
        scope="item",
    )


def _state_row(
    r: VariantResult,
    verdict: Verdict,
    why: Reason | None,
    *,
    baseline: float | None = None,
    current: float | None = None,
) -> Comparison:
    return Comparison(
        test=r.test,
        variant=r.variant,
        metric="latency_p50_ms",
        baseline=baseline,
        current=current,
        change_pct=None,
        p_value=None,
        cohens_d=None,
        verdict=verdict,
        reasons=() if why is None else (why,),
        scope="item",
    )


def _item_state(r: VariantResult, b: VariantResult | None) -> Comparison | None:
    """The row of an item that has no metrics to compare: it failed here, it was skipped
    here where the baseline had it, or the baseline has nothing for it. None: compare."""
    base_p50 = None if b is None else b.metrics.latency_p50_ms
    if r.status == "error":
        failed = reason("failed", error=r.error) if r.error else None
        return _state_row(r, "error", failed, baseline=base_p50)
    if r.status == "skipped":
        if b is not None and b.status == "ok":
            skipped = reason("skipped_here", error=str(r.error))
            return _state_row(r, "missing", skipped, baseline=base_p50)
        return None
    if b is None or b.status != "ok":
        if b is None:
            why = reason("no_baseline")
        elif b.status == "error" and b.error:
            why = reason("baseline_error", error=b.error)
        else:
            why = reason("baseline_status", status=b.status)
        return _state_row(r, "new", why, current=r.metrics.latency_p50_ms)
    return None


def _metrics(
    b: VariantResult, r: VariantResult, th: Thresholds, floor: NoiseFloor, paired: bool
) -> list[Pending | Comparison]:
    """Every metric of an item both runs measured."""
    # a test that timed itself (pytest-benchmark) ran whole in each tree, one after the other:
    # its blocks are chunks of one run, not pairs, and are compared unpaired
    paired = paired and r.variant != RECORD_ONLY
    items: list[Pending | Comparison] = list(latency_comparisons(b, r, th, floor, paired=paired))
    items.extend(
        exact_comparisons(
            r.test,
            r.variant,
            b.counters,
            r.counters,
            gate_ops=th.gate_ops,
            instructions_pct=th.instructions_pct,
        )
    )
    items.extend(
        c for c in (memory(b, r, th), compile_time(b, r, th), drift(b, r, th)) if c is not None
    )
    return items


def withhold_speed_verdicts(
    comparisons: Sequence[Comparison], why: Reason
) -> tuple[Comparison, ...]:
    """Speed and memory regressions and improvements become inconclusive, with the reason.

    Drift keeps its verdict: numbers that are wrong are wrong on any machine.
    """
    return tuple(
        replace(c.with_reason(why), verdict="inconclusive")
        if c.verdict in ("regression", "improvement") and c.metric != "drift_max_rel"
        else c
        for c in comparisons
    )


def hardware_change_reason(base: Run | None, head: Run) -> Reason | None:
    """Why no speed or memory verdict can be given between these runs (None when it can)."""
    if base is None or not base.environment:
        return None
    changed = [
        f"{key} {base.environment.get(key)} -> {head.environment.get(key)}"
        for key in HARDWARE_KEYS
        if key in base.environment
        and key in head.environment
        and base.environment[key] != head.environment[key]
    ]
    return reason("hardware_change", changes=", ".join(changed)) if changed else None


def summarize_verdicts(comparisons: Sequence[Comparison]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in comparisons:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    return counts
