"""Welch's t-test, Cohen's d, multiple-comparison corrections, minimum detectable change."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps

Values = Sequence[float] | NDArray[Any]


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
    p = 2.0 * float(sps.t.sf(abs(t), df))
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
    q = float(sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(power, df))
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
    reproducible. None with fewer than two values.
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


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
    return t, 2.0 * float(sps.t.sf(abs(t), df)), df


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
    q = float(sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(power, df))
    return 100.0 * math.expm1(q * se)
