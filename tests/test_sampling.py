"""The sampling logic against a scripted clock, with exact expectations."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from perfguard.measure.clock import FakeClock
from perfguard.measure.sampling import SamplingSettings, sample, sample_block, warm_up


def test_warm_up_stops_once_two_windows_agree() -> None:
    # a compile on call 1, a CUDA-graph record on call 2, then steady 1.0 ms
    clock = FakeClock([500.0, 20.0, *[1.0] * 100])
    settings = SamplingSettings(min_warmup=3, warmup_window=5)
    out = warm_up(lambda: None, clock, settings)
    # medians are robust: after 10 calls, windows [1..5] and [6..10] both have median 1.0
    assert out.stable
    assert out.calls == 10
    assert out.times_ms[:2] == (500.0, 20.0)


def test_warm_up_gives_up_after_max_calls_and_says_so() -> None:
    drifting = (1.0 + 0.1 * i for i in itertools.count())  # never settles
    settings = SamplingSettings(min_warmup=3, max_warmup=30, warmup_window=5, max_warmup_ms=1e9)
    out = warm_up(lambda: None, FakeClock(drifting), settings)
    assert not out.stable
    assert out.calls == 30


def test_warm_up_gives_up_after_its_time_budget() -> None:
    slow_and_drifting = (10.0 * (1.2**i) for i in itertools.count())
    settings = SamplingSettings(min_warmup=2, max_warmup=1000, max_warmup_ms=100.0)
    out = warm_up(lambda: None, FakeClock(slow_and_drifting), settings)
    assert not out.stable
    # calls 3.. add 14.4, 17.28, 20.7, 24.9, 29.9 ms: over 100 ms after the 7th call
    assert out.calls == 7


def test_block_meets_min_samples_even_when_calls_are_slow() -> None:
    block = sample_block(
        lambda: None, FakeClock([50.0] * 20), min_samples=4, max_samples=100, budget_ms=10.0
    )
    assert block == (50.0,) * 4


def test_block_fills_its_budget() -> None:
    block = sample_block(
        lambda: None, FakeClock([2.0] * 100), min_samples=1, max_samples=100, budget_ms=10.0
    )
    assert len(block) == 5


def test_block_stops_at_max_samples() -> None:
    block = sample_block(
        lambda: None, FakeClock([0.001] * 100), min_samples=1, max_samples=7, budget_ms=1000.0
    )
    assert len(block) == 7


def test_sample_takes_rewarmed_repeats_within_budget() -> None:
    seen: list[int] = []
    clock = FakeClock([1.0] * 1000, noise=0.05, seed=3)
    settings = SamplingSettings(
        min_warmup=3,
        warmup_window=2,
        warmup_tolerance=0.5,
        repeats=4,
        rewarm_calls=2,
        min_samples_per_repeat=3,
        budget_s=0.02,
    )
    out = sample(lambda: seen.append(1), clock, settings)
    assert out.warmup.stable and out.warmup.calls == 4
    assert len(out.blocks_ms) == 4
    # 20 ms over 4 repeats: each block stops once its measured time reaches 5 ms
    assert all(sum(b) >= 5.0 and sum(b) - b[-1] < 5.0 for b in out.blocks_ms)
    assert len(out.samples_ms) == sum(len(b) for b in out.blocks_ms)
    # every call ran the function: timed calls plus two untimed re-warm calls per repeat
    assert len(seen) == clock.calls + 4 * 2
    assert len(out.repeat_medians_ms) == 4


def test_sample_reports_progress() -> None:
    messages: list[str] = []
    settings = SamplingSettings(repeats=2, budget_s=0.001, min_samples_per_repeat=1)
    sample(lambda: None, FakeClock([1.0] * 100), settings, messages.append)
    assert messages == ["warming up", "sampling (repeat 1/2)", "sampling (repeat 2/2)"]


def test_noisy_fake_clock_is_reproducible() -> None:
    a = sample(
        lambda: None, FakeClock([1.0] * 500, noise=0.1, seed=7), SamplingSettings(budget_s=0.05)
    )
    b = sample(
        lambda: None, FakeClock([1.0] * 500, noise=0.1, seed=7), SamplingSettings(budget_s=0.05)
    )
    assert a == b


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repeats", 0),
        ("warmup_window", 0),
        ("budget_s", 0.0),
        ("warmup_tolerance", 1.5),
        ("min_warmup", -1),
    ],
)
def test_bad_settings_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field.split("_")[0]):
        SamplingSettings(**{field: value})  # type: ignore[arg-type]


def test_warm_up_lasts_its_wall_time_floor_even_once_stable() -> None:
    ticks = iter(range(10_000))
    settings = SamplingSettings(min_warmup_wall_ms=500.0, max_warmup=20)
    plain = warm_up(lambda: None, FakeClock([1.0] * 1000), replace(settings, min_warmup_wall_ms=0))
    floored = warm_up(
        lambda: None, FakeClock([1.0] * 1000), settings, now=lambda: next(ticks) * 0.01
    )
    assert plain.stable and plain.calls == 10  # two windows agree at once
    assert floored.stable and floored.calls > settings.max_warmup  # 0.5 s of 10 ms reads


def test_on_cuda_warm_up_has_a_time_floor_and_elsewhere_none() -> None:
    from perfguard.measure.sampling import CUDA_WARMUP_FLOOR_MS, for_device

    assert for_device(SamplingSettings(), "cuda").min_warmup_wall_ms == CUDA_WARMUP_FLOOR_MS
    assert for_device(SamplingSettings(), "cpu") == SamplingSettings()
    longer = SamplingSettings(min_warmup_wall_ms=2000.0)
    assert for_device(longer, "cuda") == longer
