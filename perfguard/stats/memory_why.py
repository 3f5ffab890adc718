"""Where the memory went: a memory verdict explained by the allocation sites that changed.

Beside the time's "why" (`stats.why`: operators by self time), for memory: where a peak
memory verdict stands (or memory growth per call), both trees measured the item once more
with allocation recording (`measure.memory_sites`); their sites at each side's peak are
matched by (frame, operator) and the largest changes kept on the comparison (`sites`). For a
leak, the sites of the blocks a call left allocated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from perfguard.records import Comparison, VariantResult
from perfguard.records.sites import Site, diff

PEAK, GROWTH = "peak_memory_bytes", "memory_growth_bytes_per_call"
LEAST_BYTES = 64 * 1024  # a peak's site that moved by less is not shown (CPU sizes are exact)
# a leak's site is shown at any size: growth per call is an exact count, and a block of a few
# KiB kept per call is gigabytes after a day of serving
LEAST_HELD_BYTES = 1


def explained(c: Comparison) -> bool:
    """Whether `c` is a memory verdict that stands (what allocation sites explain)."""
    if c.metric == PEAK:  # gating or reported only (a CPU's RSS): a figure that moved
        return c.verdict in ("regression", "improvement")
    return c.metric == GROWTH and c.verdict == "regression"


def memory_keys(comparisons: Sequence[Comparison]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((c.test, c.variant) for c in comparisons if explained(c)))


def sites_of(result: VariantResult | None, metric: str) -> list[Site]:
    if result is None:
        return []
    key = "memory_sites" if metric == PEAK else "memory_held_sites"
    return [Site.from_json(s) for s in result.details.build.get(key) or ()]


def with_memory_why(
    comparisons: Sequence[Comparison],
    base: Mapping[tuple[str, str], VariantResult],
    head: Mapping[tuple[str, str], VariantResult],
) -> tuple[Comparison, ...]:
    """Each standing memory verdict with its sites' changes (where both, or the head, were
    recorded)."""
    out = []
    for c in comparisons:
        key = (c.test, c.variant)
        if explained(c) and key in head:
            least = LEAST_BYTES if c.metric == PEAK else LEAST_HELD_BYTES
            changes = diff(
                sites_of(base.get(key), c.metric), sites_of(head[key], c.metric), least=least
            )
            c = replace(c, sites=tuple(changes))
        out.append(c)
    return tuple(out)
