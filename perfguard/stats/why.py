"""The why of a latency regression: which operators' self time grew, from both sides' profiles.

Every measured result keeps a profile summary (self time per operator per call, from the
profiled calls that also count operators; see `perfguard.measure.counters`), and a baseline
keeps its results, so a regression against a stored baseline is explained against the
baseline's summary, and one in a same-job A/B against the base side measured beside it.
The profiler's own overhead is in both sides alike; what matters is the difference.

On CUDA the operators' times are the host's, and the kernels' device times come beside them
(`kernel: <name>`), headed by the device time of all of one call's kernels: a regression whose
kernels kept their time went to the host (launches, Python, guards), one whose kernels grew
went to the device.

A distributed step (`perfguard.measure.distributed`) heads its rows with the time per step its
ranks spent in collectives (the mean share of the step over ranks, times the step's median):
an added all-reduce, or a doubled payload, shows there before any operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from perfguard.records import Comparison, VariantResult
from perfguard.stats.thresholds import TIMED_METRICS

TOP = 5  # operators shown under a regression
KERNEL = "kernel: "  # before a kernel's name among the operators
ALL_KERNELS = "all kernels (device time)"


def _times(profile: Mapping[str, Any], key: str) -> dict[str, float]:
    times = profile.get(key)
    if not isinstance(times, Mapping):
        return {}
    return {str(k): float(v) for k, v in times.items() if isinstance(v, int | float)}


def self_times(result: VariantResult | None) -> dict[str, float] | None:
    """Self time per call by operator (host) and, on CUDA, by kernel (device)."""
    profile = None if result is None else result.details.profile
    if not isinstance(profile, Mapping) or not isinstance(profile.get("self_us"), Mapping):
        return None
    kernels = {KERNEL + name: us for name, us in _times(profile, "kernels_us").items()}
    return {**_times(profile, "self_us"), **kernels}


def device_time(result: VariantResult | None) -> float | None:
    """The device time of all of one call's kernels (µs), where it was measured."""
    profile = None if result is None else result.details.profile
    value = profile.get("device_us") if isinstance(profile, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def collectives_ms(result: VariantResult | None) -> tuple[float, float] | None:
    """A distributed step's (share of the step in collectives, their microseconds a step)."""
    ranks = None if result is None else result.details.ranks
    share = None if ranks is None else ranks.mean_collective_share
    p50 = None if result is None else result.metrics.latency_p50_ms
    if share is None or p50 is None:
        return None
    return share, share * p50 * 1000.0


def _imbalance(result: VariantResult | None) -> float | None:
    """The ranks' work outside collectives, busiest over least busy (`RankFigures`)."""
    ranks = None if result is None else result.details.ranks
    return None if ranks is None else ranks.compute_imbalance


def explain(
    base: Mapping[str, float], head: Mapping[str, float], top: int = TOP
) -> tuple[tuple[str, float | None, float | None], ...]:
    """The `top` operators by change in self time, new and vanished ones included."""
    rows = [(op, base.get(op), head.get(op)) for op in {*base, *head}]
    rows.sort(key=lambda r: (-abs((r[2] or 0.0) - (r[1] or 0.0)), r[0]))
    return tuple(rows[:top])


def why_of(
    base: VariantResult | None, head: VariantResult | None
) -> tuple[tuple[str, float | None, float | None], ...]:
    """The rows under one regression: the kernels' device time first where both sides have
    it, then the operators and kernels that changed most."""
    base_times, head_times = self_times(base), self_times(head)
    if not base_times or not head_times:
        return ()
    devices = device_time(base), device_time(head)
    first: tuple[tuple[str, float | None, float | None], ...] = (
        ((ALL_KERNELS, *devices),) if None not in devices else ()
    )
    base_share, head_share = collectives_ms(base), collectives_ms(head)
    if base_share is not None and head_share is not None:
        (b_share, b_us), (h_share, h_us) = base_share, head_share
        name = f"collectives ({b_share:.0%} of the step, now {h_share:.0%}"
        imbalance = _imbalance(base), _imbalance(head)
        if imbalance[0] is not None and imbalance[1] is not None:
            # a straggler: the others wait for it inside their collectives
            name += (
                f"; ranks' work, busiest over idlest {imbalance[0]:.2f}x, now {imbalance[1]:.2f}x"
            )
        first = ((name + ")", b_us, h_us), *first)
    return (*first, *explain(base_times, head_times))


def with_why(
    comparisons: Sequence[Comparison],
    base_results: Sequence[VariantResult],
    head_results: Sequence[VariantResult],
) -> tuple[Comparison, ...]:
    """The comparisons, each latency regression that stands carrying its operators."""
    bases = {r.key: r for r in base_results}
    heads = {r.key: r for r in head_results}
    out = []
    for c in comparisons:
        key: Any = (c.test, c.variant)
        if c.verdict == "regression" and c.gating and c.metric in TIMED_METRICS:
            rows = why_of(bases.get(key), heads.get(key))
            if rows:
                c = replace(c, why=rows)
        out.append(c)
    return tuple(out)
