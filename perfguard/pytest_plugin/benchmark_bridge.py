"""Tests that use pytest-benchmark's `benchmark` fixture, recorded as variant `pytest-benchmark`.

Their raw per-round timings become samples, so an existing benchmark suite gets baselines,
verdicts and the report without a rewrite. Nothing of pytest-benchmark is changed: we only
read its fixture's statistics after the test ran.
"""

from __future__ import annotations

import statistics
from typing import Any

from perfguard.records import Details, Metrics, VariantResult
from perfguard.stats.summary import summarize
from perfguard.variants.spec import RECORD_ONLY

MAX_BLOCKS = 5


def _raw_seconds(fixture: Any) -> list[float] | None:
    stats = getattr(fixture, "stats", None)
    inner = getattr(stats, "stats", None)
    data = getattr(inner, "data", None)
    if not data:
        return None
    return [float(v) for v in data]


def _blocks(n: int) -> tuple[int, ...]:
    """Split n rounds in order into MAX_BLOCKS contiguous repeat blocks (one block when there
    are fewer than twice that)."""
    if n < 2 * MAX_BLOCKS:
        return (n,)
    base, extra = divmod(n, MAX_BLOCKS)
    return tuple(base + (1 if i < extra else 0) for i in range(MAX_BLOCKS))


def result_from_benchmark(test: str, fixture: Any) -> VariantResult | None:
    """A `pytest-benchmark` result from a used `benchmark` fixture; None if it timed nothing."""
    if getattr(fixture, "disabled", False):
        return None
    seconds = _raw_seconds(fixture)
    if seconds is None:
        return None
    samples = tuple(s * 1000.0 for s in seconds)
    sizes = _blocks(len(samples))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    medians = tuple(
        statistics.median(samples[s : s + n]) for s, n in zip(starts, sizes, strict=True)
    )
    return VariantResult(
        test=test,
        variant=RECORD_ONLY,
        status="ok",
        metrics=Metrics(**summarize(samples).metric_fields()),
        samples_ms=samples,
        repeats_ms=medians,
        block_sizes=sizes,
        details=Details(
            source="pytest-benchmark",
            clock="pytest-benchmark timer",
            notes=("rounds timed by pytest-benchmark; blocks are contiguous rounds",),
        ),
    )
