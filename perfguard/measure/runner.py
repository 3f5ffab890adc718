"""Measure one model under one variant: the library entry point that the plugin wraps."""

from __future__ import annotations

import contextlib
import gc
import statistics
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from perfguard.measure import counters, drift, memory_sites
from perfguard.measure.clock import Clock, CudaEventClock, HostClock
from perfguard.measure.compiling import compile_cached
from perfguard.measure.figures import Taken, details_of, metrics_of
from perfguard.measure.generating import with_generation
from perfguard.measure.isolation import (
    cudagraph_skips,
    dynamo_counts,
    fresh_compile_cache,
    prime_compiler,
    reset_dynamo,
    torch_state,
)
from perfguard.measure.job import Hooks, Job, MeasureSettings
from perfguard.measure.memory import probe_for
from perfguard.measure.op_times import OpProfiler, op_block_ms
from perfguard.measure.sampling import (
    FixedWork,
    Progress,
    Sampler,
    fixed_work,
    for_device,
    sample,
)
from perfguard.measure.shapes import Sweep, recompile_reasons, sweep
from perfguard.records import Counters, DriftCheck, VariantResult, trace_file_name
from perfguard.variants.base import Built, VariantBuildError, VariantUnavailableError, first_line
from perfguard.variants.compile import DYNAMIC
from perfguard.variants.exporting import ExportError
from perfguard.variants.generation import GenerationError, PhasedClock
from perfguard.variants.lending import lent_or_copied
from perfguard.variants.registry import batch_of, build_variant
from perfguard.variants.spec import VariantSpec
from perfguard.variants.training import TrainStepError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise VariantUnavailableError(f"device {name!r} was asked for but CUDA is not available")
    return device


def _first_line(exc: BaseException) -> str:
    """`Type: first line of the message`, or the type alone when there is no message."""
    return f"{type(exc).__name__}: {first_line(exc)}" if str(exc).strip() else type(exc).__name__


def _count(
    built: Built,
    call: Callable[[], Any],
    device: torch.device,
    label: str,
    spec: VariantSpec,
    settings: MeasureSettings,
    dynamo: Mapping[str, Any],
    work: FixedWork,
) -> tuple[Counters | None, dict[str, Any], str | None]:
    """The exact counters and the profile summary; counting never fails the measurement
    (the timings stand without it): a failure is the third value, for a note."""
    trace = None
    if settings.trace_dir is not None:
        trace = settings.trace_dir / trace_file_name(label, spec.name, settings.trace_side)
    try:
        counted, profile = counters.count(
            call,
            built.module,
            built.eager_call,
            device,
            trace=trace,
            compiled=dynamo if built.compiled else None,
            calls=work.profile,
            growth_calls=work.growth,
        )
    except Exception as exc:  # the profiler or a counter that cannot follow this variant
        return None, {}, f"exact counters not counted: {first_line(exc)}"
    return counted, profile, None


