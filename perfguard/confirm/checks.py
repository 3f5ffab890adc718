"""Rounds that check themselves: a re-measure whose own figures say it was disturbed is
not believed.

A confirmation round measures the base commit beside this tree (same-job A/B), or this tree
alone. The base commit runs the same code it ran when its baseline was stored. When the base
side reads more than `FACTOR` times slower than its stored baseline, the host changed, not
the code (a burst of other work, a throttled core, a process that landed in a slow state),
and the round says nothing about the change: the step measures such items once more, and a
round that stays disturbed can neither confirm nor withdraw a verdict (the verdict stays as
the stored comparison gave it, with the reason). In same-job A/B, where every item was
measured beside the base commit already, the base commit's figure is the base side this job
measured first, and the same check applies to it.

Only slower: other work on a host slows a measurement and never speeds it up. A base side
far faster than its stored figure says that the stored figure was taken in a slow spell;
the round, both sides measured together, is then the better evidence, and it stands.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from perfguard.records import Comparison, VariantResult

FACTOR = 2.0
"""A side this many times off its own figure was disturbed. Offsets between processes of
identical code on a shared runner are a few percent, and a slow state of a process (one
conv model in five, on this project's runner) 2.5x; a real change shows in the head side
alone, and only against the base side."""

Key = tuple[str, str]

STORED = "its stored baseline"
BESIDE_FIRST = "its first measure in this job"
"""What the base commit's own figure is, as the reasons name it: a stored baseline, or in
same-job A/B the base side this job measured before the confirmation round."""


def _off(measured: float | None, expected: float | None) -> float | None:
    """How many times `measured` is off `expected` (>= 1), or None when either is missing."""
    if not measured or not expected or measured <= 0 or expected <= 0:
        return None
    return max(measured / expected, expected / measured)


def disturbed(
    comparisons: Sequence[Comparison],
    base_results: Iterable[VariantResult],
    *,
    factor: float = FACTOR,
    reference: str = STORED,
) -> dict[Key, str]:
    """{(test, variant): why} for the items whose round was disturbed: the round's base side
    reads its median more than `factor` times slower than the figure the comparison took for
    the base commit (`baseline` of the p50 comparison), which `reference` names in the reason:
    its stored baseline, or in same-job A/B the base side this job measured first.

    (This tree's side has no such check: what this session measured first may be the
    disturbed one, and withdrawing that false alarm is what a re-measure is for.)"""
    bases: Mapping[Key, VariantResult] = {r.key: r for r in base_results if r.status == "ok"}
    found: dict[Key, str] = {}
    for c in comparisons:
        key = (c.test, c.variant)
        got = bases.get(key)
        # the median only: a side's tails scatter several times as much under other work
        # (a p95 23x off beside a p50 that was not, under a full CPU hog)
        if key in found or got is None or not c.gating or c.metric != "latency_p50_ms":
            continue
        value = getattr(got.metrics, c.metric)
        if not value or not c.baseline or c.baseline <= 0:
            continue
        off = value / c.baseline  # slower only: other work never makes code faster
        if off > factor:
            found[key] = (
                f"re-measure disturbed: the base commit read {value:.4g} ms ({c.metric}) "
                f"beside this tree, {off:.1f}x slower than {reference} "
                f"({c.baseline:.4g} ms)"
            )
    return found


def agreeing(
    first: Iterable[VariantResult], second: Iterable[VariantResult], keys: Iterable[Key]
) -> set[Key]:
    """The keys whose base side read alike (within 25% on p50) in two rounds: when both are
    far off the stored baseline alike, it is the stored figure that is off (a baseline saved
    in a slow spell), not the rounds, and the pairing does not depend on it."""
    a = {r.key: r.metrics.latency_p50_ms for r in first if r.status == "ok"}
    b = {r.key: r.metrics.latency_p50_ms for r in second if r.status == "ok"}
    return {k for k in keys if (off := _off(a.get(k), b.get(k))) is not None and off <= 1.25}


def merge_retry(
    results: Sequence[VariantResult],
    base_results: Sequence[VariantResult],
    retry: Sequence[VariantResult],
    retry_base: Sequence[VariantResult],
    keys: Iterable[Key],
) -> tuple[tuple[VariantResult, ...], tuple[VariantResult, ...]]:
    """A round with the results of `keys` replaced by those of their retry."""
    again = set(keys)

    def merged(
        old: Sequence[VariantResult], new: Sequence[VariantResult]
    ) -> tuple[VariantResult, ...]:
        fresh = {r.key: r for r in new if r.key in again}
        kept = [fresh.pop(r.key, r) if r.key in again else r for r in old]
        return (*kept, *fresh.values())

    return merged(results, retry), merged(base_results, retry_base)
