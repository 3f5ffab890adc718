"""The why of a latency regression: which operators' self time grew, from both sides' profiles.

Every measured result keeps a profile summary (self time per operator per call, from the
profiled calls that also count operators; see `perfguard.measure.counters`), and a baseline
keeps its results, so a regression against a stored baseline is explained against the
baseline's summary, and one in a same-job A/B against the base side measured beside it.
The profiler's own overhead is in both sides alike; what matters is the difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from perfguard.records import Comparison, VariantResult

TOP = 5  # operators shown under a regression


def self_times(result: VariantResult | None) -> dict[str, float] | None:
    profile = None if result is None else result.details.profile
    times = profile.get("self_us") if isinstance(profile, Mapping) else None
    if not isinstance(times, Mapping):
        return None
    return {str(k): float(v) for k, v in times.items() if isinstance(v, int | float)}


def explain(
    base: Mapping[str, float], head: Mapping[str, float], top: int = TOP
) -> tuple[tuple[str, float | None, float | None], ...]:
    """The `top` operators by change in self time, new and vanished ones included."""
    rows = [(op, base.get(op), head.get(op)) for op in {*base, *head}]
    rows.sort(key=lambda r: (-abs((r[2] or 0.0) - (r[1] or 0.0)), r[0]))
    return tuple(rows[:top])


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
        if c.verdict == "regression" and c.gating and c.metric.startswith("latency_"):
            base, head = self_times(bases.get(key)), self_times(heads.get(key))
            if base and head:
                c = replace(c, why=explain(base, head))
        out.append(c)
    return tuple(out)