def measure_model(
    job: Job,
    *,
    reference: drift.Reference | None = None,
    clock: Clock | None = None,
    progress: Progress | None = None,
    sampler: Sampler = sample,
    turn: Callable[[], None] | None = None,
) -> VariantResult:
    """Measure `job` (`Job.of(model, example_inputs, variant, settings, kwargs=...,
    work=...)`): each sample one forward call, or one training step (`work=TrainStep(...)`:
    zero_grad, forward, `loss_fn(output)`, backward, optimizer step; see
    `perfguard.variants.training`), or one greedy `model.generate`
    (`work=Generation(max_new_tokens)`). Keyword inputs (`attention_mask=...`) reach every
    variant, the ONNX export and the drift references alike. Never raises for a model's
    failure.

    A variant that cannot run here is `skipped` with the reason; a model that raises, runs
    out of memory or returns NaN is an `error` result carrying the message. `reference`
    (eager outputs, see `drift.compute_reference`) may be passed to share it across variants.
    `sampler` takes the timings once the variant is built and compiled (same-job A/B passes
    one that samples a block whenever the driver asks). `turn`, when given, is called once
    the variant is built, before anything is timed (compile, warm-up, samples): same-job A/B
    waits there for this side's turn, so the two sides build at once but time one at a time.
    """
    hooks = Hooks(reference, clock, progress or Hooks.progress, sampler, turn)
    spec = job.variant
    item: dict[str, Any] = {"test": job.label, "variant": spec.name, "workload": job.workload}
    try:
        device = resolve_device(job.settings.device)
        rng = job.work.random(device)  # a training step's: the same seed for every variant
        model = job.model
        lending = lent_or_copied(model, device) if job.in_place else contextlib.nullcontext(model)
        with torch_state(job.settings.threads), rng, lending as work:
            return _measure(replace(job, model=work), device, hooks)
    except VariantUnavailableError as exc:
        return VariantResult(**item, status="skipped", error=str(exc))
    except torch.cuda.OutOfMemoryError as exc:
        return VariantResult(**item, status="error", error=f"out of memory: {_first_line(exc)}")
    except (
        TrainStepError,
        GenerationError,
        ExportError,
        VariantBuildError,
    ) as exc:  # says what to change
        return VariantResult(**item, status="error", error=str(exc))
    except Exception as exc:  # a model's own failure becomes this variant's error result
        error = job.work.error(_first_line(exc))
        return VariantResult(**item, status="error", error=error)
    finally:
        if spec.is_compiled:
            reset_dynamo()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _measure(job: Job, device: torch.device, hooks: Hooks) -> VariantResult:
    model, inputs, spec, settings, kwargs = (
        job.model,
        job.inputs,
        job.variant,
        job.settings,
        job.kwargs,
    )
    progress, reference, clock = hooks.progress, hooks.reference, hooks.clock
    if reference is None:
        progress("eager reference")
        reference = drift.compute_reference(model, inputs, device, kwargs, job.work)
    progress("building")
    generation = job.generation
    built = build_variant(model, inputs, spec, device, kwargs, job.work, lent=True)
    if built.compiled:
        progress("preparing the compiler")
        prime_compiler(device)
    if hooks.turn is not None:
        progress("waiting for its turn")
        hooks.turn()
    if clock is None:
        clock = (
            CudaEventClock(device, flush_l2=settings.flush_l2)
            if device.type == "cuda" and built.timing == "device"
            else HostClock()
        )
    if built.generation is not None:
        clock = PhasedClock(clock, built.generation)  # keeps each sample's TTFT and TPOT
    taken = _take(built, clock, device, job, hooks)
    if not np.all(np.isfinite(taken.out)):
        raise drift.NonFiniteOutputError(f"{spec.name} returned NaN or Inf")
    check, figures, drift_note = _judge_drift(job, built, taken, device, reference)
    batch = settings.batch or batch_of(inputs, kwargs)
    result = VariantResult(
        test=job.label,
        variant=spec.name,
        status="ok",
        metrics=metrics_of(built, taken, figures, batch),
        samples_ms=taken.outcome.samples_ms,
        repeats_ms=taken.outcome.repeat_medians_ms,
        block_sizes=tuple(len(b) for b in taken.outcome.blocks_ms),
        drift_check=check,
        details=details_of(built, taken, device, settings, reference),
        counters=taken.counted,
        workload=job.workload,
    )
    if generation is None or not isinstance(taken.clock, PhasedClock):
        return result
    n = generation.max_new_tokens
    return with_generation(result, taken.clock, taken.outcome, reference, n, batch, drift_note)


def _judge_drift(
    job: Job, built: Built, taken: Taken, device: torch.device, reference: drift.Reference
) -> tuple[DriftCheck, drift.DriftFigures, str | None]:
    """The drift check of what `taken` returned, against the eager reference."""
    model, inputs, kwargs, dtype = job.model, job.inputs, job.kwargs, built.autocast_dtype
    generation = job.generation
    return drift.check(
        taken.out,
        reference,
        built.tolerance_class,
        job.settings.drift_tolerance,
        None
        if dtype is None
        else lambda: drift.precision_error(
            model, inputs, device, dtype, reference, kwargs, job.work
        ),
        drift.tf32_allowed(model, device),
        (taken.clock.times.tokens, generation.max_new_tokens)
        if generation is not None and isinstance(taken.clock, PhasedClock)
        else None,
    )


