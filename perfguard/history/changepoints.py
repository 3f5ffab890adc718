"""Change points in a per-commit series: where main's figures stepped, how far, how surely.

Two steps, the shape Otava (MongoDB's Hunter) gave the problem:
1. candidates: PELT from `ruptures` on the log of the series (a step is relative), scaled by
   the series' own noise (the spread of successive differences, robust to the steps
   themselves), with a BIC-like penalty;
2. a check of each candidate: a Mann-Whitney U test between the stretches either side of it,
   up to the neighbouring candidates and at most `window` points each way. The weakest
   candidate that fails (p above `max_p`, or a change below `min_change_pct`) is dropped and
   the rest checked again, until every change point stands on its own evidence.
The check is a rank test, not Welch's: a baseline's p50 on a shared machine is sometimes a
whole process in a slow mode (2.5x on one of the study's models, one run in five), and such
outliers carry a t-test but not a rank test. The p-value is that of a test at a chosen split,
so it is optimistic; `max_p` is small for that reason. With a window of 30, at least five
commits must stand after a step before it can pass (and be alerted on).
`benchmarks/history_study.py` compares this with Otava's and MongoDB's e-divisive on
synthetic histories built from this project's own measured noise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it is used: `perfguard --help` needs none of it
    import numpy as np

# the metrics change points are looked for in (all of them: higher is worse)
DETECTED_METRICS = (
    "latency_p50_ms",
    "ttft_p50_ms",  # a generation's prefill and decode, each of which can step on its own
    "tpot_p50_ms",
    "peak_memory_bytes",
    "compile_time_s",
)
NOISE_FLOOR = 1e-4  # smallest noise assumed, in log units: a constant series still has steps


@dataclass(frozen=True)
class Detection:
    """How change points are found; the defaults are the ones the study chose."""

    penalty: float = 3.0  # times log(n), on the noise-scaled series
    min_size: int = 3  # points on each side of a change point, at least
    max_p: float = 1e-5  # the rank test between the two sides
    min_change_pct: float = 1.0  # smaller steps are not reported
    window: int = 30  # points each side the test looks at, at most


@dataclass(frozen=True)
class Step:
    index: int  # the first point after the change
    before: float  # the median of the stretch before it (at most `window` points)
    after: float
    change_pct: float  # after against before
    p_value: float


def noise_scale(log_values: np.ndarray) -> float:
    """The noise of one point, from successive differences (a step moves only one of them)."""
    import numpy as np

    diffs = np.diff(log_values)
    if diffs.size == 0:
        return NOISE_FLOOR
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return max(1.4826 * mad / math.sqrt(2.0), NOISE_FLOOR)


def candidates(log_values: np.ndarray, settings: Detection) -> list[int]:
    """PELT's change points (indices of the first point after each) on the scaled series."""
    import numpy as np

    n = log_values.size
    if n < 2 * settings.min_size:
        return []
    scaled = (log_values - np.median(log_values)) / noise_scale(log_values)
    penalty = settings.penalty * math.log(n)
    if n <= LONG:
        return _segmented(scaled, settings.min_size, penalty)
    # a long series in stretches, each searched with a margin either side and keeping the
    # change points of its own stretch: the same scaling and penalty as the whole series
    found = []
    for start in range(0, n, STRETCH):
        low, high = max(0, start - MARGIN), min(n, start + STRETCH + MARGIN)
        if high - low < 2 * settings.min_size:
            continue
        for end in _segmented(scaled[low:high], settings.min_size, penalty):
            if start <= low + end < start + STRETCH:
                found.append(low + end)
    return found


LONG = 1200
"""Longer series are searched in stretches: ruptures' search grows with the square of the
series' length (10,000 commits: 0.42 s a series; in stretches of 150 with 50 either side,
16 ms). On 30 synthetic series of 1,300-10,000 commits with 211 steps and outliers, the
stretches found the same steps as the whole search (`docs/method.md`)."""
STRETCH, MARGIN = 150, 50


