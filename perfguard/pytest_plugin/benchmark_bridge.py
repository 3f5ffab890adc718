"""Tests that use pytest-benchmark's `benchmark` fixture, recorded as variant `pytest-benchmark`.

Their raw per-round timings become samples, so an existing benchmark suite gets baselines,
verdicts and the report without a rewrite. Nothing of pytest-benchmark is changed: we only
read its fixture's statistics after the test ran.
"""

from __future__ import annotations

from typing import Any

from perfguard.records import Metrics, VariantResult
from perfguard.stats.summary import summarize, tail_count
from perfguard.variants.spec import RECORD_ONLY

MIN_BLOCKS = 5


def _raw_seconds(fixture: Any) -> list[float] | None:
    stats = getattr(fixture, "stats", None)
    inner = getattr(stats, "stats", None)
    data = getattr(inner, "data", None)
    if not data:
        return None
    return [float(v) for v in data]


def _blocks(n: int) -> tuple[int, ...]:
    """Split n rounds in order into up to MIN_BLOCKS contiguous repeat blocks."""
    if n < 2 * MIN_BLOCKS:
        return (n,)
    base, extra = divmod(n, MIN_BLOCKS)
    return tuple(base + (1 if i < extra else 0) for i in range(MIN_BLOCKS))


def result_from_benchmark(test: str, fixture: Any) -> VariantResult | None:
    """A `pytest-benchmark` result from a used `benchmark` fixture; None if it timed nothing."""
    if getattr(fixture, "disabled", False):
        return None
    seconds = _raw_seconds(fixture)
    if seconds is None:
        return None
    samples = tuple(s * 1000.0 for s in seconds)
    summary = summarize(samples)
    sizes = _blocks(len(samples))
    blocks, start = [], 0
    for size in sizes:
        block = sorted(samples[start : start + size])
        blocks.append(block[len(block) // 2])
        start += size
    return VariantResult(
        test=test,
        variant=RECORD_ONLY,
        status="ok",
        metrics=Metrics(
            latency_p50_ms=summary.p50,
            latency_p95_ms=summary.p95,
            latency_p99_ms=summary.p99,
            latency_mean_ms=summary.mean,
            latency_iqr_ms=summary.iqr,
            latency_samples=summary.n,
            latency_p95_tail=tail_count(summary.n, 0.95),
            latency_p99_tail=tail_count(summary.n, 0.99),
        ),
        samples_ms=samples,
        repeats_ms=tuple(blocks),
        block_sizes=sizes,
        details={
            "source": "pytest-benchmark",
            "clock": "pytest-benchmark timer",
            "notes": ["rounds timed by pytest-benchmark; blocks are contiguous rounds"],
        },
    )
