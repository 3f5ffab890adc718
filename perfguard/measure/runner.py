"""Measure one model under one variant: the library entry point that the plugin wraps."""

from __future__ import annotations

import contextlib
import gc
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from perfguard.measure import counters, drift, memory_sites
from perfguard.measure.clock import Clock, CudaEventClock, HostClock
from perfguard.measure.compile_cache import CompileCache
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
from perfguard.measure.memory import probe_for
from perfguard.measure.sampling import (
    FixedWork,
    Progress,
    Sampler,
    SamplingSettings,
    fixed_work,
    for_device,
    sample,
)
from perfguard.measure.shapes import Sweep, recompile_reasons, sweep
from perfguard.records import Counters, VariantResult, trace_file_name
from perfguard.variants.base import Built, VariantUnavailableError, first_line
from perfguard.variants.compile import DYNAMIC
from perfguard.variants.exporting import ExportError
from perfguard.variants.generation import Generation, GenerationError, PhasedClock
from perfguard.variants.lending import lent_or_copied
from perfguard.variants.registry import batch_of, build_variant
from perfguard.variants.spec import VariantSpec, parse_variant
from perfguard.variants.training import TrainStep, TrainStepError, seeded, training_error


@dataclass(frozen=True)
class MeasureSettings:
    """Everything that shapes one measurement besides the model, inputs and variant."""

    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    device: str = "auto"  # "auto" picks CUDA when present
    threads: int | None = None  # torch intra-op threads during the measurement
    drift_tolerance: drift.DriftTolerance = None
    memory_calls: int = 3
    warm_compile: bool = True  # also time a second compile from the now-warm cache
    flush_l2: bool = False  # CUDA: evict L2 before each timed call (cold-cache latency)
    trace_dir: Path | None = None  # write each variant's profiled calls as a Chrome trace
    trace_side: str = "head"  # in the trace's name: "head", or "base" for the base commit
    batch: int | None = None  # items per call for throughput_per_s; None: the inputs say
    shapes: tuple[tuple[int, ...], ...] = ()  # compile-dynamic: the first input's shapes
    compile_cache: CompileCache | None = None  # main's compiled artifacts (measure.compile_cache)


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
    model: nn.Module,
    example_inputs: Sequence[Any],
    variant: str | VariantSpec = "eager",
    settings: MeasureSettings | None = None,
    *,
    test: str = "",
    reference: drift.Reference | None = None,
    clock: Clock | None = None,
    progress: Progress | None = None,
    sampler: Sampler = sample,
    kwargs: Mapping[str, Any] | None = None,
    turn: Callable[[], None] | None = None,
    training: TrainStep | None = None,
    generation: Generation | None = None,
) -> VariantResult:
    """Measure `model(*example_inputs, **kwargs)` under `variant`; never raises for a model's
    failure. With `training`, each sample is one training step instead (zero_grad, forward,
    `training.loss_fn(output)`, backward, optimizer step; see `perfguard.variants.training`);
    with `generation`, one greedy `model.generate` (`perfguard.variants.generation`).
    Keyword inputs (`attention_mask=...`) reach every variant, the ONNX export and the drift
    references alike.

    A variant that cannot run here is `skipped` with the reason; a model that raises, runs
    out of memory or returns NaN is an `error` result carrying the message. `reference`
    (eager outputs, see `drift.compute_reference`) may be passed to share it across variants.
    `sampler` takes the timings once the variant is built and compiled (same-job A/B passes
    one that samples a block whenever the driver asks). `turn`, when given, is called once
    the variant is built, before anything is timed (compile, warm-up, samples): same-job A/B
    waits there for this side's turn, so the two sides build at once but time one at a time.
    """
    settings = settings or MeasureSettings()
    spec = parse_variant(variant) if isinstance(variant, str) else variant
    report = progress or (lambda _: None)
    label = test or type(model).__name__
    item: dict[str, Any] = {
        "test": label,
        "variant": spec.name,
        "workload": "train" if training else "generate" if generation else "forward",
    }
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"measure_model measures a torch.nn.Module, got {type(model).__name__}: wrap a "
            "function in a Module whose forward calls it"
        )
    if not isinstance(example_inputs, tuple | list):
        raise TypeError("example_inputs must be a tuple of positional arguments, e.g. (x,)")
    why = drift.check_tolerance(settings.drift_tolerance)
    if why:
        raise ValueError(why)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError("kwargs must be a dict of keyword inputs, e.g. {'attention_mask': m}")
    try:
        device = resolve_device(settings.device)
        # a training step draws random numbers (dropout) in every timed step: each variant
        # starts from the same seed, and the caller's generator is left as it was
        rng = seeded(device) if training is not None else contextlib.nullcontext()
        # a variant that leaves the weights alone measures the user's model itself
        in_place = training is None and not spec.changes_weights
        lending = lent_or_copied(model, device) if in_place else contextlib.nullcontext(model)
        with torch_state(settings.threads), rng, lending as work:
            return _measure(
                work,
                example_inputs,
                spec,
                settings,
                device,
                label,
                reference,
                clock,
                report,
                sampler,
                dict(kwargs or {}),
                turn,
                training or generation,
            )
    except VariantUnavailableError as exc:
        return VariantResult(**item, status="skipped", error=str(exc))
    except torch.cuda.OutOfMemoryError as exc:
        return VariantResult(**item, status="error", error=f"out of memory: {_first_line(exc)}")
    except (TrainStepError, GenerationError, ExportError) as exc:  # says what to change
        return VariantResult(**item, status="error", error=str(exc))
    except Exception as exc:  # a model's own failure becomes this variant's error result
        error = _first_line(exc) if training is None else training_error(_first_line(exc))
        return VariantResult(**item, status="error", error=error)
    finally:
        if spec.is_compiled:
            reset_dynamo()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _measure(
    model: nn.Module,
    inputs: Sequence[Any],
    spec: VariantSpec,
    settings: MeasureSettings,
    device: torch.device,
    label: str,
    reference: drift.Reference | None,
    clock: Clock | None,
    progress: Progress,
    sampler: Sampler = sample,
    kwargs: Mapping[str, Any] | None = None,
    turn: Callable[[], None] | None = None,
    training: drift.Workload | None = None,
) -> VariantResult:
    if reference is None:
        progress("eager reference")
        reference = drift.compute_reference(model, inputs, device, kwargs, training)
    progress("building")
    generation = training if isinstance(training, Generation) else None
    step = training if isinstance(training, TrainStep) else None
    built = build_variant(model, inputs, spec, device, kwargs, step, generation, lent=True)
    if built.compiled:
        progress("preparing the compiler")
        prime_compiler(device)
    if turn is not None:
        progress("waiting for its turn")
        turn()
    if clock is None:
        clock = (
            CudaEventClock(device, flush_l2=settings.flush_l2)
            if device.type == "cuda" and built.timing == "device"
            else HostClock()
        )
    if built.generation is not None:
        clock = PhasedClock(clock, built.generation)  # keeps each sample's TTFT and TPOT
    taken = _take(built, clock, device, label, spec, settings, progress, sampler)
    if not np.all(np.isfinite(taken.out)):
        raise drift.NonFiniteOutputError(f"{spec.name} returned NaN or Inf")
    dtype = built.autocast_dtype
    check, figures, drift_note = drift.check(
        taken.out,
        reference,
        built.tolerance_class,
        settings.drift_tolerance,
        None
        if dtype is None
        else lambda: drift.precision_error(
            model, inputs, device, dtype, reference, kwargs, training
        ),
        drift.tf32_allowed(model, device),
        (taken.clock.times.tokens, generation.max_new_tokens)
        if generation is not None and isinstance(taken.clock, PhasedClock)
        else None,
    )
    batch = settings.batch or batch_of(inputs, kwargs)
    result = VariantResult(
        test=label,
        variant=spec.name,
        status="ok",
        metrics=metrics_of(built, taken, figures, batch),
        samples_ms=taken.outcome.samples_ms,
        repeats_ms=taken.outcome.repeat_medians_ms,
        block_sizes=tuple(len(b) for b in taken.outcome.blocks_ms),
        drift_check=check,
        details=details_of(built, taken, device, settings, reference),
        counters=taken.counted,
        workload="train" if built.training else "generate" if built.generation else "forward",
    )
    if generation is None or not isinstance(taken.clock, PhasedClock):
        return result
    n = generation.max_new_tokens
    return with_generation(result, taken.clock, taken.outcome, reference, n, batch, drift_note)


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


