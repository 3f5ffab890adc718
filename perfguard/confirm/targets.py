"""Which items a confirmation round measures again.

Flagged items (a latency regression or improvement against the stored baseline) must show
it again before it stands; undecided items (the median moved by the minimum change, without
a verdict) are measured beside the base commit, where a baseline's own offset is out of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfguard.records import Comparison
from perfguard.stats.thresholds import TIMED_METRICS
from perfguard.stats.verdicts import Thresholds

Key = tuple[str, str]


def is_flagged_latency(c: Comparison) -> bool:
    """A latency regression or improvement: what a confirmation re-measure must show again."""
    return c.verdict in ("regression", "improvement") and c.metric in TIMED_METRICS


def confirm_targets(comparisons: Sequence[Comparison]) -> list[Key]:
    """(test, variant) of every latency regression or improvement: what to re-measure."""
    keys: list[Key] = []
    for c in comparisons:
        if is_flagged_latency(c) and (c.test, c.variant) not in keys:
            keys.append((c.test, c.variant))
    return keys


def settle_targets(
    comparisons: Sequence[Comparison], thresholds: Thresholds | None = None
) -> list[Key]:
    """(test, variant) of every item the stored comparison could not decide, and that is
    not a confirmation target already: its median moved by at least the minimum change,
    yet without a latency verdict (within the noise floor, or not significant). A baseline
    measured in a slow spell of the host hides a real slowdown that way; measured beside
    the base commit (same-job A/B), it shows."""
    flagged = set(confirm_targets(comparisons))
    return [key for key in moved_keys(comparisons, thresholds) if key not in flagged]


def moved_keys(comparisons: Sequence[Comparison], thresholds: Thresholds | None) -> list[Key]:
    """Items whose median moved by at least the minimum change without a verdict."""
    th_all = thresholds or Thresholds()
    keys: list[Key] = []
    for c in comparisons:
        key = (c.test, c.variant)
        if key in keys or c.metric != "latency_p50_ms" or not undecided(c):
            continue
        if abs(c.change_pct or 0.0) >= th_all.for_test(c.test).min_change_pct:
            keys.append(key)
    return keys


def undecided(c: Comparison) -> bool:
    """A gating latency comparison that was tested and gave no regression or improvement."""
    return (
        c.metric in TIMED_METRICS
        and c.gating
        and c.verdict in ("unchanged", "inconclusive")
        and c.p_value is not None
        and bool(c.change_pct)
    )
