"""One measurement to make: the model and its inputs, the variant, the work each sample does
(a forward call, a training step, a generation) and the settings. Its inputs are checked here,
once, for the library and the plugin alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from perfguard.bounds import DriftTolerance, check
from perfguard.measure.compile_cache import CompileCache
from perfguard.measure.sampling import Progress, Sampler, SamplingSettings, sample
from perfguard.settings import MARKER_KEYS
from perfguard.variants.generation import Generation
from perfguard.variants.spec import VariantSpec, parse_variant
from perfguard.variants.workload import FORWARD, Workload

if TYPE_CHECKING:
    from perfguard.measure.clock import Clock
    from perfguard.measure.drift import Reference


@dataclass(frozen=True)
class MeasureSettings:
    """Everything that shapes one measurement besides the model, inputs and variant."""

    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    device: str = "auto"  # "auto" picks CUDA when present
    threads: int | None = None  # torch intra-op threads during the measurement
    drift_tolerance: DriftTolerance = None
    memory_calls: int = 3
    warm_compile: bool = True  # also time a second compile from the now-warm cache
    flush_l2: bool = False  # CUDA: evict L2 before each timed call (cold-cache latency)
    trace_dir: Path | None = None  # write each variant's profiled calls as a Chrome trace
    trace_side: str = "head"  # in the trace's name: "head", or "base" for the base commit
    batch: int | None = None  # items per call for throughput_per_s; None: the inputs say
    shapes: tuple[tuple[int, ...], ...] = ()  # compile-dynamic: the first input's shapes
    compile_cache: CompileCache | None = None  # main's compiled artifacts (measure.compile_cache)
    record_sites: bool = False  # one more call recording allocation sites (measure.memory_sites)


@dataclass(frozen=True)
class Job:
    """What to measure: `model(*inputs, **kwargs)` under `variant`, each sample one `work`
    (a forward call, a training step, a generation: `variants.workload`), as `settings`
    say; `test` names it in the result (the model's class where empty). Made by `Job.of`,
    which checks what it is given."""

    model: nn.Module
    inputs: tuple[Any, ...]
    variant: VariantSpec
    settings: MeasureSettings
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    work: Workload = FORWARD
    test: str = ""

    @classmethod
    def of(
        cls,
        model: Any,
        example_inputs: Any,
        variant: str | VariantSpec = "eager",
        settings: MeasureSettings | None = None,
        *,
        kwargs: Any = None,
        work: Workload | None = None,
        test: str = "",
        caller: str = "measure_model()",
    ) -> Job:
        """The job, or TypeError (ValueError for a bad setting) naming what is wrong, said as
        `caller` (`perfguard.run()`, ...) was given it. An unknown variant name raises
        UnknownVariantError."""
        settings = settings or MeasureSettings()
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"{caller} measures a torch.nn.Module, got {type(model).__name__}: wrap a "
                "function in a Module whose forward calls it"
            )
        if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
            raise TypeError(
                f"{caller}: the model's weights are on the meta device (shapes without data): "
                "materialize them first (model.to_empty(device=...) and initialize them, or "
                "load a checkpoint)"
            )
        if not isinstance(example_inputs, tuple | list):
            raise TypeError(
                f"{caller}: example_inputs must be a tuple of positional arguments, e.g. (x,)"
            )
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(
                f"{caller}: kwargs must be a dict of keyword inputs, e.g. {{'attention_mask': m}}"
            )
        batch = settings.batch
        if batch is not None and (
            isinstance(batch, bool) or not isinstance(batch, int) or batch < 1
        ):
            raise TypeError(
                f"{caller}: batch must be a positive whole number of items, got {batch!r}"
            )
        if settings.drift_tolerance is not None:
            tolerance = settings.drift_tolerance
            check(MARKER_KEYS["drift_tolerance"], tolerance, f"{caller}: drift_tolerance")
        spec = parse_variant(variant) if isinstance(variant, str) else variant
        if work is not None and not isinstance(work, Workload):
            raise TypeError(
                f"{caller}: work must be a TrainStep or a Generation (None: a forward call), "
                f"got {type(work).__name__}"
            )
        work = work or FORWARD
        return cls(model, tuple(example_inputs), spec, settings, dict(kwargs or {}), work, test)

    @property
    def label(self) -> str:
        return self.test or type(self.model).__name__

    @property
    def generation(self) -> Generation | None:
        """The generation each sample is, if it is one (its tokens are timed one by one)."""
        return self.work if isinstance(self.work, Generation) else None

    @property
    def in_place(self) -> bool:
        """Whether the user's model itself is measured (lent, given back as it was): a
        variant that leaves the weights alone, not a training step (which trains a copy)."""
        return not self.work.copies_model and not self.variant.changes_weights

    @property
    def workload(self) -> str:
        """The result's `workload`."""
        return self.work.name


@dataclass(frozen=True)
class Hooks:
    """How a caller drives a measurement: an eager reference shared by a test's variants,
    a clock (tests script one), progress lines, the sampler (same-job A/B samples a block
    whenever its driver asks) and a turn to wait for before anything is timed."""

    reference: Reference | None = None
    clock: Clock | None = None
    progress: Progress = lambda _: None
    sampler: Sampler = sample
    turn: Callable[[], None] | None = None
