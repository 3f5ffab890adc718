"""Warm-up until stable, then sampling in independent repeat blocks.

Pure logic over a `Clock`: nothing here knows about torch, so the tests drive it
with a `FakeClock` and assert exact outcomes.

Why blocks: per-call samples inside one process are autocorrelated (caches,
clocks, allocator state), so the statistics later work on per-repeat figures.
Each repeat is re-warmed before it is sampled.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from perfguard.bounds import check
from perfguard.measure.clock import Clock
from perfguard.settings import BY_FIELD

OpBlock = tuple[float, Mapping[str, float]]  # a call's µs, and each place's µs per call
OpBlocks = Callable[[], OpBlock]  # takes one profiled block

Progress = Callable[[str], None]


def _no_progress(_: str) -> None:
    return None


@dataclass(frozen=True)
class SamplingSettings:
    """How long and how carefully to sample one variant. Defaults suit a CI job."""

    min_warmup: int = 3  # call 1 compiles, call 2 records CUDA graphs, call 3 replays
    max_warmup: int = 200
    warmup_window: int = 5
    warmup_tolerance: float = 0.05  # medians of the last two windows within 5%
    max_warmup_ms: float = 3000.0  # measured time after `min_warmup`, then give up
    min_warmup_wall_ms: float = 0.0  # warm up at least this long (CUDA: clocks leave idle)
    repeats: int = 5
    rewarm_calls: int = 2
    min_samples_per_repeat: int = 10
    max_samples_per_repeat: int = 5000
    budget_s: float = 2.0  # measured time of all repeats together
    op_blocks: int = 8  # profiled blocks after the timed ones, for verdicts per op (0: none)

    def __post_init__(self) -> None:
        # the two a user sets are checked as every source of them is (perfguard.bounds)
        for name in ("budget_s", "repeats"):
            check(BY_FIELD[name], getattr(self, name), f"SamplingSettings.{name}")
        positive = {
            "max_warmup": self.max_warmup,
            "warmup_window": self.warmup_window,
            "min_samples_per_repeat": self.min_samples_per_repeat,
            "max_samples_per_repeat": self.max_samples_per_repeat,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"sampling setting {name} must be at least 1, got {value}")
        if self.min_warmup < 0 or self.rewarm_calls < 0 or self.op_blocks < 0:
            raise ValueError("min_warmup, rewarm_calls and op_blocks must be >= 0")
        if self.max_warmup < self.min_warmup:
            raise ValueError("max_warmup must be >= min_warmup")
        if self.min_samples_per_repeat > self.max_samples_per_repeat:
            raise ValueError("min_samples_per_repeat must be <= max_samples_per_repeat")
        if not self.max_warmup_ms >= 0:
            raise ValueError("max_warmup_ms must be 0 or more")
        if not 0 <= self.min_warmup_wall_ms < float("inf"):
            raise ValueError("min_warmup_wall_ms must be 0 or more")
        if not 0 < self.warmup_tolerance < 1:
            raise ValueError("warmup_tolerance must be between 0 and 1")


@dataclass(frozen=True)
class FixedWork:
    """The calls each untimed step after sampling makes: peak memory, the profile (operator
    counts and self times) and the leak check. A model of ordinary speed gets the full counts;
    one whose calls are long gets fewer, so that each step costs about the sampling budget at
    most (a 0.5 s call: one call of each, two for the leak check, which needs a call before
    the one it tallies)."""

    memory: int
    profile: int
    growth: int
    call_ms: float
    full: tuple[int, int, int]  # the counts asked for, before the budget cut them

    @property
    def shortened(self) -> str | None:
        """What was cut, for the result's notes; None when nothing was."""
        parts = [
            f"{what} over {n} call{'s' if n > 1 else ''} (not {want})"
            for what, n, want in zip(
                ("peak memory", "the profile", "the leak check"),
                (self.memory, self.profile, self.growth),
                self.full,
                strict=True,
            )
            if n < want
        ]
        if not parts:
            return None
        return (
            f"a call takes {self.call_ms:,.0f} ms: the untimed work was kept within the "
            f"sampling budget: {', '.join(parts)}"
        )


