"""Sweeps: a test parametrized over a size (batch, sequence length) read as one curve.

A test id such as `test_bert[8]`, `test_bert[32]`, `test_bert[128]` (the same test and
variant, one whole-number parameter that changes, the others alike) is a sweep once it has
`MIN_SIZES` sizes. The report shows it as one small table and a chart of size against p50 and
throughput, both sides where there is a base, and notes the first size whose throughput
stops growing: from there the shape fills the device, and a larger one buys latency, not
throughput. A note, never a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from perfguard.records import Comparison, VariantResult
from perfguard.report.charts import label, number

MIN_SIZES = 3
FLAT_GAIN = 0.10
"""Throughput that grows by less than this share from one size to the next has stopped."""

_PARAMS = re.compile(r"^(?P<name>.*)\[(?P<params>[^\[\]]*)\]$")


@dataclass(frozen=True)
class Point:
    size: int
    p50_ms: float
    throughput: float | None
    base_p50_ms: float | None = None

    @property
    def base_throughput(self) -> float | None:
        """The base's items per second, for the same batch as this side's."""
        if self.base_p50_ms is None or self.throughput is None:
            return None
        return self.throughput * self.p50_ms / self.base_p50_ms


@dataclass(frozen=True)
class Sweep:
    test: str  # the test id with the size shown as `size`
    variant: str
    points: tuple[Point, ...]

    @property
    def flat_at(self) -> tuple[Point, Point] | None:
        """The first size whose throughput grew by less than `FLAT_GAIN` over the size
        before, with that size: (before, at)."""
        for before, at in zip(self.points, self.points[1:], strict=False):
            was, now = before.throughput, at.throughput
            if was and now is not None and now < was * (1 + FLAT_GAIN):
                return before, at
        return None

    @property
    def has_base(self) -> bool:
        return any(p.base_p50_ms is not None for p in self.points)


def _sized(test: str) -> tuple[str, int] | None:
    """(the id with its one whole-number parameter as `size`, that number), or None."""
    found = _PARAMS.match(test)
    if found is None:
        return None
    parts = found["params"].split("-")
    numbers = [i for i, part in enumerate(parts) if part.isdigit()]
    if len(numbers) != 1:
        return None
    size = int(parts[numbers[0]])
    parts[numbers[0]] = "size"
    return f"{found['name']}[{'-'.join(parts)}]", size


def find_sweeps(
    results: Sequence[VariantResult], comparisons: Sequence[Comparison] = ()
) -> list[Sweep]:
    """The sweeps among `results` (measured ones), with the base's p50 where a comparison
    has it."""
    base = {
        (c.test, c.variant): c.baseline
        for c in comparisons
        if c.metric == "latency_p50_ms" and c.baseline is not None and c.verdict != "new"
    }
    groups: dict[tuple[str, str], list[Point]] = {}
    for r in results:
        sized = _sized(r.test)
        p50 = r.metrics.latency_p50_ms
        if r.status != "ok" or sized is None or p50 is None:
            continue
        point = Point(sized[1], p50, r.metrics.throughput_per_s, base.get(r.key))
        groups.setdefault((sized[0], r.variant), []).append(point)
    return [
        Sweep(test, variant, tuple(sorted(points, key=lambda p: p.size)))
        for (test, variant), points in groups.items()
        if len({p.size for p in points}) >= MIN_SIZES
    ]


def sweep_chart(sweep: Sweep) -> str:
    """Throughput against size (this side, and the base where there is one) as a mermaid
    `xychart-beta` block; p50 is in the table beside it."""
    sizes = ", ".join(f'"{p.size}"' for p in sweep.points)
    lines = [[p.throughput or 0.0 for p in sweep.points]]
    if sweep.has_base:
        lines.append([p.base_throughput or 0.0 for p in sweep.points])
    top = max(max(line) for line in lines) * 1.1 or 1.0
    title = label(f"{sweep.test} [{sweep.variant}] throughput (items/s)")
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            f'    title "{title}"',
            f'    x-axis "size" [{sizes}]',
            f'    y-axis "items/s" 0 --> {number(top)}',
            *(f"    line [{', '.join(number(v) for v in line)}]" for line in lines),
            "```",
        ]
    )
