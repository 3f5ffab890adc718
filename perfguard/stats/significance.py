"""Welch's t-test, Cohen's d, multiple-comparison corrections, minimum detectable change."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

Values = Sequence[float] | NDArray[Any]


def _t_sf(t: float, df: float) -> float:
    """Student's t survival function (scipy.special, imported when first judged: even it
    takes a fifth of a second, which a report or an A/B worker, judging nothing, would pay;
    `scipy.stats` takes half a second)."""
    from scipy import special

    return float(special.stdtr(df, -t))


def _t_ppf(q: float, df: float) -> float:
    """Student's t quantile function."""
    from scipy import special

    return float(special.stdtrit(df, q))


def welch_t_test(a: Values, b: Values) -> tuple[float, float, float]:
    """(t, two-sided p, Welch-Satterthwaite df) for the difference of means of b and a.

    Identical constant samples give t=0, p=1; different constant samples give p=0.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        raise ValueError("Welch's t-test needs at least two values on each side")
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    diff = y.mean() - x.mean()
    se2 = vx + vy
    if se2 == 0:
        return (
            (0.0, 1.0, float(x.size + y.size - 2))
            if diff == 0
            else (math.copysign(math.inf, diff), 0.0, float(x.size + y.size - 2))
        )
    t = diff / math.sqrt(se2)
    df = se2**2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    p = 2.0 * _t_sf(abs(t), df)
    return float(t), p, float(df)


def cohens_d(a: Values, b: Values, *, hedges: bool = True) -> float:
    """Standardized difference (b - a) / pooled SD, with Hedges' small-sample correction."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    nx, ny = x.size, y.size
    if nx < 2 or ny < 2:
        raise ValueError("Cohen's d needs at least two values on each side")
    pooled = math.sqrt(((nx - 1) * x.var(ddof=1) + (ny - 1) * y.var(ddof=1)) / (nx + ny - 2))
    diff = float(y.mean() - x.mean())
    if pooled == 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    d = diff / pooled
    if hedges:
        d *= 1.0 - 3.0 / (4.0 * (nx + ny) - 9.0)
    return d


def benjamini_hochberg(p_values: Values) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), in the input order."""
    p = np.asarray(p_values, dtype=float)
    n = p.size
    if n == 0:
        return []
    order = np.argsort(p)
    ranked = p[order] * n / np.arange(1, n + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(n)
    out[order] = np.minimum(adjusted, 1.0)
    return [float(v) for v in out]


def holm(p_values: Values) -> list[float]:
    """Holm-Bonferroni adjusted p-values (family-wise error), in the input order."""
    p = np.asarray(p_values, dtype=float)
    n = p.size
    if n == 0:
        return []
    order = np.argsort(p)
    stepped = np.maximum.accumulate(p[order] * (n - np.arange(n)))
    out = np.empty(n)
    out[order] = np.minimum(stepped, 1.0)
    return [float(v) for v in out]


def min_detectable_pct(a: Values, b: Values, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest change of the mean (in % of a's mean) a Welch test would flag with `power`.

    Normal-theory approximation with Student quantiles at the Welch df:
    (t_{1-alpha/2} + t_{power}) * SE / mean(a).
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2 or x.mean() == 0:
        return math.inf
    se2 = x.var(ddof=1) / x.size + y.var(ddof=1) / y.size
    if se2 == 0:
        return 0.0
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    denom = (vx**2 / (x.size - 1) if vx else 0.0) + (vy**2 / (y.size - 1) if vy else 0.0)
    df = se2**2 / denom if denom else float(x.size + y.size - 2)
    q = _t_ppf(1 - alpha / 2, df) + _t_ppf(power, df)
    return 100.0 * q * math.sqrt(se2) / abs(float(x.mean()))


def bootstrap_ci(
    values: Values,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the mean of `values` (per-repeat statistics).

    Resampling the independent units, not the calls inside them. Seeded, so a report is
    reproducible. None with fewer than two values. The resamples' indices depend only on
    the number of values (and the seed), so they are drawn once per number and kept: a
    large suite's comparison draws them a few times, not six times per result.
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    means = np.sort(x[_resample_indices(x.size, resamples, seed)].mean(axis=1))
    tail = (1 - confidence) / 2
    return _linear_quantile(means, tail), _linear_quantile(means, 1 - tail)


@functools.lru_cache(maxsize=256)
def _resample_indices(n: int, resamples: int, seed: int) -> NDArray[Any]:
    indices: NDArray[Any] = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    indices.flags.writeable = False
    return indices


def _linear_quantile(ordered: NDArray[Any], q: float) -> float:
    """`np.quantile(values, q)` (its default, linear method) of values already sorted, to
    the last bit: the same index and the same interpolation, without its per-call cost."""
    at = (ordered.size - 1) * q  # numpy's virtual index for the linear method
    below = math.floor(at)
    above = min(below + 1, ordered.size - 1)
    gamma = at - below
    a, b = float(ordered[below]), float(ordered[above])
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


EXACT = 1e-12  # a spread of log ratios below this is rounding: the ratio is constant


def _log_ratios(a: Values, b: Values) -> NDArray[Any]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size != y.size:
        raise ValueError(f"paired values need equal lengths, got {x.size} and {y.size}")
    if x.size < 2:
        raise ValueError("a paired test needs at least two pairs")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("paired timings must be positive")
    ratios: NDArray[Any] = np.log(y) - np.log(x)
    return ratios


def paired_t_test(a: Values, b: Values) -> tuple[float, float, float]:
    """(t, two-sided p, df) of a paired t-test on log(b_i / a_i).

    For same-job A/B blocks: pair i holds block i of each side, measured back to back, so
    drift that moves both cancels in the ratio. Logs make the effect relative, as the
    change is reported. Identical pairs give t=0, p=1; a constant non-zero ratio gives p=0.
    """
    d = _log_ratios(a, b)
    df = float(d.size - 1)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd < EXACT:  # logs of a constant ratio differ by rounding only
        return (0.0, 1.0, df) if mean == 0 else (math.copysign(math.inf, mean), 0.0, df)
    t = mean / (sd / math.sqrt(d.size))
    return t, 2.0 * _t_sf(abs(t), df), df


TRIM = 0.25
"""The share of log ratios the trimmed-mean test drops at each end (Tukey-McLaughlin)."""


def log_ratio_interval(
    d: Values, level: float, statistic: str = "mean"
) -> tuple[float, float, float]:
    """(estimate, low, high) of the location of log ratios `d`, at confidence 1 - level.

    `mean`: Student's t interval. `trimmed`: the 25%-trimmed mean with its winsorized
    standard error and h - 1 degrees of freedom, h the values kept (scipy's
    `mstats.trimmed_mean_ci`). A pair that a burst of other work hit on one side only gives a
    ratio far off the rest (a full burst doubles a block); the trimmed mean sets those aside,
    where one of them can widen the mean's interval past any decision."""
    x = np.asarray(d, dtype=float)
    if x.size < 2:
        return (float(x.mean()) if x.size else 0.0), -math.inf, math.inf
    est, se, df = _location(x, statistic)
    if se < EXACT:  # a constant ratio: no spread to allow for
        return est, est, est
    half = _t_ppf(1.0 - level / 2.0, df) * se
    return est, est - half, est + half


