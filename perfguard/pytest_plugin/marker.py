"""`@pytest.mark.perfguard(...)`: per-test settings, validated with errors naming the test."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from perfguard.settings import DEVICE, MARKER_KEYS, THRESHOLD_KEYS
from perfguard.variants.spec import UnknownVariantError, parse_variant

# key -> (accepted types, description), from the one table of settings
KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    key: (s.marker_types, s.marker_what) for key, s in MARKER_KEYS.items()
}
HELP = (
    f"perfguard({', '.join(k + ('=[...]' if k == 'variants' else '=') for k in KEYS)}): "
    "per-test perfguard settings"
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
        if key in THRESHOLD_KEYS:
            from perfguard.records import RecordError
            from perfguard.stats.thresholds import check_rule

            try:
                check_rule(key, value)
            except RecordError as exc:
                raise _fail(test, str(exc).removeprefix("thresholds.")) from None
        positive = ("budget_s", "repeats", "threads", "compile_ratio", "timeout_s")
        if key in positive and number is not None and number <= 0:
            raise _fail(test, f"{key} must be positive, got {value!r}")
        if key == "shapes":
            from perfguard.measure.shapes import check_shapes

            why = check_shapes(value)
            if why:
                raise _fail(test, why)
        if key == "drift_tolerance":
            from perfguard.measure.drift import check_tolerance

            why = check_tolerance(value)
            if why:
                raise _fail(test, why)
        globs = value if key == "depends" and isinstance(value, list | tuple) else ()
        if key == "depends" and not all(isinstance(g, str) and g for g in globs):
            raise _fail(test, f"depends must be a list of globs (strings), got {value!r}")
        if key == "device" and not DEVICE.fullmatch(str(value)):
            raise _fail(test, f"device must be 'auto', 'cpu' or 'cuda[:N]', got {value!r}")
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
