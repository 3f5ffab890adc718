"""The statistics against scipy and known cases, with exact expectations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from perfguard.stats.significance import (
    benjamini_hochberg,
    bootstrap_ci,
    cohens_d,
    holm,
    min_detectable_pct,
    welch_t_test,
)

A = [10.1, 10.3, 9.8, 10.0, 10.2, 9.9]
B = [10.9, 11.2, 10.8, 11.1, 11.0, 10.7, 11.3]


def test_welch_matches_scipy() -> None:
    t, p, df = welch_t_test(A, B)
    ref = sps.ttest_ind(B, A, equal_var=False)
    assert t == pytest.approx(ref.statistic, rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-10)
    assert df == pytest.approx(ref.df, rel=1e-12)


def test_welch_degenerate_cases() -> None:
    assert welch_t_test([1.0, 1.0], [1.0, 1.0])[1] == 1.0
    t, p, _ = welch_t_test([1.0, 1.0], [2.0, 2.0])
    assert p == 0.0 and t == math.inf
    with pytest.raises(ValueError, match="two values"):
        welch_t_test([1.0], [1.0, 2.0])


def test_cohens_d_with_and_without_hedges_correction() -> None:
    nx, ny = len(A), len(B)
    pooled = math.sqrt(
        ((nx - 1) * np.var(A, ddof=1) + (ny - 1) * np.var(B, ddof=1)) / (nx + ny - 2)
    )
    raw = (np.mean(B) - np.mean(A)) / pooled
    assert cohens_d(A, B, hedges=False) == pytest.approx(raw, rel=1e-12)
    assert cohens_d(A, B) == pytest.approx(raw * (1 - 3 / (4 * (nx + ny) - 9)), rel=1e-12)
    assert cohens_d(B, A) == pytest.approx(-cohens_d(A, B))


def test_benjamini_hochberg_matches_scipy() -> None:
    p = [0.01, 0.04, 0.03, 0.20, 0.002]
    assert benjamini_hochberg(p) == pytest.approx(list(sps.false_discovery_control(p)))
    assert benjamini_hochberg([]) == []


def test_holm_known_case() -> None:
    # sorted 0.01, 0.02, 0.04 -> 0.03, 0.04, 0.04 (monotone), in input order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])


def test_min_detectable_change_shrinks_with_more_data_and_less_noise() -> None:
    rng = np.random.default_rng(0)
    small = min_detectable_pct(rng.normal(10, 0.5, 5), rng.normal(10, 0.5, 5))
    large = min_detectable_pct(rng.normal(10, 0.5, 50), rng.normal(10, 0.5, 50))
    quiet = min_detectable_pct(rng.normal(10, 0.05, 5), rng.normal(10, 0.05, 5))
    assert large < small and quiet < small
    assert min_detectable_pct([1.0], [1.0, 2.0]) == math.inf


def test_min_detectable_change_is_what_welch_then_detects() -> None:
    """A shift of the reported size is flagged about `power` of the time."""
    rng = np.random.default_rng(1)
    # the typical estimate from 8 vs 8 repeats (one draw alone can under-estimate the noise)
    mde = float(
        np.median(
            [min_detectable_pct(rng.normal(100, 2, 8), rng.normal(100, 2, 8)) for _ in range(200)]
        )
    )
    hits = sum(
        welch_t_test(rng.normal(100, 2, 8), rng.normal(100 * (1 + mde / 100), 2, 8))[1] < 0.05
        for _ in range(1000)
    )
    assert 0.75 < hits / 1000 < 0.85


def test_bootstrap_interval_of_the_mean_of_repeats() -> None:
    values = [10.0, 10.2, 9.8, 10.1, 9.9]
    low, high = bootstrap_ci(values)  # type: ignore[misc]
    assert low < float(np.mean(values)) < high
    # the percentile bootstrap of a mean: close to the normal-theory interval, never wider
    # than the range of the data
    assert low >= 9.8 and high <= 10.2
    assert bootstrap_ci(values) == bootstrap_ci(values)  # seeded: reports are reproducible
    assert bootstrap_ci([1.0]) is None
    wide = bootstrap_ci([5.0, 15.0, 5.0, 15.0, 5.0, 15.0], confidence=0.99)
    narrow = bootstrap_ci([5.0, 15.0, 5.0, 15.0, 5.0, 15.0], confidence=0.5)
    assert wide is not None and narrow is not None
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    with pytest.raises(ValueError):
        bootstrap_ci(values, confidence=1.5)


def test_bootstrap_interval_matches_scipy_percentile_bootstrap() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(100.0, 5.0, size=12)
    mine = bootstrap_ci(values, resamples=20000)
    ref = sps.bootstrap(
        (values,), np.mean, n_resamples=20000, method="percentile", random_state=1
    ).confidence_interval
    assert mine is not None
    assert mine[0] == pytest.approx(ref.low, rel=2e-3)
    assert mine[1] == pytest.approx(ref.high, rel=2e-3)


def test_bootstrap_interval_is_numpys_quantile_of_the_seeded_resamples_to_the_last_bit() -> None:
    """The kept resample indices and the hand-written quantile give what drawing them anew
    and `np.quantile` give: reports and stored comparisons do not move by a bit."""

    def drawn_anew(values: list[float], confidence: float, resamples: int) -> tuple[float, float]:
        x = np.asarray(values)
        rng = np.random.default_rng(0)
        means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
        tail = (1 - confidence) / 2
        low, high = np.quantile(means, [tail, 1 - tail])
        return float(low), float(high)

    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(2, 30))
        values = list(rng.lognormal(0.0, float(rng.random()), size=n) * 10.0 ** rng.integers(-3, 4))
        confidence = float(rng.choice([0.5, 0.9, 0.95, 0.99, rng.random()]))
        resamples = int(rng.choice([1, 2, 7, 1999, 2000]))
        expected = drawn_anew(values, confidence, resamples)
        assert bootstrap_ci(values, confidence=confidence, resamples=resamples) == expected
