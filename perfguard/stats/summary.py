"""Latency summaries: percentiles, and how many samples stand behind each tail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_TAIL_SAMPLES = 10
"""A percentile is trusted when at least this many samples lie beyond it (p99 needs 1000)."""


def tail_count(n: int, quantile: float) -> int:
    """How many of `n` samples lie beyond the `quantile` (0..1)."""
    return int(np.floor(n * (1.0 - quantile) + 1e-9))


def tail_is_reliable(n: int, quantile: float) -> bool:
    return tail_count(n, quantile) >= MIN_TAIL_SAMPLES


def samples_needed(quantile: float) -> int:
    """The fewest samples for which the `quantile` has a trusted tail."""
    return int(np.ceil(MIN_TAIL_SAMPLES / (1.0 - quantile) - 1e-9))


@dataclass(frozen=True)
class LatencySummary:
    n: int
    p50: float
    p95: float
    p99: float
    mean: float
    iqr: float

    @property
    def p95_tail(self) -> int:
        return tail_count(self.n, 0.95)

    @property
    def p99_tail(self) -> int:
        return tail_count(self.n, 0.99)

    def metric_fields(self) -> dict[str, Any]:
        """The latency fields of `records.Metrics`, from this summary."""
        return {
            "latency_p50_ms": self.p50,
            "latency_p95_ms": self.p95,
            "latency_p99_ms": self.p99,
            "latency_mean_ms": self.mean,
            "latency_iqr_ms": self.iqr,
            "latency_samples": self.n,
            "latency_p95_tail": self.p95_tail,
            "latency_p99_tail": self.p99_tail,
        }

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.p50 if self.p50 > 0 else 0.0


def summarize(samples_ms: Sequence[float]) -> LatencySummary:
    """Percentiles by linear interpolation (numpy's default), mean and inter-quartile range."""
    if len(samples_ms) == 0:
        raise ValueError("cannot summarize an empty set of samples")
    data = np.asarray(samples_ms, dtype=np.float64)
    p25, p50, p75, p95, p99 = np.percentile(data, [25, 50, 75, 95, 99])
    return LatencySummary(
        n=int(data.size),
        p50=float(p50),
        p95=float(p95),
        p99=float(p99),
        mean=float(data.mean()),
        iqr=float(p75 - p25),
    )
