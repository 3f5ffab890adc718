"""What a measurement takes that is not a number within bounds: a drift tolerance, a list of
shapes. Checked by `perfguard.bounds` for every source that gives them (the marker,
`perfguard.run`'s options); no torch here, so that checking needs none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# class -> (multiplier of eager's own error, extra error allowed relative to the output's RMS)
TOLERANCES: dict[str, tuple[float, float]] = {
    "exact": (1.0, 0.0),
    "compiled-fp32": (2.0, 1e-4),
    "reduced-precision": (2.0, 3e-2),
    "int8": (2.0, 1e-1),
    "pruned": (2.0, 1.0),
}


MAX_SHAPES = 8  # dynamo's default recompile limit: past it a frame falls back to eager


def check_shapes(value: object) -> str | None:
    """Why `value` is no list of shapes (one line), or None."""
    if not isinstance(value, list | tuple) or not value:
        return f"shapes must be a non-empty list of shapes, e.g. [[1, 16], [8, 16]], got {value!r}"
    for shape in value:
        if (
            not isinstance(shape, list | tuple)
            or not shape
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)
        ):
            return f"shapes: each shape is a list of positive whole numbers, got {shape!r}"
    if len(value) > MAX_SHAPES:
        return (
            f"shapes: at most {MAX_SHAPES} (dynamo's recompile limit: past it a frame runs "
            f"eagerly), got {len(value)}"
        )
    return None


DriftTolerance = float | Mapping[str, float] | None
"""A user override: one relative tolerance for every class, or one per class name."""


def check_tolerance(value: object) -> str | None:
    """Why `value` is no drift tolerance (one line), or None: a number from 0 to 1, relative
    to the output's size, or {class: number} with the classes of `TOLERANCES`."""
    allowed = ", ".join(TOLERANCES)
    if value is None:
        return None
    if isinstance(value, Mapping):
        for name, tol in value.items():
            if name not in TOLERANCES:
                return f"drift_tolerance: {name!r} is not a tolerance class ({allowed})"
            why = check_tolerance(tol)
            if why:
                return f"{why} (for {name})"
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"drift_tolerance must be a number or {{class: number}}, got {value!r}"
    if not (math.isfinite(value) and 0 <= value <= 1):
        return f"drift_tolerance must be from 0 to 1 (relative to the output's size), got {value!r}"
    return None