def _segmented(scaled: np.ndarray, min_size: int, penalty: float) -> list[int]:
    """PELT with the l2 cost, as ruptures' C implementation (`KernelCPD` with the linear
    kernel is that cost): the same change points as `Pelt(model="l2")`, or a placement of
    lower cost where that one's pruning is not exact, and far faster than the Python one
    (1,000 commits: 4 ms against 8.5 s)."""
    import numpy as np

    pelt = _pelt_l2()
    signal = np.ascontiguousarray(scaled, dtype=float).reshape(-1, 1)
    if pelt is None:
        import ruptures

        algo = ruptures.KernelCPD(kernel="linear", min_size=min_size)
        return [int(e) for e in algo.fit(signal).predict(pen=penalty)[:-1]]
    parent = pelt(signal, penalty, min_size)  # each end's segment's start (KernelCPD.predict)
    ends, at = [], len(signal)
    while at > 0:
        ends.append(at)
        at = int(parent[at])
    return ends[::-1][:-1]


@functools.cache
def _pelt_l2() -> Callable[[np.ndarray, float, int], np.ndarray] | None:
    """ruptures' compiled PELT of the linear kernel, loaded alone: `import ruptures` imports
    every detector and cost of the package, scipy.stats among them (0.9 s here, paid by each
    of a push's `history`, `alert` and `site`, against 0.06 s). None where it cannot be found
    this way (another release's layout): `KernelCPD` is used, the same search."""
    import importlib.machinery
    import importlib.util

    name = "ruptures.detection._detection.ekcpd"
    try:
        package = importlib.util.find_spec("ruptures")
        if package is None or package.origin is None:
            return None
        folder = Path(package.origin).parent / "detection" / "_detection"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if (folder / f"ekcpd{suffix}").is_file():
                loader = importlib.machinery.ExtensionFileLoader(
                    name, str(folder / f"ekcpd{suffix}")
                )
                spec = importlib.util.spec_from_loader(name, loader)
                if spec is None:
                    return None
                module = importlib.util.module_from_spec(spec)
                loader.exec_module(module)
                found: Callable[[np.ndarray, float, int], np.ndarray] = module.ekcpd_pelt_L2
                return found
    except (ImportError, OSError, AttributeError):
        return None
    return None


