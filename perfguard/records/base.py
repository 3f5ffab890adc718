"""What every record shares: the schema version, verdict names, validation."""

from __future__ import annotations

import math
import re
from typing import Literal, get_args

from perfguard.errors import PerfguardError

SCHEMA_VERSION = 15  # the history is in perfguard/store/schema.py
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
"""A full git commit id (SHA-1, or SHA-256 in a repository that uses it)."""

Status = Literal["ok", "error", "skipped"]
STATUSES: tuple[Status, ...] = ("ok", "error", "skipped")

Verdict = Literal[
    "regression",
    "improvement",
    "unchanged",
    "inconclusive",
    "new",
    "missing",
    "error",
    "accepted",
]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
"""`accepted`: a regression the pull request accepts, within its bound (stats.accepts)."""


class RecordError(PerfguardError, ValueError):
    """A results or baseline document does not have the shape of the results format."""


def text(name: str, value: object) -> str:
    """A string field read from a file: never coerced (a number in `test` is a wrong file)."""
    if not isinstance(value, str):
        raise RecordError(f"{name} must be a string, got {value!r}")
    return value


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise RecordError(f"{name} must be true or false, got {value!r}")
    return value


def texts(name: str, value: object) -> tuple[str, ...]:
    """A list of strings read from a file; null is an empty list."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise RecordError(f"{name} must be a list of strings, got {value!r}")
    return tuple(value)


def numbers(name: str, value: object) -> tuple[float | None, ...]:
    """A list of finite numbers or nulls read from a file; null is an empty list."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise RecordError(f"{name} must be a list of numbers, got {value!r}")
    return tuple(finite_or_none(name, v) for v in value)


def bounded(
    name: str,
    value: object,
    kind: type,
    low: float = -math.inf,
    high: float = math.inf,
) -> float | bool:
    """A setting or rule read from a file, as the code will use it: `kind` bool is true or
    false; int a whole number (3.0 is 3); float any finite number; both within [low, high].
    A string, a NaN or an out-of-range value would be printed raw, or switch a gate off."""
    if kind is bool:
        return flag(name, value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{name} must be a {'whole ' * (kind is int)}number, got {value!r}")
    if kind is int and not (math.isfinite(value) and value == int(value)):
        raise RecordError(f"{name} must be a whole number, got {value!r}")
    if not (math.isfinite(value) and low <= value <= high):
        if high == math.inf:
            raise RecordError(f"{name} must be {low:g} or more, got {value!r}")
        raise RecordError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return int(value) if kind is int else float(value)


def finite_or_none(name: str, value: object) -> float | None:
    if value is None:
        return None
    if type(value) is float and value - value == 0.0:  # the common case, quickly: finite
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{name} must be a number or null, got {value!r}")
    if not math.isfinite(value):
        raise RecordError(f"{name} must be finite, got {value!r}")
    return float(value)


Metric = Literal[
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p95_ms",
    "tpot_p99_ms",
    "peak_memory_bytes",
    "compile_time_s",
    "drift_max_rel",
    "graphs",
    "backward_graphs",
    "graph_breaks",
    "recompiles",
    "aten_ops",
    "flops",
    "compile_instructions",
    "forward_instructions",
    "memory_growth_bytes_per_call",
]
METRICS: tuple[Metric, ...] = (
    "latency_p50_ms",  # also the row of an item's state: new, missing, error
    "latency_p95_ms",
    "latency_p99_ms",
    "ttft_p50_ms",  # a generation's time to its first token, and per token after it
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p95_ms",
    "tpot_p99_ms",
    "peak_memory_bytes",
    "compile_time_s",
    "drift_max_rel",
    "graphs",  # the exact signals (perfguard.stats.exact)
    "backward_graphs",
    "graph_breaks",
    "recompiles",
    "aten_ops",
    "flops",
    "compile_instructions",
    "forward_instructions",
    "memory_growth_bytes_per_call",
)
"""What a comparison can be of: a closed set (every version of the format wrote only these)."""
