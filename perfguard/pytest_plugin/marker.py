"""`@pytest.mark.perfguard(...)`: per-test settings, validated with errors naming the test."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from perfguard.variants.spec import UnknownVariantError, parse_variant

# key -> (accepted types, description)
KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "variants": ((list, tuple), "a list of variant names"),
    "min_change_pct": ((int, float), "a number of percent"),
    "ab_min_change_pct": ((int, float), "a number of percent (same-job A/B)"),
    "alpha": ((float,), "a significance level between 0 and 1"),
    "gate_p99": ((bool,), "True or False"),
    "gate_ops": ((bool,), "True or False (operator-count and FLOP changes gate)"),
    "instructions_pct": ((int, float), "a number of percent (callgrind instruction counts)"),
    "memory_tolerance_pct": ((int, float), "a number of percent"),
    "compile_ratio": ((int, float), "a ratio above 1"),
    "budget_s": ((int, float), "seconds of sampling"),
    "repeats": ((int,), "a whole number of repeats"),
    "drift_tolerance": ((int, float, dict), "a relative tolerance, or {class: tolerance}"),
    "device": ((str,), "'auto', 'cpu' or 'cuda'"),
    "threads": ((int,), "a whole number of threads"),
}
THRESHOLD_KEYS = (
    "min_change_pct",
    "ab_min_change_pct",
    "alpha",
    "gate_p99",
    "gate_ops",
    "instructions_pct",
    "memory_tolerance_pct",
    "compile_ratio",
)


@dataclass(frozen=True)
class MarkerSettings:
    variants: tuple[str, ...] | None
    options: Mapping[str, Any]

    @property
    def thresholds(self) -> dict[str, Any]:
        return {k: v for k, v in self.options.items() if k in THRESHOLD_KEYS}


def _fail(test: str, message: str) -> pytest.UsageError:
    return pytest.UsageError(f"{test}: @pytest.mark.perfguard: {message}")


def read_marker(test: str, marker: pytest.Mark | None) -> MarkerSettings:
    if marker is None:
        return MarkerSettings(None, {})
    if marker.args:
        raise _fail(test, "takes keyword arguments only, e.g. variants=['eager']")
    for key, value in marker.kwargs.items():
        if key not in KEYS:
            raise _fail(test, f"unknown key {key!r}; known keys: {', '.join(sorted(KEYS))}")
        types, what = KEYS[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise _fail(test, f"{key} must be {what}, got {value!r}")
        number = value if isinstance(value, int | float) else None
        if number is not None and not math.isfinite(number):
            raise _fail(test, f"{key} must be a finite number, got {value!r}")
        if key.endswith("_pct") and number is not None and number < 0:
            raise _fail(test, f"{key} must be 0 or more, got {value!r}")
        positive = ("budget_s", "repeats", "threads", "compile_ratio")
        if key in positive and number is not None and number <= 0:
            raise _fail(test, f"{key} must be positive, got {value!r}")
        if key == "alpha" and number is not None and not 0 < number < 1:
            raise _fail(test, f"alpha must be between 0 and 1, got {value!r}")
    variants = None
    if "variants" in marker.kwargs:
        names = [str(v) for v in marker.kwargs["variants"]]
        if not names:
            raise _fail(test, "variants is empty")
        for name in names:
            try:
                parse_variant(name)
            except UnknownVariantError as exc:
                raise _fail(test, str(exc)) from None
        variants = tuple(dict.fromkeys(names))
    options = {k: v for k, v in marker.kwargs.items() if k != "variants"}
    return MarkerSettings(variants, options)
