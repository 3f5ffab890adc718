"""What measuring produced: one variant of one test, with its raw samples."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from typing import Any

from perfguard.records.base import STATUSES, RecordError, Status, finite_or_none, flag, text
from perfguard.records.counters import Counters
from perfguard.records.op_times import OpTimes
from perfguard.records.ranks import RankFigures
from perfguard.records.sketch import BlockStats, QuantileSketch, percentile

_SIGNED = {"drift_cosine", "peak_memory_increase_bytes"}  # the metrics that may be below 0
WORKLOADS = ("forward", "train", "generate", "distributed")
"""What one sample times: a forward call (`perfguard.run`), a training step
(`perfguard.train_step`: zero_grad, forward, loss, backward, optimizer step), or a greedy
generation (`perfguard.generate`)."""


@dataclass(frozen=True, kw_only=True)
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
    # CUDA: the device time of one call's kernels, from the profiled calls (the second clock;
    # shown beside the latency, never gated): launch overhead is in the latency, not in this
    device_time_ms: float | None = None
    # items per second at p50: the batch (the first input's leading dimension, or `batch=`)
    # over one call's (or one training step's) median time
    throughput_per_s: float | None = None
    # a generation (`perfguard.generate`): time to the first new token and per new token after
    # it (percentiles over the samples, each sample one whole generation), new tokens per second
    # at the whole generation's p50, and the share of new tokens identical to eager's
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    tpot_p99_ms: float | None = None
    tokens_per_s: float | None = None
    token_agreement: float | None = None
    peak_memory_reserved_bytes: float | None = None
    peak_memory_increase_bytes: float | None = None  # peak minus what was held before the calls
    compile_time_warm_s: float | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    model_size_bytes: float | None = None
    sparsity: float | None = None

    def __post_init__(self) -> None:
        names, whole, unsigned = _metric_fields()
        for name in names:
            checked = finite_or_none(name, getattr(self, name))
            if checked is not None and name in whole:
                checked = int(checked)
            object.__setattr__(self, name, checked)
        for name in unsigned:
            value = getattr(self, name)
            if value is not None and value < 0:
                raise RecordError(f"{name} must be 0 or more, got {value!r}")
        p50, p95, p99 = self.latency_p50_ms, self.latency_p95_ms, self.latency_p99_ms
        if p50 is not None and p95 is not None and p99 is not None and not p50 <= p95 <= p99:
            raise RecordError(f"percentiles out of order: p50={p50} p95={p95} p99={p99}")

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Metrics:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@cache
def _metric_fields() -> tuple[tuple[str, ...], frozenset[str], tuple[str, ...]]:
    """Metrics' field names, those that hold whole numbers, and those that are never below 0
    (read once: a suite's record checks them for every result)."""
    found = fields(Metrics)
    names = tuple(f.name for f in found)
    whole = frozenset(f.name for f in found if f.type == "int | None")
    return names, whole, tuple(n for n in names if n not in _SIGNED)


@dataclass(frozen=True, kw_only=True)
class DriftCheck:
    """Pass or fail of a variant's numerics against the fp64 reference, by tolerance class."""

    tolerance_class: str
    passed: bool
    error: float  # RMS error of the variant against the high-precision reference
    eager_error: float  # RMS error of fp32 eager against the same reference
    allowed: float  # the largest error this class allows here
    reference: str  # "fp64" or "fp32" when the model could not run in fp64
    # not judged: two eager calls on the same inputs differ by this much of the output's RMS
    # (a model random in eval mode); None: the model is deterministic enough to judge
    nondeterministic: float | None = None

    @property
    def judged(self) -> bool:
        return self.nondeterministic is None

    def to_json(self) -> dict[str, Any]:
        return {
            "tolerance_class": self.tolerance_class,
            "passed": self.passed,
            "error": self.error,
            "eager_error": self.eager_error,
            "allowed": self.allowed,
            "reference": self.reference,
            **({} if self.judged else {"nondeterministic": self.nondeterministic}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DriftCheck:
        try:
            return cls(
                tolerance_class=text("drift_check.tolerance_class", data["tolerance_class"]),
                passed=flag("drift_check.passed", data["passed"]),
                error=_finite("drift_check.error", data["error"]),
                eager_error=_finite("drift_check.eager_error", data["eager_error"]),
                allowed=_finite("drift_check.allowed", data["allowed"]),
                reference=text("drift_check.reference", data["reference"]),
                nondeterministic=finite_or_none(
                    "drift_check.nondeterministic", data.get("nondeterministic")
                ),
            )
        except RecordError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"bad drift check {dict(data)!r}: {exc}") from exc


def _finite(name: str, value: object) -> float:
    number = finite_or_none(name, value)
    if number is None:
        raise RecordError(f"{name} must be a number, got null")
    return number


def trace_file_name(test: str, variant: str, side: str) -> str:
    """The Chrome trace of a test, variant and side ("head" or "base"): a name of its own."""
    stem = re.sub(r"[^A-Za-z0-9_.\[\]-]+", "-", f"{test}[{variant}]").strip("-")
    return f"{stem}.{side}.trace.json"


@dataclass(frozen=True, kw_only=True)
class Details:
    """How a result was measured, beyond its figures. In the JSON a flat object: these keys,
    and those of `build` beside them."""

    device: str | None = None  # where it ran, e.g. "cpu", "cuda:0"
    clock: str | None = None  # how calls were timed, e.g. "perf_counter_ns", "cuda_event"
    memory_method: str | None = None  # how the peak was read; "cuda..." gates
    warmup_calls: int | None = None
    warmup_stable: bool | None = None  # timings settled within the warm-up
    repeats: int | None = None
    tails_too_few: tuple[str, ...] = ()  # "p95", "p99": too few samples for that tail
    notes: tuple[str, ...] = ()  # said to the reader, one sentence each
    # operators' self time of one profiled call: {"calls": n, "self_us": {op: us}}
    profile: Mapping[str, Any] | None = None
    # same-job A/B: {"pairs": n, "order": "AB BA ...", "sequential": {...}}
    ab: Mapping[str, Any] | None = None
    # the operators' (CPU) or kernels' (CUDA) times, block by block (`OpTimes`)
    op_times: OpTimes | None = None
    cudagraph_skips: int | None = None  # CUDA graphs inductor declined (reduce-overhead)
    source: str | None = None  # who measured, when not perfguard ("pytest-benchmark")
    # what building the variant recorded (ONNX export and session times, provider, ...),
    # and keys of other versions: kept as they are
    build: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tails_too_few", tuple(str(t) for t in self.tails_too_few))
        object.__setattr__(self, "notes", tuple(str(n) for n in self.notes))
        object.__setattr__(self, "build", dict(self.build))
        for name in ("profile", "ab"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise RecordError(f"details.{name} must be an object, got {value!r}")

    def with_note(self, text: str) -> Details:
        return replace(self, notes=(*self.notes, text))

    @property
    def ranks(self) -> RankFigures | None:
        """A distributed step's figures per rank (None: any other workload's)."""
        return RankFigures.from_build(self.build)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.build)
        for f in fields(self):
            if f.name == "build":
                continue
            value = getattr(self, f.name)
            if f.name in ("tails_too_few", "notes"):
                out[f.name] = list(value)
            elif f.name == "op_times":
                if value is not None:
                    out[f.name] = value.to_json()
            else:
                out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_json(cls, data: Any) -> Details:
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise RecordError(f"details must be an object, got {data!r}")
        known = {f.name for f in fields(cls)} - {"build", "op_times"}
        ops = data.get("op_times")
        return cls(
            **{k: v for k, v in data.items() if k in known},
            op_times=None if ops is None else OpTimes.from_json(ops),
            build={k: v for k, v in data.items() if k not in known},
        )


@dataclass(frozen=True, kw_only=True)
class VariantResult:
    """What measuring one model under one variant produced.

    A measured result keeps its raw samples; `compact()` drops them for a stored baseline,
    which keeps what the comparisons and the history use: one p50, p95 and p99 per repeat
    (`block_stats`) and a quantile sketch of all samples (`sketch`). Both are derived from
    the samples when a result is made with them.
    """

    test: str
    variant: str
    status: Status
    error: str | None = None
    metrics: Metrics = field(default_factory=Metrics)
    samples_ms: tuple[float, ...] = ()
    repeats_ms: tuple[float, ...] = ()  # per-repeat medians: the independent units
    block_sizes: tuple[int, ...] = ()  # how `samples_ms` splits into its repeats
    drift_check: DriftCheck | None = None
    details: Details = field(default_factory=Details)
    counters: Counters | None = None
    block_stats: BlockStats | None = None
    sketch: QuantileSketch | None = None
    workload: str = "forward"  # WORKLOADS
    # a generation's per-repeat TTFT and TPOT (p50, p95, p99 of each block): what their
    # comparisons test, kept in compact results too
    phases: tuple[tuple[str, BlockStats], ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise RecordError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.workload not in WORKLOADS:
            raise RecordError(f"workload must be one of {WORKLOADS}, got {self.workload!r}")
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
        if not isinstance(self.details, Details):
            raise RecordError(f"details must be a Details record, got {self.details!r}")
        if self.samples_ms:
            if self.block_stats is None:
                object.__setattr__(self, "block_stats", BlockStats.of(self.blocks()))
            if self.sketch is None:
                object.__setattr__(self, "sketch", QuantileSketch.of(self.samples_ms))
        stats = self.block_stats
        if stats is not None:
            if self.samples_ms and sum(stats.sizes) != len(self.samples_ms):
                raise RecordError("blocks.sizes must add up to the number of samples")
            if not self.repeats_ms:
                object.__setattr__(self, "repeats_ms", tuple(stats.percentile(50.0) or ()))

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

    def block_quantiles(self, q: float) -> list[float]:
        """Percentile `q` of each repeat: from the samples where they are kept, else from
        the per-repeat summaries (p50, p95 and p99) of a compact result."""
        if self.samples_ms:
            return [percentile(sorted(block), q) for block in self.blocks() if block]
        if self.block_stats is None:
            return []  # nothing was timed (or a record of long ago kept no samples)
        kept = self.block_stats.percentile(q)
        if kept is None:
            raise ValueError(f"p{q:g} of each repeat was not kept in this compact result")
        return kept

    def phase_quantiles(self, phase: str, q: float) -> list[float]:
        """Percentile `q` of each repeat of a generation's `phase` ("ttft", "tpot"); empty
        where the result has none."""
        stats = dict(self.phases).get(phase)
        return [] if stats is None else list(stats.percentile(q) or [])

    def compact(self) -> VariantResult:
        """This result as a baseline stores it: without the raw samples (their per-repeat
        summaries and sketch stay)."""
        if not self.samples_ms:
            return self
        return replace(self, samples_ms=(), repeats_ms=(), block_sizes=())

    @property
    def n_samples(self) -> int:
        """How many calls were timed (kept or not)."""
        if self.samples_ms:
            return len(self.samples_ms)
        return sum(self.block_stats.sizes) if self.block_stats is not None else 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.test, self.variant)

    def with_test(self, test: str) -> VariantResult:
        return replace(self, test=test)

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "variant": self.variant,
            "workload": self.workload,
            "status": self.status,
            "error": self.error,
            "metrics": self.metrics.to_json(),
            # null in a compact result: the samples were not kept (blocks and sketch were)
            "samples_ms": list(self.samples_ms)
            if self.samples_ms or not self.block_stats
            else None,
            "repeats_ms": list(self.repeats_ms),
            "block_sizes": list(self.block_sizes),
            "drift_check": None if self.drift_check is None else self.drift_check.to_json(),
            "details": self.details.to_json(),
            "counters": None if self.counters is None else self.counters.to_json(),
            "blocks": None if self.block_stats is None else self.block_stats.to_json(),
            "sketch": None if self.sketch is None else self.sketch.to_json(),
            "phases": {name: stats.to_json() for name, stats in self.phases} or None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantResult:
        try:
            drift = data.get("drift_check")
            counters = data.get("counters")
            blocks, sketch = data.get("blocks"), data.get("sketch")
            return cls(
                test=text("test", data["test"]),
                variant=text("variant", data["variant"]),
                status=data["status"],
                error=data.get("error"),
                metrics=Metrics.from_json(data.get("metrics") or {}),
                samples_ms=tuple(data.get("samples_ms") or ()),
                repeats_ms=tuple(data.get("repeats_ms") or ()),
                block_sizes=tuple(data.get("block_sizes") or ()),
                drift_check=None if drift is None else DriftCheck.from_json(drift),
                details=Details.from_json(data.get("details")),
                counters=None if counters is None else Counters.from_json(counters),
                block_stats=None if blocks is None else BlockStats.from_json(blocks),
                sketch=None if sketch is None else QuantileSketch.from_json(sketch),
                workload=data.get("workload", "forward"),
                phases=_phases(data.get("phases")),
            )
        except KeyError as exc:
            raise RecordError(f"a result lacks the key {exc.args[0]!r}") from exc


def _phases(data: Any) -> tuple[tuple[str, BlockStats], ...]:
    if data is None:
        return ()
    if not isinstance(data, Mapping):
        raise RecordError(f"phases must map a phase's name to its blocks, got {data!r}")
    return tuple((str(name), BlockStats.from_json(stats)) for name, stats in data.items())