def rank_p(left: np.ndarray, right: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value; two constant sides are 1 when equal and 0 when not.

    The same p-values as scipy's `mannwhitneyu` (exact where there are no ties, else the
    normal approximation with the tie correction and continuity), computed here: a long
    history tests thousands of splits, and scipy's checks and its exact distribution, made
    again per call, were most of a whole history's search (1.6 ms a test against 49 us).
    `tests/test_history.py` holds the two to the same figures."""
    import numpy as np

    m, n = left.size, right.size
    if m < 2 or n < 2:
        return 1.0
    if np.ptp(left) == 0 and np.ptp(right) == 0:
        return 1.0 if left[0] == right[0] else 0.0
    both = np.concatenate([left, right])
    ordered = np.sort(both)
    # each value's rank, ties given their mean rank, and how many values share it
    first = np.searchsorted(ordered, both, side="left")
    last = np.searchsorted(ordered, both, side="right")
    ranks = (first + last + 1) / 2.0
    u = float(ranks[:m].sum()) - m * (m + 1) / 2.0
    u = max(u, m * n - u)
    shared = last - first
    if (shared == 1).all():
        # no ties: exact, where it is valid (the normal approximation is far too cautious in
        # the tails, e.g. 8.6e-5 instead of 3.1e-6 for ten points all below twelve others)
        tail, at = _u_tail(min(m, n), max(m, n)), round(u)
        return min(2.0 * float(tail[at]), 1.0) if at < tail.size else 0.0
    # ties: the normal approximation, its variance corrected for them
    total = m + n
    ties = float((shared.astype(float) ** 2 - 1).sum())  # each group of t: t**3 - t
    sd = math.sqrt(m * n / 12.0 * ((total + 1) - ties / (total * (total - 1))))
    if sd == 0:
        return 1.0
    z = (u - m * n / 2.0 - 0.5) / sd
    return min(1.0, math.erfc(z / math.sqrt(2.0)))  # twice the upper tail


@functools.cache
def _u_tail(m: int, n: int) -> np.ndarray:
    """P(U >= u) for u = 0..m*n, U the Mann-Whitney statistic of `m` points against `n`
    with no ties and no difference: the exact distribution."""
    counts = _u_counts(32 * math.ceil(max(m, n) / 32))[min(m, n)][max(m, n)]
    tail: np.ndarray = counts[::-1].cumsum()[::-1] / counts.sum()
    return tail


@functools.cache
def _u_counts(size: int) -> list[list[np.ndarray]]:
    """counts[i][j][u]: the orderings of `i` points among `j` others (no ties) in which the
    `i` beat the others `u` times, for every i, j up to `size` (a multiple of 32: one table
    holds every pair of sizes of the search's window): the largest of all is one of the `i`
    (beating all `j`) or one of the `j`."""
    import numpy as np

    counts = [[np.ones(1)] * (size + 1)]
    for i in range(1, size + 1):
        row = [np.ones(1)]
        for j in range(1, size + 1):
            ways = np.zeros(i * j + 1)
            below = counts[i - 1][j]  # the largest is one of the i
            ways[j : j + below.size] += below
            beside = row[j - 1]  # the largest is one of the j
            ways[: beside.size] += beside
            row.append(ways)
        counts.append(row)
    return counts


def _step(values: np.ndarray, logs: np.ndarray, bounds: Sequence[int], i: int, w: int) -> Step:
    import numpy as np

    start, at, end = bounds[i - 1], bounds[i], bounds[i + 1]
    left = slice(max(start, at - w), at)
    right = slice(at, min(end, at + w))
    before = float(np.median(values[left]))
    after = float(np.median(values[right]))
    change = (after - before) / before * 100.0 if before else math.inf
    return Step(at, before, after, change, rank_p(logs[left], logs[right]))


def find_steps(
    values: Sequence[float] | np.ndarray, settings: Detection | None = None
) -> list[Step]:
    """The change points of `values` (oldest first), each checked on its own evidence."""
    import numpy as np

    settings = settings or Detection()
    data = np.asarray(values, dtype=float)
    if data.size < 2 * settings.min_size or not np.all(np.isfinite(data)) or np.any(data <= 0):
        return []
    if np.ptp(data) == 0:  # a constant series (a model's memory, often) has no step
        return []
    logs = np.log(data)
    cps = candidates(logs, settings)
    # a step's test depends on its neighbours alone: dropping a candidate tests its two
    # neighbours again, not every step (a long noisy series has hundreds of candidates)
    tested: dict[tuple[int, int, int], Step] = {}

    def step(bounds: Sequence[int], i: int) -> Step:
        key = (bounds[i - 1], bounds[i], bounds[i + 1])
        if key not in tested:
            tested[key] = _step(data, logs, bounds, i, settings.window)
        return tested[key]

    while cps:
        bounds = [0, *cps, data.size]
        steps = [step(bounds, i) for i in range(1, len(bounds) - 1)]
        failing = [
            s
            for s in steps
            if s.p_value > settings.max_p or abs(s.change_pct) < settings.min_change_pct
        ]
        if not failing:
            return steps
        weakest = max(failing, key=lambda s: (s.p_value, -abs(s.change_pct)))
        cps.remove(weakest.index)
    return []


@dataclass(frozen=True)
class Sight:
    """What the search can see in a series of `n` commits: a lone step only between the
    `first` and the `last` index (nearer an end, the rank test cannot reach `max_p` even
    when every point of one side lies beyond every point of the other), and only one of
    `smallest_pct` or more (at the middle of the series, in its own noise: the least step
    whose cost saving beats PELT's penalty). `first` None: nowhere (too short)."""

    n: int
    first: int | None
    last: int | None
    smallest_pct: float


def _best_p(left: int, right: int) -> float:
    """The smallest two-sided exact Mann-Whitney p of `left` points against `right`."""
    return min(1.0, 2.0 / math.comb(left + right, left))


def reach(values: Sequence[float] | np.ndarray, settings: Detection | None = None) -> Sight:
    import numpy as np

    settings = settings or Detection()
    n, w = len(values), settings.window

    def seen(i: int) -> bool:
        return _best_p(min(i, w), min(n - i, w)) <= settings.max_p

    # the first and the last index it can see: near each end (within `window` of it, past
    # that every index is seen alike), not every index of a long series
    indices = range(settings.min_size, n - settings.min_size + 1)
    first = next((i for i in indices if seen(i)), None)
    last = next((i for i in reversed(indices) if seen(i)), None)
    data = np.asarray(values, dtype=float)
    noise = NOISE_FLOOR
    if data.size >= 2 and np.all(np.isfinite(data)) and np.all(data > 0):
        noise = noise_scale(np.log(data))
    half = max(n // 2, 1)
    least = math.sqrt(settings.penalty * math.log(max(n, 2)) * n / (half * max(n - half, 1)))
    smallest = max(100.0 * math.expm1(least * noise), settings.min_change_pct)
    return Sight(n, first, last, smallest)
