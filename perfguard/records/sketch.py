"""What a stored result keeps of its samples: per-repeat summaries and a quantile sketch.

A baseline does not keep every timed call. The latency tests use one figure per repeat (a
block of calls: its p50, p95, p99), so those are kept exactly; the distribution of all calls is
kept as a sketch with a stated relative error, which costs a few hundred bytes whatever the
number of samples.

The sketch is DDSketch's log-bucket scheme (Masson, Rim and Lee, "DDSketch: a fast and
fully-mergeable quantile sketch with relative-error guarantees", VLDB 2019): a sample x > 0
falls in bucket ceil(log_gamma(x)), with gamma = (1 + a) / (1 - a), and a bucket is read back
as the value within a relative error a of everything in it. Any quantile read from the sketch
is within a of the sample of that rank. It is written here in plain Python (a few lines:
records import no third-party package, so that `perfguard comment` runs without them) rather
than taken from the `ddsketch` package, whose buckets are private attributes and whose only
serialization is protobuf.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfguard.records.base import RecordError

SKETCH_ACCURACY = 0.005
"""The sketch's relative accuracy: a quantile read from it is within 0.5% of the sample of
that rank (so p50/p95/p99 are within 1% of the exact figure, interpolation included)."""

BLOCK_QUANTILES = (50.0, 95.0, 99.0)
"""The per-repeat percentiles a stored result keeps: those the latency tests use."""

SIGNIFICANT_DIGITS = 7
"""Stored per-repeat figures are rounded to this many significant digits (a relative 5e-8:
far below a clock's resolution, and it halves their size)."""

_SMALLEST = 1e-9  # ms; a sample at or below this counts as zero (1 fs: nothing measures it)


def percentile(ordered: Sequence[float], q: float) -> float:
    """Percentile `q` (0..100) of sorted values, interpolated linearly between the two
    nearest ranks (numpy's default method)."""
    position = q / 100.0 * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    t = position - low
    a, b = ordered[low], ordered[high]
    return a + t * (b - a) if t < 0.5 else b - (1 - t) * (b - a)


def rounded(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


@dataclass(frozen=True)
class QuantileSketch:
    """Counts of samples in log-spaced buckets: `counts[i]` is bucket `offset + i`."""

    accuracy: float
    offset: int
    counts: tuple[int, ...]
    zeros: int = 0  # samples at or below 1e-9 ms

    def __post_init__(self) -> None:
        if not 0 < self.accuracy < 1:
            raise RecordError(f"sketch accuracy must lie in (0, 1), got {self.accuracy!r}")
        counts = tuple(int(c) for c in self.counts)
        if any(c < 0 for c in counts) or self.zeros < 0:
            raise RecordError("sketch counts must count from 0")
        object.__setattr__(self, "counts", counts)

    @property
    def gamma(self) -> float:
        return (1 + self.accuracy) / (1 - self.accuracy)

    @property
    def n(self) -> int:
        return sum(self.counts) + self.zeros

    @classmethod
    def of(cls, samples_ms: Sequence[float], accuracy: float = SKETCH_ACCURACY) -> QuantileSketch:
        log_gamma = math.log((1 + accuracy) / (1 - accuracy))
        buckets = Counter(math.ceil(math.log(x) / log_gamma) for x in samples_ms if x > _SMALLEST)
        zeros = len(samples_ms) - sum(buckets.values())
        if not buckets:
            return cls(accuracy, 0, (), zeros)
        low, high = min(buckets), max(buckets)
        return cls(accuracy, low, tuple(buckets[i] for i in range(low, high + 1)), zeros)

    def quantile(self, q: float) -> float:
        """The value at quantile `q` (0..1): within `accuracy` of the sample of rank
        q * (n - 1)."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must lie in [0, 1], got {q}")
        n = self.n
        if n == 0:
            raise ValueError("an empty sketch has no quantiles")
        rank = q * (n - 1)
        if rank < self.zeros:
            return 0.0
        seen = self.zeros
        for i, count in enumerate(self.counts):
            seen += count
            if seen > rank:
                return 2 * self.gamma ** (self.offset + i) / (self.gamma + 1)
        return 2 * self.gamma ** (self.offset + len(self.counts) - 1) / (self.gamma + 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy,
            "offset": self.offset,
            "counts": list(self.counts),
            "zeros": self.zeros,
        }

    @classmethod
    def from_json(cls, data: Any) -> QuantileSketch:
        if not isinstance(data, Mapping):
            raise RecordError(f"sketch must be an object, got {data!r}")
        try:
            return cls(
                accuracy=float(data["accuracy"]),
                offset=int(data["offset"]),
                counts=tuple(data["counts"]),
                zeros=int(data.get("zeros", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"bad sketch: {exc}") from None


@dataclass(frozen=True)
class BlockStats:
    """One figure per repeat: how many calls it timed, and their p50, p95 and p99 (ms)."""

    sizes: tuple[int, ...]
    quantiles: tuple[tuple[float, tuple[float, ...]], ...]  # (percentile, one per repeat)

    def __post_init__(self) -> None:
        sizes = tuple(int(s) for s in self.sizes)
        if any(s < 1 for s in sizes):
            raise RecordError("blocks.sizes must be positive")
        quantiles = []
        for q, values in self.quantiles:
            figures = tuple(float(v) for v in values)
            if len(figures) != len(sizes):
                raise RecordError(f"blocks.p{q:g} must have one figure per repeat")
            if any(not math.isfinite(v) or v < 0 for v in figures):
                raise RecordError(f"blocks.p{q:g} must hold finite, non-negative times")
            quantiles.append((float(q), figures))
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "quantiles", tuple(quantiles))

    @classmethod
    def of(cls, blocks: Sequence[Sequence[float]]) -> BlockStats:
        kept = [sorted(b) for b in blocks if len(b)]
        return cls(
            sizes=tuple(len(b) for b in kept),
            quantiles=tuple(
                (q, tuple(rounded(percentile(b, q)) for b in kept)) for q in BLOCK_QUANTILES
            ),
        )

    def percentile(self, q: float) -> list[float] | None:
        """The per-repeat figures of percentile `q`, or None when they were not kept."""
        for kept_q, values in self.quantiles:
            if kept_q == q:
                return list(values)
        return None

    def to_json(self) -> dict[str, Any]:
        return {"sizes": list(self.sizes)} | {f"p{q:g}": list(v) for q, v in self.quantiles}

    @classmethod
    def from_json(cls, data: Any) -> BlockStats:
        if not isinstance(data, Mapping) or not isinstance(data.get("sizes"), list):
            raise RecordError(f"blocks must be an object with sizes, got {data!r}")
        quantiles = []
        for key, values in data.items():
            if key == "sizes":
                continue
            try:
                q = float(key.removeprefix("p"))
            except ValueError:
                continue  # a key of a later version
            if not isinstance(values, list):
                raise RecordError(f"blocks.{key} must be a list of times")
            quantiles.append((q, tuple(values)))
        return cls(sizes=tuple(data["sizes"]), quantiles=tuple(quantiles))
