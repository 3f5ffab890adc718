from __future__ import annotations

import numpy as np
import pytest

from perfguard.stats.summary import samples_needed, summarize, tail_count, tail_is_reliable


def test_percentiles_match_numpy_linear_interpolation() -> None:
    data = list(range(1, 101))  # 1..100
    s = summarize(data)
    assert s.n == 100
    assert s.p50 == pytest.approx(50.5)
    assert s.p95 == pytest.approx(95.05)
    assert s.p99 == pytest.approx(99.01)
    assert s.mean == pytest.approx(50.5)
    assert s.iqr == pytest.approx(np.percentile(data, 75) - np.percentile(data, 25))
    assert s.p50 <= s.p95 <= s.p99


def test_tail_counts_say_how_many_samples_stand_behind_a_percentile() -> None:
    assert tail_count(100, 0.99) == 1
    assert tail_count(1000, 0.99) == 10
    assert tail_count(200, 0.95) == 10
    assert not tail_is_reliable(999, 0.99)
    assert tail_is_reliable(1000, 0.99)
    assert samples_needed(0.99) == 1000
    assert samples_needed(0.95) == 200


def test_empty_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([])
