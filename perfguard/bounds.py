"""The one check of a setting's value, whichever source gave it.

A setting's limits are declared once, on its row of the settings table (`Setting.bounds`,
and `marker_types`/`read` for what is not a number). The command line, the ini file, the
marker, `perfguard.run(...)`'s options and a results file's settings all check their value
with `check`, so the same value gets the same one-line refusal from each: the source
(`--perfguard-budget`, `ini perfguard_budget`, the marker's key, the run option, the file's
key) and then the same words. Plain data and checks: no pytest, no torch.

What a measurement takes that is not a number within bounds is checked here too: a list of
shapes (compile-dynamic) and a drift tolerance, with the tolerance classes it names. This
module is a leaf (it imports only `perfguard.errors`): the settings table, the records, the
measuring code and the plugin all stand on it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfguard.errors import InputError

DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
"""What `--perfguard-device` and the marker's `device` accept (fullmatch)."""

if TYPE_CHECKING:
    from perfguard.settings import Setting


class SettingError(InputError, ValueError):
    """A setting's value out of its bounds or of the wrong kind; the message names its
    source."""


@dataclass(frozen=True)
class Bounds:
    """What numbers a setting takes: `low` to `high` (each excluded where `above` or
    `below`), whole numbers only where `whole` (3.0 is 3; 2.5 is refused, not cut to 2)."""

    low: float = -math.inf
    high: float = math.inf
    whole: bool = False
    above: bool = False  # `low` itself is out: "a ratio above 1"
    below: bool = False  # `high` itself is out: "a significance level below 1"

    def __str__(self) -> str:
        low = f"{'above' if self.above else 'at least'} {self.low:g}"
        high = f"{'below' if self.below else 'at most'} {self.high:g}"
        if self.low > -math.inf and self.high < math.inf:
            inclusive = not (self.above or self.below)
            words = f"between {self.low:g} and {self.high:g}" if inclusive else f"{low} and {high}"
        else:
            words = low if self.low > -math.inf else high if self.high < math.inf else "finite"
        return f"a whole number {words}" if self.whole else words

    def holds(self, number: float) -> bool:
        low_ok = number > self.low if self.above else number >= self.low
        high_ok = number < self.high if self.below else number <= self.high
        return math.isfinite(number) and low_ok and high_ok

    def number(self, value: object, shown: str | None = None) -> int | float:
        """`value` as the number the code will use, or ValueError with what is wrong (the
        value shown as `shown`, where it was written out, else as Python writes it)."""
        got = shown if shown is not None else repr(value)
        kind = "a whole number" if self.whole else "a number"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be {kind}, got {got}")
        if self.whole and not (math.isfinite(value) and value == int(value)):
            raise ValueError(f"must be {kind}, got {got}")
        if not self.holds(value):
            raise ValueError(f"must be {self}, got {got}")
        return int(value) if self.whole else float(value)

    def parse(self, text: object) -> int | float:
        """A number written out (the command line, an ini file), then checked."""
        written = str(text).strip()
        try:
            value = float(written)
        except ValueError:
            kind = "a whole number" if self.whole else "a number"
            raise ValueError(f"must be {kind}, got {text!r}") from None
        whole = self.whole and math.isfinite(value) and value == int(value)
        return self.number(int(value) if whole else value, written)


def check(
    setting: Setting,
    value: Any,
    source: str,
    *,
    text: bool = False,
    error: Callable[[str], Exception] = SettingError,
) -> Any:
    """`value` of `setting` as the code will use it, or `error` (SettingError; a source
    raises its own: pytest's usage error, RecordError for a file) saying "`source`: must be
    ..., got ...". `text`: the value is written out (an option or an ini key) and numbers
    are parsed from it first."""
    try:
        return _checked(setting, value, text)
    except ValueError as exc:
        raise error(f"{source}: {exc}") from None


def _checked(s: Setting, value: Any, text: bool) -> Any:
    if s.bounds is not None:
        return s.bounds.parse(value) if text else s.bounds.number(value)
    wrong_type = (isinstance(value, bool) and bool not in s.marker_types) or not isinstance(
        value, s.marker_types
    )
    if not text and s.marker_types and wrong_type:
        raise ValueError(f"must be {s.marker_what}, got {value!r}")
    if s.read == "choice" and value not in s.choices:
        raise ValueError(f"must be one of {', '.join(s.choices)}, got {value!r}")
    special = _SPECIAL.get(s.read)
    why = special(value) if special is not None else None
    if why:  # its words without the key's name: the source names it
        key = s.marker or s.name
        raise ValueError(why.removeprefix(f"{key}: ").removeprefix(f"{key} "))
    return value


def _device(value: Any) -> str | None:
    if DEVICE.fullmatch(str(value)):
        return None
    return f"must be 'auto', 'cpu' or 'cuda[:N]', got {value!r}"


def _globs(value: Any) -> str | None:
    if isinstance(value, str):
        return None  # an option or an ini line: comma-separated globs
    if isinstance(value, list | tuple) and all(isinstance(g, str) and g for g in value):
        return None
    return f"must be a list of globs (strings), got {value!r}"


# class -> (multiplier of eager's own error, extra error allowed relative to the output's RMS)
TOLERANCES: dict[str, tuple[float, float]] = {
    "exact": (1.0, 0.0),
    "compiled-fp32": (2.0, 1e-4),
    "reduced-precision": (2.0, 3e-2),
    "int8": (2.0, 1e-1),
    "low-precision": (2.0, 2e-1),  # int4 weights, float8
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


_SPECIAL: dict[str, Callable[[Any], str | None]] = {
    "device": _device,
    "shapes": check_shapes,
    "drift": check_tolerance,
    "globs": _globs,
}
