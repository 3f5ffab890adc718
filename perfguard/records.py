"""Plain data that flows through the pipeline: results, runs, comparisons.

Everything here is immutable, validated on construction, and free of torch and
pytest, so that the report, compare and merge commands run anywhere.
The JSON layout is the public results format (docs/reference.md, "Results JSON");
`to_json`/`from_json` are its only writers and readers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

SCHEMA_VERSION = 3  # the history is in perfguard/store/schema.py
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
"""A full git commit id (SHA-1, or SHA-256 in a repository that uses it)."""

Status = Literal["ok", "error", "skipped"]
STATUSES: tuple[Status, ...] = ("ok", "error", "skipped")

Verdict = Literal[
    "regression", "improvement", "unchanged", "inconclusive", "new", "missing", "error"
]
VERDICTS: tuple[Verdict, ...] = (
    "regression",
    "improvement",
    "unchanged",
    "inconclusive",
    "new",
    "missing",
    "error",
)


class RecordError(ValueError):
    """A results or baseline document does not have the shape of the results format."""


def _finite_or_none(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{name} must be a number or null, got {value!r}")
    if not math.isfinite(value):
        raise RecordError(f"{name} must be finite, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Metrics:
    """The headline figures of one variant of one test; `None` where a metric does not apply."""

    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_mean_ms: float | None = None
    peak_memory_bytes: float | None = None
    compile_time_s: float | None = None
    drift_max_abs: float | None = None
    drift_max_rel: float | None = None
    drift_cosine: float | None = None
    # Beyond the headline metrics: more detail that the report and the verdicts use.
    latency_iqr_ms: float | None = None
    latency_samples: int | None = None
    latency_p95_tail: int | None = None
    latency_p99_tail: int | None = None
    peak_memory_reserved_bytes: float | None = None
    peak_memory_increase_bytes: float | None = None  # peak minus what was held before the calls
    compile_time_warm_s: float | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    model_size_bytes: float | None = None
    sparsity: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            checked = _finite_or_none(f.name, value)
            if f.type == "int | None" and checked is not None:
                object.__setattr__(self, f.name, int(checked))
            else:
                object.__setattr__(self, f.name, checked)
        p50, p95, p99 = self.latency_p50_ms, self.latency_p95_ms, self.latency_p99_ms
        if p50 is not None and p95 is not None and p99 is not None and not p50 <= p95 <= p99:
            raise RecordError(f"percentiles out of order: p50={p50} p95={p95} p99={p99}")

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Metrics:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class DriftCheck:
    """Pass or fail of a variant's numerics against the fp64 reference, by tolerance class."""

    tolerance_class: str
    passed: bool
    error: float  # RMS error of the variant against the high-precision reference
    eager_error: float  # RMS error of fp32 eager against the same reference
    allowed: float  # the largest error this class allows here
    reference: str  # "fp64" or "fp32" when the model could not run in fp64

    def to_json(self) -> dict[str, Any]:
        return {
            "tolerance_class": self.tolerance_class,
            "passed": self.passed,
            "error": self.error,
            "eager_error": self.eager_error,
            "allowed": self.allowed,
            "reference": self.reference,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DriftCheck:
        try:
            return cls(
                tolerance_class=str(data["tolerance_class"]),
                passed=bool(data["passed"]),
                error=float(data["error"]),
                eager_error=float(data["eager_error"]),
                allowed=float(data["allowed"]),
                reference=str(data["reference"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"bad drift check {dict(data)!r}: {exc}") from exc


def trace_file_name(test: str, variant: str, side: str) -> str:
    """The Chrome trace of a test, variant and side ("head" or "base"): a name of its own."""
    stem = re.sub(r"[^A-Za-z0-9_.\[\]-]+", "-", f"{test}[{variant}]").strip("-")
    return f"{stem}.{side}.trace.json"


@dataclass(frozen=True)
class Counters:
    """Exact figures of one variant: they do not vary between runs, so a change is certain.

    Counted in calls of their own, after the timed samples. `None`: not counted here (not a
    compiled variant, not on CUDA, or the counter was not available).
    """

    graphs: int | None = None  # graphs dynamo compiled
    graph_breaks: int | None = None
    break_reasons: tuple[tuple[str, int], ...] = ()  # (dynamo's reason, how often)
    recompiles: int | None = None  # frames compiled again while sampling
    ops: tuple[tuple[str, int], ...] = ()  # ATen operators one call dispatches, by name
    flops: int | None = None  # of one call, torch.utils.flop_counter
    param_bytes: int | None = None
    buffer_bytes: int | None = None
    kernel_launches: int | None = None  # CUDA kernels one call launches
    cudagraph_launches: int | None = None  # CUDA graphs one call replays
    # instructions under callgrind (--perfguard-instructions), each in a process of its own
    compile_instructions: int | None = None  # the cold compile of a compiled variant
    forward_instructions: int | None = None  # one warm call

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("break_reasons", "ops"):
                pairs = tuple((str(k), int(n)) for k, n in value)
                if any(n < 0 for _, n in pairs):
                    raise RecordError(f"counters.{f.name} must count from 0")
                object.__setattr__(self, f.name, tuple(sorted(pairs)))
            elif value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise RecordError(f"counters.{f.name} must be a count, got {value!r}")
                object.__setattr__(self, f.name, int(value))

    @property
    def op_total(self) -> int | None:
        return sum(n for _, n in self.ops) if self.ops else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["break_reasons"] = dict(self.break_reasons)
        out["ops"] = dict(self.ops)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Counters:
        if not isinstance(data, Mapping):
            raise RecordError(f"counters must be an object, got {data!r}")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("break_reasons", "ops"):
            found = values.get(name) or {}
            if not isinstance(found, Mapping):
                raise RecordError(f"counters.{name} must be an object of counts")
            values[name] = tuple(found.items())
        return cls(**values)


@dataclass(frozen=True)
class VariantResult:
    """What measuring one model under one variant produced. Keeps the raw samples."""

    test: str
    variant: str
    status: Status
    error: str | None = None
    metrics: Metrics = field(default_factory=Metrics)
    samples_ms: tuple[float, ...] = ()
    repeats_ms: tuple[float, ...] = ()  # per-repeat medians: the independent units
    block_sizes: tuple[int, ...] = ()  # how `samples_ms` splits into its repeats
    drift_check: DriftCheck | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    counters: Counters | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise RecordError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.status != "ok" and not self.error:
            raise RecordError(f"a result with status {self.status!r} needs an error message")
        for name in ("samples_ms", "repeats_ms"):
            values = tuple(float(v) for v in getattr(self, name))
            if any(not math.isfinite(v) or v < 0 for v in values):
                raise RecordError(f"{name} must hold finite, non-negative times")
            object.__setattr__(self, name, values)
        sizes = tuple(int(n) for n in self.block_sizes)
        if sizes and (sum(sizes) != len(self.samples_ms) or min(sizes) < 1):
            raise RecordError("block_sizes must be positive and add up to the number of samples")
        object.__setattr__(self, "block_sizes", sizes)
        object.__setattr__(self, "details", dict(self.details))

    def blocks(self) -> tuple[tuple[float, ...], ...]:
        """The samples split into their repeats (one block when sizes were not kept)."""
        if not self.block_sizes:
            return (self.samples_ms,) if self.samples_ms else ()
        out: list[tuple[float, ...]] = []
        start = 0
        for size in self.block_sizes:
            out.append(self.samples_ms[start : start + size])
            start += size
        return tuple(out)

    @property
    def key(self) -> tuple[str, str]:
        return (self.test, self.variant)

    def with_test(self, test: str) -> VariantResult:
        return replace(self, test=test)

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "status": self.status,
            "error": self.error,
            "metrics": self.metrics.to_json(),
            "samples_ms": list(self.samples_ms),
            "repeats_ms": list(self.repeats_ms),
            "block_sizes": list(self.block_sizes),
            "drift_check": None if self.drift_check is None else self.drift_check.to_json(),
            "details": dict(self.details),
            "counters": None if self.counters is None else self.counters.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantResult:
        try:
            drift = data.get("drift_check")
            counters = data.get("counters")
            return cls(
                test=str(data["test"]),
                variant=str(data["variant"]),
                status=data["status"],
                error=data.get("error"),
                metrics=Metrics.from_json(data.get("metrics") or {}),
                samples_ms=tuple(data.get("samples_ms") or ()),
                repeats_ms=tuple(data.get("repeats_ms") or ()),
                block_sizes=tuple(data.get("block_sizes") or ()),
                drift_check=None if drift is None else DriftCheck.from_json(drift),
                details=data.get("details") or {},
                counters=None if counters is None else Counters.from_json(counters),
            )
        except KeyError as exc:
            raise RecordError(f"a result lacks the key {exc.args[0]!r}") from exc


@dataclass(frozen=True)
class BaselineRef:
    """Which baseline a run was compared with, and why that one."""

    commit: str | None
    reason: str
    environment: Mapping[str, Any] | None = None  # the baseline's, to show both sides
    mode: str = "stored"  # "stored": a baseline file; "ab": measured in this job (same-job A/B)

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "reason": self.reason,
            "environment": None if self.environment is None else dict(self.environment),
            "mode": self.mode,
        }


@dataclass(frozen=True)
class Comparison:
    """One metric of one test and variant, baseline against current, with its verdict."""

    test: str
    variant: str
    metric: str
    baseline: float | None
    current: float | None
    change_pct: float | None
    p_value: float | None
    cohens_d: float | None
    verdict: Verdict
    min_detectable_pct: float | None = None
    gating: bool = True
    note: str = ""
    trend: tuple[tuple[str, float], ...] = ()  # (commit, value) of recent baselines, oldest first
    baseline_ci: tuple[float, float] | None = None  # 95% bootstrap interval over repeats
    current_ci: tuple[float, float] | None = None
    # the change seen again by each confirmation re-measure (fresh process, same baseline)
    confirm_change_pct: tuple[float | None, ...] = ()
    # a latency regression's operators by change in self time: (operator, base µs, head µs)
    # per call; None on the side where the operator did not appear
    why: tuple[tuple[str, float | None, float | None], ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise RecordError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        for name in ("baseline", "current", "change_pct", "p_value", "cohens_d"):
            object.__setattr__(self, name, _finite_or_none(name, getattr(self, name)))
        points = []
        for commit, value in self.trend:
            checked = _finite_or_none("trend", value)
            if checked is not None:
                points.append((str(commit), checked))
        object.__setattr__(self, "trend", tuple(points))
        object.__setattr__(
            self,
            "confirm_change_pct",
            tuple(_finite_or_none("confirm_change_pct", v) for v in self.confirm_change_pct),
        )
        for name in ("baseline_ci", "current_ci"):
            ci = getattr(self, name)
            if ci is not None:
                low, high = (_finite_or_none(name, v) for v in ci)
                if low is None or high is None or low > high:
                    raise RecordError(f"{name} must be [low, high], got {ci!r}")
                object.__setattr__(self, name, (low, high))

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "metric": self.metric,
            "baseline": self.baseline,
            "current": self.current,
            "change_pct": self.change_pct,
            "p_value": self.p_value,
            "cohens_d": self.cohens_d,
            "verdict": self.verdict,
            "min_detectable_pct": self.min_detectable_pct,
            "gating": self.gating,
            "note": self.note,
            **({"trend": [list(point) for point in self.trend]} if self.trend else {}),
            **(
                {"confirm_change_pct": list(self.confirm_change_pct)}
                if self.confirm_change_pct
                else {}
            ),
            **({"why": [list(row) for row in self.why]} if self.why else {}),
            **{
                name: list(getattr(self, name))
                for name in ("baseline_ci", "current_ci")
                if getattr(self, name) is not None
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        try:
            return cls(
                test=str(data["test"]),
                variant=str(data["variant"]),
                metric=str(data["metric"]),
                baseline=data.get("baseline"),
                current=data.get("current"),
                change_pct=data.get("change_pct"),
                p_value=data.get("p_value"),
                cohens_d=data.get("cohens_d"),
                verdict=data["verdict"],
                min_detectable_pct=data.get("min_detectable_pct"),
                gating=bool(data.get("gating", True)),
                note=str(data.get("note") or ""),
                trend=tuple((str(c), float(v)) for c, v in data.get("trend") or ()),
                baseline_ci=_pair(data.get("baseline_ci")),
                current_ci=_pair(data.get("current_ci")),
                confirm_change_pct=tuple(data.get("confirm_change_pct") or ()),
                why=tuple(_why_row(row) for row in data.get("why") or ()),
            )
        except KeyError as exc:
            raise RecordError(f"a comparison lacks the key {exc.args[0]!r}") from exc


def _why_row(row: Any) -> tuple[str, float | None, float | None]:
    if not isinstance(row, list | tuple) or len(row) != 3:
        raise RecordError(f"a comparison's why rows are [operator, base, head], got {row!r}")
    op, base, head = row
    return (
        str(op),
        _finite_or_none("why", base if base is None else float(base)),
        _finite_or_none("why", head if head is None else float(head)),
    )


def _check_commit(name: str, value: object) -> None:
    if value is not None and not (isinstance(value, str) and SHA.match(value)):
        raise RecordError(f"{name} must be a full commit sha or null, got {value!r}")


def _pair(value: Any) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise RecordError(f"an interval must be [low, high], got {value!r}")
    return (value[0], value[1])


@dataclass(frozen=True)
class Run:
    """One session's results: the body of a results file and of a baseline file."""

    commit: str | None
    machine: str
    environment: Mapping[str, Any]
    results: tuple[VariantResult, ...]
    baseline: BaselineRef = field(default_factory=lambda: BaselineRef(None, "not compared"))
    comparisons: tuple[Comparison, ...] = ()
    created: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    health: Mapping[str, Any] = field(default_factory=dict)  # {"warnings": [...], "facts": {...}}
    baseline_results: tuple[VariantResult, ...] = ()  # same-job A/B: the base side's results
    # confirmation re-measures of flagged items, one tuple per round ...
    confirm_results: tuple[tuple[VariantResult, ...], ...] = ()
    # ... and, for a round measured beside the base commit (A/B), that commit's side
    confirm_base_results: tuple[tuple[VariantResult, ...], ...] = ()

    def __post_init__(self) -> None:
        _check_commit("commit", self.commit)
        _check_commit("baseline commit", self.baseline.commit)
        if not isinstance(self.machine, str):
            raise RecordError(f"machine must be a string, got {self.machine!r}")
        if self.created is not None and not isinstance(self.created, str):
            raise RecordError(f"created must be a date string or null, got {self.created!r}")
        for name in ("environment", "settings", "health"):
            if not isinstance(getattr(self, name), Mapping):
                raise RecordError(f"{name} must be an object, got {getattr(self, name)!r}")
        object.__setattr__(self, "health", dict(self.health))
        object.__setattr__(self, "results", tuple(self.results))
        object.__setattr__(self, "baseline_results", tuple(self.baseline_results))
        object.__setattr__(self, "confirm_results", tuple(map(tuple, self.confirm_results)))
        object.__setattr__(
            self, "confirm_base_results", tuple(map(tuple, self.confirm_base_results))
        )
        object.__setattr__(self, "comparisons", tuple(self.comparisons))
        object.__setattr__(self, "environment", dict(self.environment))
        object.__setattr__(self, "settings", dict(self.settings))
        seen: set[tuple[str, str]] = set()
        for result in self.results:
            if result.key in seen:
                raise RecordError(f"duplicate result for {result.test} [{result.variant}]")
            seen.add(result.key)

    def result(self, test: str, variant: str) -> VariantResult | None:
        for r in self.results:
            if r.key == (test, variant):
                return r
        return None

    @property
    def health_warnings(self) -> tuple[str, ...]:
        return tuple(str(w) for w in self.health.get("warnings") or ())

    @property
    def has_regression(self) -> bool:
        return any(c.verdict == "regression" and c.gating for c in self.comparisons)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "commit": self.commit,
            "machine": self.machine,
            "created": self.created,
            "environment": dict(self.environment),
            "settings": dict(self.settings),
            "health": dict(self.health),
            "baseline": self.baseline.to_json(),
            "results": [r.to_json() for r in self.results],
            "comparisons": [c.to_json() for c in self.comparisons],
            **(
                {"baseline_results": [r.to_json() for r in self.baseline_results]}
                if self.baseline_results
                else {}
            ),
            **(
                {"confirm_results": [[r.to_json() for r in rs] for rs in self.confirm_results]}
                if self.confirm_results
                else {}
            ),
            **(
                {
                    "confirm_base_results": [
                        [r.to_json() for r in rs] for rs in self.confirm_base_results
                    ]
                }
                if any(self.confirm_base_results)
                else {}
            ),
        }

    @classmethod
    def from_json(cls, data: Any) -> Run:
        """Read a current-version document. Older versions go through `store.schema` first."""
        if not isinstance(data, Mapping):
            raise RecordError("the document is not a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise RecordError(f"schema_version {version!r} is not {SCHEMA_VERSION}")
        try:
            baseline = data.get("baseline") or {}
            results: Sequence[Any] = data["results"]
            return cls(
                commit=data.get("commit"),
                machine=data["machine"],
                environment=data.get("environment") or {},
                results=tuple(VariantResult.from_json(r) for r in results),
                baseline=BaselineRef(
                    baseline.get("commit"),
                    str(baseline.get("reason", "")),
                    baseline.get("environment"),
                    str(baseline.get("mode") or "stored"),
                ),
                comparisons=tuple(Comparison.from_json(c) for c in data.get("comparisons") or ()),
                created=data.get("created"),
                settings=data.get("settings") or {},
                health=data.get("health") or {},
                baseline_results=tuple(
                    VariantResult.from_json(r) for r in data.get("baseline_results") or ()
                ),
                confirm_results=tuple(
                    tuple(VariantResult.from_json(r) for r in rs)
                    for rs in data.get("confirm_results") or ()
                ),
                confirm_base_results=tuple(
                    tuple(VariantResult.from_json(r) for r in rs)
                    for rs in data.get("confirm_base_results") or ()
                ),
            )
        except KeyError as exc:
            raise RecordError(f"the document lacks the key {exc.args[0]!r}") from exc
        except (TypeError, AttributeError, ValueError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"the document has the wrong shape: {exc}") from exc
