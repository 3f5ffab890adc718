"""Sampling until decided: the group-sequential design of same-job A/B.

A/B measures an item in pairs of blocks (base, head, back to back). Instead of a fixed
number of pairs, the driver looks at the pairs so far at a few planned points (`LOOKS`) and
stops as soon as the verdict is decided; a noisy item gets more pairs, up to the last look,
instead of an `inconclusive`.

Error control: each look k tests at its own level alpha_k, the increments of Lan and DeMets'
Pocock-type spending function alpha(t) = alpha * ln(1 + (e - 1) t), t = pairs / last look.
The increments add up to alpha, so by the union bound the chance that any look calls a
change where there is none is at most alpha, however the looks depend on each other. The
same repeated confidence intervals bound the other error: the chance that a look stops with
`unchanged` while the true change is at least the margin is at most alpha too.

Two thresholds, because they answer two questions. The bar (`ab_min_change_pct`, 5%) is the
smallest change a pair of processes measured side by side may call; the margin
(`min_change_pct`, 10%) is the smallest change that matters, the one stored mode judges by.
Ruling out 5% needs pairs that scatter by less than about 2% to stop at the first look; on
this project's 2-core runner many scatter by 3-5%, and such items of identical code took 10
to 32 pairs. Ruling out 10% stops them at 6 or 10. A change between the two is still called when
the pairs show it; it is not stopped as `unchanged` while its estimate is at the bar.

At look k, each of two statistics of the log ratios, their mean and their 25%-trimmed mean,
gives an interval at level 1 - alpha_k / 2 (Bonferroni over the two, so the bounds above
hold for the pair):
- decided `regression` (or `improvement`): for either statistic, 0 is outside its interval
  at level 1 - alpha_k / (2 M), M the p-values the run's Benjamini-Hochberg correction
  shares (so the corrected final verdict agrees), and its estimate is at least the bar;
- decided `unchanged`: neither calls a change, one interval lies within (-margin, +margin),
  so no change as large as the margin fits, and its estimate is below the bar (else more
  pairs may show the change: a stop here would end in `inconclusive`);
- otherwise the next look; the last look decides whatever it finds.
Why two: on a busy runner a burst of other work that hits one block of a pair doubles its
time, and a few such pairs widen the mean's interval past any decision; the trimmed mean
sets them aside. The mean is the stronger when the pairs are quiet, and when a large change
meets bursts on every other pair, so that the ratios fall in two clusters.
The final verdict (in `perfguard.stats.verdicts`) takes the same two tests
(`perfguard.stats.significance.paired_test`) and scales the p-value by alpha / alpha_k of the look
it stopped at, so the same data give the same decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from perfguard.stats.significance import PAIRED_STATISTICS, log_ratio_interval

LOOKS: tuple[int, ...] = (6, 10, 16, 24, 32)
"""Pairs at each look. Six pairs decide a clear case; 32 are the cap for a noisy one."""

METRICS: Mapping[str, float] = {"latency_p50_ms": 50.0}
"""What the stop waits for: the median, the headline. The tails are judged on the pairs
taken: a block's p95 scatters three to five times as much between pairs as its median (on
this project's runner, 1.0-2.4% against 2.8-7.6% for identical code), and waiting for it
would take the cap on every item."""


def spent(t: float, alpha: float) -> float:
    """Pocock-type alpha spending (Lan-DeMets): the share of alpha spent by fraction t."""
    return alpha * math.log1p((math.e - 1.0) * min(max(t, 0.0), 1.0))


def look_alpha(pairs: int, alpha: float, looks: Sequence[int] = LOOKS) -> float | None:
    """The level of the look at `pairs` pairs, or None when no look is planned there."""
    if pairs not in looks:
        return None
    k = list(looks).index(pairs)
    last = looks[-1]
    before = spent(looks[k - 1] / last, alpha) if k else 0.0
    return spent(pairs / last, alpha) - before


@dataclass(frozen=True)
class Look:
    """What one look found for one metric."""

    decided: bool
    verdict: str  # regression, improvement, unchanged, or undecided
    change_pct: float  # the estimate of the statistic that decided (else the trimmed mean)
    interval_pct: tuple[float, float]  # its repeated confidence interval, in percent
    statistic: str = "trimmed"  # "mean" or "trimmed": which of the two decided


def _verdict_of(
    d: NDArray[Any], statistic: str, level: float, strict: float, bar: float, margin: float
) -> tuple[str, float, tuple[float, float]]:
    est, low, high = log_ratio_interval(d, level, statistic)
    _, strict_low, strict_high = log_ratio_interval(d, strict, statistic)
    verdict = "undecided"
    if (strict_low > 0 or strict_high < 0) and abs(est) >= bar:
        verdict = "regression" if est > 0 else "improvement"
    elif -margin < low and high < margin and abs(est) < bar:
        verdict = "unchanged"
    return verdict, est, (low, high)


def look(
    log_ratios: Sequence[float] | NDArray[Any],
    alpha_k: float,
    bar_pct: float,
    *,
    last: bool = False,
    tests: int = 1,
    margin_pct: float | None = None,
) -> Look:
    """Decide from the log ratios (log head/base per pair) at a look of level `alpha_k`.

    Two statistics of the log ratios are asked, each at half the look's level (Bonferroni):
    the mean, and the 25%-trimmed mean (`perfguard.stats.significance.PAIRED_STATISTICS`). A change
    called by either stops; so does `unchanged` when neither calls a change.
    `tests`: how many p-values the run's Benjamini-Hochberg correction will share this one
    with. A change is called only at alpha_k / tests (Bonferroni, which BH never undercuts),
    so that the final verdict, corrected over the run, agrees with the stop.
    `margin_pct`: `unchanged` needs the interval within plus or minus this (at least the
    bar; None: the bar)."""
    d = np.asarray(log_ratios, dtype=float)
    bar = math.log1p(bar_pct / 100.0)
    margin = math.log1p(max(margin_pct or 0.0, bar_pct) / 100.0)
    level = alpha_k / len(PAIRED_STATISTICS)
    found = {
        statistic: _verdict_of(d, statistic, level, level / max(tests, 1), bar, margin)
        for statistic in PAIRED_STATISTICS
    }
    called = {s: f for s, f in found.items() if f[0] in ("regression", "improvement")}
    if len({f[0] for f in called.values()}) == 1:
        statistic, (verdict, est, ci) = next(iter(called.items()))
        decided = True
    else:  # no change called (or, never seen, both ways at once)
        calm = {s: f for s, f in found.items() if f[0] == "unchanged"}
        statistic = next(iter(calm), "trimmed")
        verdict, est, ci = found[statistic]
        decided = bool(calm) and not called
        if not decided:
            verdict = "undecided"
    return Look(
        decided or last,
        verdict,
        100.0 * math.expm1(est),
        (100.0 * math.expm1(ci[0]), 100.0 * math.expm1(ci[1])),
        statistic,
    )


def block_log_ratios(
    base_blocks: Sequence[Sequence[float]], head_blocks: Sequence[Sequence[float]], q: float
) -> list[float]:
    """log(head / base) of the q-th percentile of each pair of blocks."""
    out = []
    for a, b in zip(base_blocks, head_blocks, strict=False):
        pa, pb = float(np.percentile(a, q)), float(np.percentile(b, q))
        if pa > 0 and pb > 0:
            out.append(math.log(pb / pa))
    return out


def should_stop(
    base_blocks: Sequence[Sequence[float]],
    head_blocks: Sequence[Sequence[float]],
    *,
    alpha: float,
    bar_pct: float,
    tests: int = 1,
    looks: Sequence[int] = LOOKS,
    margin_pct: float | None = None,
) -> tuple[bool, dict[str, Any]]:
    """Whether the driver may stop after these pairs, and what each metric's look found.

    Not at a planned look: go on. At the last look: stop. Otherwise stop once the median
    is decided."""
    pairs = min(len(base_blocks), len(head_blocks))
    alpha_k = look_alpha(pairs, alpha, looks)
    if alpha_k is None:
        return pairs >= looks[-1], {}
    last = pairs == looks[-1]
    found = {
        metric: look(
            block_log_ratios(base_blocks, head_blocks, q),
            alpha_k,
            bar_pct,
            last=last,
            tests=tests,
            margin_pct=margin_pct,
        )
        for metric, q in METRICS.items()
    }
    summary = {
        metric: {
            "verdict": f.verdict,
            "change_pct": round(f.change_pct, 3),
            "interval_pct": [round(v, 3) for v in f.interval_pct],
            "statistic": f.statistic,
        }
        for metric, f in found.items()
    }
    return last or all(f.decided for f in found.values()), summary