def _location(x: NDArray[Any], statistic: str) -> tuple[float, float, float]:
    """(estimate, standard error, degrees of freedom) of the location of `x`: its mean, or
    its 25%-trimmed mean (winsorized standard error, h - 1 degrees of freedom)."""
    if statistic == "mean":
        return float(x.mean()), float(x.std(ddof=1)) / math.sqrt(x.size), float(x.size - 1)
    if statistic == "trimmed":
        # scipy's mstats.trimmed_mean and trimmed_stde, written out: importing scipy.stats
        # takes the A/B driver half a second of CPU while its workers start (the tests
        # check the two agree)
        n, cut = x.size, int(TRIM * x.size)
        ordered = np.sort(x)
        est = float(ordered[cut : n - cut].mean())
        winsorized = np.clip(ordered, ordered[cut], ordered[n - cut - 1])
        se = float(winsorized.std(ddof=1)) / ((1.0 - 2.0 * TRIM) * math.sqrt(n))
        return est, se, float(max(n - 2 * cut - 1, 1))
    raise ValueError(f"unknown statistic {statistic!r}")


def paired_trimmed_test(a: Values, b: Values) -> tuple[float, float, float]:
    """(t, two-sided p, df) of the 25%-trimmed mean of log(b_i / a_i) against 0."""
    est, se, df = _location(_log_ratios(a, b), "trimmed")
    if se < EXACT:
        return (0.0, 1.0, df) if est == 0 else (math.copysign(math.inf, est), 0.0, df)
    t = est / se
    return t, 2.0 * _t_sf(abs(t), df), df


PAIRED_STATISTICS = ("mean", "trimmed")
"""The paired design asks both, each at half the level (Bonferroni): the mean is the
stronger on quiet pairs and on a large change split by bursts into two clusters; the
trimmed mean when a few pairs were hit by a burst on one side."""


def paired_test(a: Values, b: Values) -> float:
    """Two-sided p of the paired design: the smaller of the t-test's and the trimmed-mean
    test's p, doubled (Bonferroni over the two)."""
    p_mean = paired_t_test(a, b)[1]
    p_trim = paired_trimmed_test(a, b)[1]
    return min(1.0, 2.0 * min(p_mean, p_trim))


def paired_change_interval(a: Values, b: Values, level: float) -> tuple[float, float] | None:
    """The interval of the change from `a` to `b`, in percent, at confidence 1 - `level`:
    the 25%-trimmed mean of the pairs' log ratios (the statistic that sets a burst aside);
    None where it is unbounded (too few pairs)."""
    _, low, high = log_ratio_interval(_log_ratios(a, b), level, "trimmed")
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return 100.0 * math.expm1(low), 100.0 * math.expm1(high)


def paired_cohens_d(a: Values, b: Values) -> float:
    """Cohen's d for paired blocks (d_z: mean log ratio over its SD), Hedges-corrected."""
    d = _log_ratios(a, b)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd < EXACT:
        return 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return mean / sd * (1.0 - 3.0 / (4.0 * (d.size - 1) - 1.0))


def paired_min_detectable_pct(
    a: Values, b: Values, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest relative change the paired test would flag with `power`, in percent."""
    d = _log_ratios(a, b)
    se = float(d.std(ddof=1)) / math.sqrt(d.size)
    df = d.size - 1
    q = _t_ppf(1 - alpha / 2, df) + _t_ppf(power, df)
    return 100.0 * math.expm1(q * se)