def fixed_work(
    call_ms: float, budget_s: float, memory: int, profile: int, growth: int
) -> FixedWork:
    """The counts of `FixedWork` for calls of `call_ms`: as many as fit in `budget_s`, at
    least one (two for the leak check), at most those asked for."""
    fit = int(budget_s * 1000.0 // call_ms) if call_ms > 0 else max(memory, profile, growth)
    return FixedWork(
        memory=min(max(fit, 1), memory),
        profile=min(max(fit, 1), profile),
        growth=min(max(fit, 2), growth),
        call_ms=call_ms,
        full=(memory, profile, growth),
    )


CUDA_WARMUP_FLOOR_MS = 250.0
"""Warm-up on a GPU lasts at least this long: its clocks rise only under load."""


def for_device(settings: SamplingSettings, device_type: str) -> SamplingSettings:
    """`settings` as they apply on `device_type` (on CUDA, the warm-up's time floor)."""
    if device_type != "cuda" or settings.min_warmup_wall_ms >= CUDA_WARMUP_FLOOR_MS:
        return settings
    return replace(settings, min_warmup_wall_ms=CUDA_WARMUP_FLOOR_MS)


@dataclass(frozen=True)
class WarmupOutcome:
    calls: int
    stable: bool
    times_ms: tuple[float, ...]


@dataclass(frozen=True)
class SamplingOutcome:
    warmup: WarmupOutcome
    blocks_ms: tuple[tuple[float, ...], ...]
    # the profiled blocks taken after the timed ones: (a call's µs, {place: µs per call})
    op_blocks: tuple[OpBlock, ...] = ()

    @property
    def samples_ms(self) -> tuple[float, ...]:
        return tuple(t for block in self.blocks_ms for t in block)

    @property
    def repeat_medians_ms(self) -> tuple[float, ...]:
        return tuple(statistics.median(block) for block in self.blocks_ms)


def warm_up(
    call: Callable[[], Any],
    clock: Clock,
    settings: SamplingSettings,
    progress: Progress = _no_progress,
    now: Callable[[], float] = time.perf_counter,
) -> WarmupOutcome:
    """Call until the median of the last window agrees with the one before it, and for at
    least `min_warmup_wall_ms` of wall time (a GPU raises its clocks only under load: a
    short warm-up would sample it on its way up). Past `min_warmup` calls it gives up after
    `max_warmup_ms` of measured time or the sampling budget, whichever is less: a slow
    model's warm-up costs about its sampling, not several times it."""
    limit_ms = min(settings.max_warmup_ms, settings.budget_s * 1000.0)
    times: list[float] = []
    window = settings.warmup_window
    spent_after_min = 0.0
    floor_s = settings.min_warmup_wall_ms / 1e3
    started = now()
    while len(times) < settings.max_warmup or now() - started < floor_s:
        elapsed = clock.time_call(call)
        times.append(elapsed)
        if len(times) > settings.min_warmup:
            spent_after_min += elapsed
        if now() - started < floor_s:
            continue
        if len(times) >= max(settings.min_warmup, 2 * window):
            last = statistics.median(times[-window:])
            before = statistics.median(times[-2 * window : -window])
            if before > 0 and abs(last - before) / before <= settings.warmup_tolerance:
                return WarmupOutcome(len(times), True, tuple(times))
        if spent_after_min > limit_ms:
            break
        if len(times) % 25 == 0:
            progress(f"warming up ({len(times)} calls, not yet stable)")
    return WarmupOutcome(len(times), False, tuple(times))


def sample_block(
    call: Callable[[], Any],
    clock: Clock,
    *,
    min_samples: int,
    max_samples: int,
    budget_ms: float,
) -> tuple[float, ...]:
    """Time calls until there are `min_samples` and the budget is spent, or `max_samples`."""
    block: list[float] = []
    spent = 0.0
    while len(block) < max_samples and (len(block) < min_samples or spent < budget_ms):
        elapsed = clock.time_call(call)
        block.append(elapsed)
        spent += elapsed
    return tuple(block)


def sample(
    call: Callable[[], Any],
    clock: Clock,
    settings: SamplingSettings,
    progress: Progress = _no_progress,
    *,
    ops: OpBlocks | None = None,
) -> SamplingOutcome:
    """Warm up, then take `settings.repeats` re-warmed blocks within the time budget; then,
    untimed, `settings.op_blocks` profiled blocks from `ops` where it is given."""
    progress("warming up")
    warmup = warm_up(call, clock, settings, progress)
    blocks: list[tuple[float, ...]] = []
    for index in range(settings.repeats):
        progress(f"sampling (repeat {index + 1}/{settings.repeats})")
        blocks.append(_repeat(call, clock, settings))
    profiled: list[OpBlock] = []
    for index in range(settings.op_blocks if ops is not None else 0):
        progress(f"operators' times (block {index + 1}/{settings.op_blocks})")
        profiled.append(_op_block(call, ops, settings))
    return SamplingOutcome(warmup, tuple(blocks), tuple(profiled))


def _op_block(call: Callable[[], Any], ops: OpBlocks | None, settings: SamplingSettings) -> OpBlock:
    """One profiled block, re-warmed as a timed one is."""
    if ops is None:
        raise ValueError("an operators' block was asked for where none can be taken")
    for _ in range(settings.rewarm_calls):
        call()
    return ops()


TIMED = threading.Event()
"""Set while this process times a block: the runner-health monitor reads the GPU's clocks
then only (between compiles a GPU idles at low clocks, which says nothing of the run)."""


def _repeat(call: Callable[[], Any], clock: Clock, settings: SamplingSettings) -> tuple[float, ...]:
    """One repeat: re-warm, then a block with its share (`budget_s / repeats`) of the time."""
    for _ in range(settings.rewarm_calls):
        call()
    TIMED.set()
    try:
        return sample_block(
            call,
            clock,
            min_samples=settings.min_samples_per_repeat,
            max_samples=settings.max_samples_per_repeat,
            budget_ms=settings.budget_s * 1000.0 / settings.repeats,
        )
    finally:
        TIMED.clear()


Command = str  # "block": sample one repeat and hand it over; "ops": one profiled block;
# "finish": stop sampling
Sampler = Callable[..., SamplingOutcome]  # (call, clock, settings, progress, *, ops=None)


def sample_on_demand(
    call: Callable[[], Any],
    clock: Clock,
    settings: SamplingSettings,
    progress: Progress,
    *,
    ready: Callable[[WarmupOutcome, SamplingSettings], None],
    next_command: Callable[[], Command],
    hand_over: Callable[[tuple[float, ...]], None],
    around_block: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    ops: OpBlocks | None = None,
    hand_over_ops: Callable[[OpBlock | None], None] = lambda _: None,
) -> SamplingOutcome:
    """Warm up, say `ready` (with the settings: the driver learns the repeats), then sample
    one re-warmed block per "block" command, each inside `around_block()` (same-job A/B: on
    the CPU the other side times from too).

    Same-job A/B: a driver alternates the blocks of two processes, so each block here is
    half of a pair. A block gets `budget_s / repeats` of time, as in `sample`.
    """
    progress("warming up")
    warmup = warm_up(call, clock, settings, progress)
    ready(warmup, settings)
    blocks: list[tuple[float, ...]] = []
    profiled: list[OpBlock] = []
    while (command := next_command()) != "finish":
        if command == "ops":  # a profiled block (None where this side cannot take one)
            progress(f"operators' times (A/B block {len(profiled) + 1})")
            taken = None
            if ops is not None:
                with around_block():
                    taken = _op_block(call, ops, settings)
                profiled.append(taken)
            hand_over_ops(taken)
            continue
        if command != "block":
            raise ValueError(f"unknown sampling command {command!r}")
        progress(f"sampling (A/B block {len(blocks) + 1})")
        with around_block():
            block = _repeat(call, clock, settings)
        blocks.append(block)
        hand_over(block)
    return SamplingOutcome(warmup, tuple(blocks), tuple(profiled))
