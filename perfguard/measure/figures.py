"""A measured variant's figures: its metrics and details, from what the timed phase took."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from perfguard.measure import drift
from perfguard.measure.clock import Clock
from perfguard.measure.compiling import Compiled
from perfguard.measure.memory import MemoryReading
from perfguard.measure.sampling import FixedWork, SamplingOutcome
from perfguard.measure.shapes import Sweep
from perfguard.records import Counters, Details, Metrics
from perfguard.records.op_times import OpTimes
from perfguard.stats.exact import GROWTH_ALLOWED
from perfguard.stats.summary import summarize, tail_is_reliable
from perfguard.variants.base import Built

if TYPE_CHECKING:
    from perfguard.measure.job import MeasureSettings


@dataclass
class Taken:
    """What the timed phase of one variant gave: timings, memory, outputs, counts."""

    outcome: SamplingOutcome
    compiled: Compiled
    clock: Clock
    recompiles: int | None
    memory: MemoryReading
    out: Any  # the outputs, flattened
    counted: Counters | None
    profile: dict[str, Any] | None
    counting_failed: str | None
    cudagraph_skips: int | None
    fixed: FixedWork | None = None  # the untimed work's calls
    swept: Sweep | None = None  # compile-dynamic at every declared shape
    op_times: OpTimes | None = None  # the profiled blocks' operators or kernels
    op_failed: str | None = None  # why they could not be taken


def metrics_of(built: Built, taken: Taken, figures: drift.DriftFigures, batch: int) -> Metrics:
    memory, compiled = taken.memory, taken.compiled
    seen = built.memory_unseen is None
    latency = summarize(taken.outcome.samples_ms).metric_fields()
    device_us = (taken.profile or {}).get("device_us")
    p50 = latency.get("latency_p50_ms")
    return Metrics(
        **latency,
        throughput_per_s=batch / (p50 / 1000) if p50 else None,
        peak_memory_bytes=memory.peak_bytes if seen else None,
        peak_memory_reserved_bytes=memory.reserved_bytes if seen else None,
        peak_memory_increase_bytes=None
        if memory.start_bytes is None or not seen
        else max(memory.peak_bytes - memory.start_bytes, 0),
        # an ahead-of-time build (an AOTInductor package, an engine) is its compile
        compile_time_s=compiled.cold_s if compiled.cold_s is not None else built.build_s,
        compile_time_warm_s=compiled.warm_s,
        graph_breaks=compiled.graph_breaks,
        recompiles=taken.recompiles,
        drift_max_abs=figures.max_abs,
        drift_max_rel=figures.max_rel,
        drift_cosine=figures.cosine,
        model_size_bytes=built.model_size_bytes,
        sparsity=built.sparsity,
        # the kernels' device time of one call, where the profiled calls ran on CUDA
        device_time_ms=float(device_us) / 1000 if device_us is not None else None,
    )


def details_of(
    built: Built,
    taken: Taken,
    device: torch.device,
    settings: MeasureSettings,
    reference: drift.Reference,
) -> Details:
    outcome, clock = taken.outcome, taken.clock
    notes = [*built.notes, *([taken.counting_failed] if taken.counting_failed else [])]
    if taken.op_failed:
        notes.append(taken.op_failed)
    if taken.fixed is not None and taken.fixed.shortened:
        notes.append(taken.fixed.shortened)
    if reference.fp64_note:
        notes.append(reference.fp64_note)
    if settings.flush_l2 and not clock.name.endswith("l2_flush"):
        notes.append(
            "--perfguard-flush-l2 applies to CUDA-event timing only: this variant was timed "
            "with a hot cache"
        )
    growth = None if taken.counted is None else taken.counted.memory_growth_bytes_per_call
    if growth is not None and growth > GROWTH_ALLOWED:
        notes.append(f"each warm call leaves {growth:,} bytes allocated: a leak")
    if not outcome.warmup.stable:
        notes.append(f"timings did not settle within {outcome.warmup.calls} warm-up calls")
    n = len(outcome.samples_ms)
    return Details(
        device=str(device),
        clock=clock.name,
        memory_method=taken.memory.method if built.memory_unseen is None else built.memory_unseen,
        cudagraph_skips=taken.cudagraph_skips,
        warmup_calls=outcome.warmup.calls,
        warmup_stable=outcome.warmup.stable,
        repeats=len(outcome.blocks_ms),
        tails_too_few=tuple(
            name for name, q in (("p95", 0.95), ("p99", 0.99)) if not tail_is_reliable(n, q)
        ),
        notes=tuple(notes),
        profile=taken.profile,
        op_times=taken.op_times,
        build=built.details
        if taken.swept is None
        else {**built.details, "shapes_p50_ms": taken.swept.p50_ms},
    )
