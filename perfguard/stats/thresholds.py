"""The rules in force: thresholds, the history's noise floor, and small helpers of the verdicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from perfguard.bounds import Bounds, check
from perfguard.records import Metric, RecordError, VariantResult
from perfguard.settings import MARKER_KEYS, THRESHOLD_KEYS, Setting, threshold_default

LATENCY_METRICS: dict[Metric, float] = {
    "latency_p50_ms": 50.0,
    "latency_p95_ms": 95.0,
    "latency_p99_ms": 99.0,
}

PHASE_METRICS: dict[Metric, tuple[str, float]] = {
    "ttft_p50_ms": ("ttft", 50.0),
    "ttft_p95_ms": ("ttft", 95.0),
    "ttft_p99_ms": ("ttft", 99.0),
    "tpot_p50_ms": ("tpot", 50.0),
    "tpot_p95_ms": ("tpot", 95.0),
    "tpot_p99_ms": ("tpot", 99.0),
}
"""A generation's time to its first token and per token after it: tested per repeat like
latency (the phase's percentile in each block), where both sides measured a generation."""

TIMED_METRICS: frozenset[Metric] = frozenset((*LATENCY_METRICS, *PHASE_METRICS))
"""The metrics whose comparisons are tested on repeats, confirmed and corrected together."""


def repeat_figures(result: VariantResult, metric: Metric) -> list[float]:
    """A timed metric's figure in each repeat of `result` (empty where it has none): the
    percentile of each block, or of each block's generation phase."""
    if metric in LATENCY_METRICS:
        return result.block_quantiles(LATENCY_METRICS[metric])
    phase, q = PHASE_METRICS[metric]
    return result.phase_quantiles(phase, q)


@dataclass(frozen=True)
class Thresholds:
    """The rules in force; all of them appear in the report's methodology note."""

    # the defaults a user can change are those of the settings table (perfguard.settings)
    alpha: float = threshold_default("alpha")
    min_change_pct: float = threshold_default("min_change_pct")
    # same-job A/B cancels between-run noise: a lower bar
    ab_min_change_pct: float = threshold_default("ab_min_change_pct")
    min_repeats: int = 3
    gate_p99: bool = threshold_default("gate_p99")
    gate_ops: bool = threshold_default("gate_ops")  # operator-count and FLOP changes gate
    # an operator's or kernel's time: the smallest change called, and whether it gates
    op_min_change_pct: float = threshold_default("op_min_change_pct")
    gate_kernels: bool = threshold_default("gate_kernels")
    # callgrind counts: a change past this is a verdict
    instructions_pct: float = threshold_default("instructions_pct")
    memory_tolerance_pct: float = threshold_default("memory_tolerance_pct")
    compile_ratio: float = threshold_default("compile_ratio")
    drift_growth: float = 2.0  # drift may grow by this factor over the baseline's ...
    drift_floor_rel: float = 1e-4  # ... or stay below this relative size, without a verdict
    per_test: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in RULES:
            check_rule(name, getattr(self, name))
        if not isinstance(self.per_test, Mapping):
            raise RecordError(f"thresholds.per_test must be an object, got {self.per_test!r}")
        for test, overrides in self.per_test.items():
            if not isinstance(overrides, Mapping):
                raise RecordError(f"thresholds.per_test[{test!r}] must be an object")
            for name, value in overrides.items():
                check_rule(name, value, f"thresholds.per_test[{test!r}].{name}")

    def for_test(self, test: str) -> Thresholds:
        """These thresholds with one test's overrides (from its marker) applied."""
        overrides = self.per_test.get(test)
        if not overrides:
            return self
        known = {*THRESHOLD_KEYS, "min_repeats"}
        changes: dict[str, Any] = {k: v for k, v in overrides.items() if k in known}
        return replace(self, **changes)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Thresholds:
        """The thresholds a run recorded in its settings (unknown keys are ignored)."""
        if data is not None and not isinstance(data, Mapping):
            raise RecordError(f"thresholds must be an object, got {data!r}")
        known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def to_json(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "min_change_pct": self.min_change_pct,
            "ab_min_change_pct": self.ab_min_change_pct,
            "min_repeats": self.min_repeats,
            "gate_p99": self.gate_p99,
            "gate_ops": self.gate_ops,
            "op_min_change_pct": self.op_min_change_pct,
            "gate_kernels": self.gate_kernels,
            "instructions_pct": self.instructions_pct,
            "memory_tolerance_pct": self.memory_tolerance_pct,
            "compile_ratio": self.compile_ratio,
            "drift_growth": self.drift_growth,
            "drift_floor_rel": self.drift_floor_rel,
            "per_test": {k: dict(v) for k, v in self.per_test.items()},
        }


RULES: Mapping[str, Setting] = {
    **{key: MARKER_KEYS[key] for key in THRESHOLD_KEYS},
    # the rules a user does not set, declared as the table's rows are
    "min_repeats": Setting(name="min_repeats", help="", bounds=Bounds(1, 1000, whole=True)),
    "drift_growth": Setting(name="drift_growth", help="", bounds=Bounds(0, 1000)),
    "drift_floor_rel": Setting(name="drift_floor_rel", help="", bounds=Bounds(0, 1)),
}
"""Each rule's row: its bounds, as the settings table declares them (perfguard.bounds)."""


def check_rule(name: str, value: object, source: str = "") -> None:
    """A rule's value within its bounds, or RecordError saying which: a threshold read from a
    file (a shard, a results file) is what the gate will use."""
    if name in RULES:
        check(RULES[name], value, source or f"thresholds.{name}", error=RecordError)


NoiseFloor = Mapping[tuple[str, str, str], float]
"""(test, variant, metric) -> typical % change between successive baselines on main."""


def change_pct(base: float | None, cur: float | None) -> float | None:
    if base is None or cur is None or base == 0:
        return None
    return 100.0 * (cur - base) / base


def practical_bar(test: str, variant: str, metric: str, th: Thresholds, noise: NoiseFloor) -> float:
    """The smallest |% change| a stored-baseline latency verdict may act on."""
    return max(th.min_change_pct, noise.get((test, variant, metric), 0.0))