def _sweep(
    call: Callable[[], Any],
    spec: VariantSpec,
    settings: MeasureSettings,
    clock: Clock,
    progress: Progress,
) -> Sweep | None:
    """compile-dynamic at every shape the test declares, or None (another variant, or no
    shapes: a fixed-shape variant is never run at another shape)."""
    part = spec.part("compile")
    at = getattr(call, "at", None)
    if part is None or part.name != DYNAMIC or not settings.shapes or at is None:
        return None
    progress(f"at each of {len(settings.shapes)} shapes")
    budget_ms = settings.sampling.budget_s * 1000.0
    return sweep(at, getattr(call, "inputs", ()), settings.shapes, clock, budget_ms)


def _record_sites(built: Built, call: Callable[[], Any], device: torch.device, job: Job) -> None:
    """The allocation sites of one untimed call, into the result's details; on CUDA the
    allocator's snapshot beside the traces (a pickle for pytorch.org/memory_viz)."""
    snapshot, settings = None, job.settings
    if device.type == "cuda" and settings.trace_dir is not None:
        name = trace_file_name(job.label, job.variant.name, settings.trace_side)
        snapshot = settings.trace_dir / name.replace(".trace.json", ".memory.pickle")
    peak, held = memory_sites.record(call, device, snapshot)
    built.details["memory_sites"] = [site.to_json() for site in peak]
    built.details["memory_held_sites"] = [site.to_json() for site in held]


# the timed phase in its order (compile, the timed and the profiled blocks, memory, drift, counts)
# long: each step's calls depend on the one before
def _take(built: Built, clock: Clock, device: torch.device, job: Job, hooks: Hooks) -> Taken:
    """Compile, sample, then (untimed) peak memory, outputs for drift and exact counts."""
    settings, spec, label, progress = job.settings, job.variant, job.label, hooks.progress
    sampling = for_device(settings.sampling, device.type)
    with fresh_compile_cache() if built.compiled else contextlib.nullcontext():
        call, compiled = compile_cached(
            built, device, settings.compile_cache, settings.warm_compile, progress
        )
        module = None if built.compiled else built.module
        each_ms = op_block_ms(sampling.budget_s, sampling.op_blocks)
        ops = OpProfiler(call, device, module, block_ms=each_ms)  # op blocks
        outcome = hooks.sampler(call, clock, sampling, progress, ops=ops.block)
        swept = _sweep(call, spec, settings, clock, progress)
        recompiles = (
            dynamo_counts()[2] - compiled.frames_before_sampling if built.compiled else None
        )
        progress("peak memory")
        release = getattr(clock, "release", None)
        if release is not None:
            release()  # the L2 flush's buffer is no part of the variant's memory
        work = fixed_work(
            statistics.median(outcome.samples_ms) if outcome.samples_ms else 0.0,
            settings.sampling.budget_s,
            max(settings.memory_calls, 1),
            counters.CALLS,
            counters.GROWTH_CALLS,
        )
        probe = probe_for(device)
        probe.start()
        for _ in range(work.memory):
            call()
        memory = probe.stop()
        if job.settings.record_sites:  # a memory verdict stands: one more call, recorded
            progress("allocation sites")
            _record_sites(built, call, device, job)
        progress("drift")
        out = drift.flatten_outputs(built.outputs(call))
        progress("exact counters")
        dynamo = {
            "graphs": compiled.graphs,
            "backward_graphs": compiled.backward_graphs,
            "graph_breaks": compiled.graph_breaks,
            "break_reasons": compiled.break_reasons,
            "recompiles": recompiles,
            "recompile_reasons": recompile_reasons() if built.compiled else (),
        }
        counted, profile, failed = _count(built, call, device, label, spec, settings, dynamo, work)
    return Taken(
        outcome=outcome,
        compiled=compiled,
        clock=clock,
        recompiles=recompiles,
        memory=memory,
        out=out,
        counted=counted,
        profile=profile,
        counting_failed=failed,
        # CUDA graphs (reduce-overhead) that inductor declined: dynamo's counters were
        # cleared before the compile that was timed, so what they hold now is this variant's
        cudagraph_skips=cudagraph_skips() if built.compiled and device.type == "cuda" else None,
        fixed=work,
        swept=swept,
        op_times=ops.times(outcome.op_blocks),  # and, once, where each place ran
        op_failed=ops.failed,
    )