def _record_sites(
    built: Built,
    call: Callable[[], Any],
    device: torch.device,
    label: str,
    spec: VariantSpec,
    settings: MeasureSettings,
) -> None:
    """The allocation sites of one untimed call, into the result's details; on CUDA the
    allocator's snapshot beside the traces (a pickle for pytorch.org/memory_viz)."""
    snapshot = None
    if device.type == "cuda" and settings.trace_dir is not None:
        name = trace_file_name(label, spec.name, settings.trace_side)
        snapshot = settings.trace_dir / name.replace(".trace.json", ".memory.pickle")
    peak, held = memory_sites.record(call, device, snapshot)
    built.details["memory_sites"] = [site.to_json() for site in peak]
    built.details["memory_held_sites"] = [site.to_json() for site in held]


def _take(
    built: Built,
    clock: Clock,
    device: torch.device,
    label: str,
    spec: VariantSpec,
    settings: MeasureSettings,
    progress: Progress,
    sampler: Sampler,
) -> Taken:
    """Compile, sample, then (untimed) peak memory, outputs for drift and exact counts."""
    cache = fresh_compile_cache() if built.compiled else contextlib.nullcontext()
    with cache:
        call, compiled = compile_cached(
            built, device, settings.compile_cache, settings.warm_compile, progress
        )
        outcome = sampler(call, clock, for_device(settings.sampling, device.type), progress)
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
        if memory_sites.wanted():  # a memory verdict stands: one more call, recorded
            progress("allocation sites")
            _record_sites(built, call, device, label, spec, settings)
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
    )
