"""A step across ranks, measured like one call: `perfguard.distributed(build, world_size=N)`.

perfguard starts the ranks (one process each, `torch.distributed` initialised for them: gloo
on a CPU, NCCL on GPUs, one GPU a rank), and each rank calls `build(rank, world_size)`, which
returns the step to time there (the user wraps their model in DDP or FSDP inside it). The
ranks stay up for the whole item and wait for the measuring process's word:

- a step: every rank waits at a barrier (outside the timed region), then times its step, on
  CUDA up to a device synchronize. The sample is the slowest rank's time: what the job waits
  for, so that p50, p95 and p99 mean what they mean for one process. Each rank's own time is
  kept for the ranks' imbalance (slowest over fastest, per step);
- the references: each rank builds its step twice from the same seed and takes the first
  step of each; rank 0's two outputs are judged as eager's call against its reference (what
  the step itself changes between two identical runs, an all-reduce's summation order among
  them), and an output holding NaN or Inf is an error;
- after sampling, untimed: each rank's peak memory (the largest rank's is the metric), and
  five profiled steps per rank: the share of the step spent in collectives (the profiler's
  communication events: gloo's and NCCL's work, c10d's calls), and the operators' self time
  of the slowest rank, which the report's "why" reads as it reads one process's.

The measuring process drives the ranks through the usual sampler (a block of steps, warm-up
first), so same-job A/B interleaves two trees' rank groups block by block, only one group
running at a time. A rank that raises, exits or hangs past the item's time limit is an error
of the item naming the rank; every rank process is ended when the item ends, however it
ends (and each rank follows its parent: a killed session leaves none behind).
"""

from __future__ import annotations

import math
import os
import pickle
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard.measure.job import MeasureSettings
from perfguard.measure.ranks import DistributedError, World
from perfguard.measure.sampling import Progress, Sampler, SamplingOutcome, sample
from perfguard.records import Details, Metrics, VariantResult
from perfguard.records.ranks import RankFigures

BACKENDS = ("gloo", "nccl")


@dataclass(frozen=True)
class DistributedJob:
    """What to measure: the step `build(rank, world_size)` returns, on `world_size` ranks."""

    build: Callable[[int, int], Callable[[], Any]]
    world_size: int
    backend: str | None
    settings: MeasureSettings
    test: str = ""
    variant: str = "eager"
    seed: int = 0  # every rank's, before each of its builds

    @classmethod
    def of(
        cls,
        build: Any,
        world_size: Any,
        backend: Any,
        settings: MeasureSettings,
        *,
        test: str = "",
        variant: str = "eager",
        seed: int = 0,
        caller: str = "perfguard.distributed()",
    ) -> DistributedJob:
        """The job, or TypeError naming what is wrong."""
        if not callable(build):
            raise TypeError(f"{caller}: build must be a function (rank, world_size) -> step")
        try:
            pickle.dumps(build)
        except Exception:  # a lambda, a closure, a local function: no rank can load it
            raise TypeError(
                f"{caller}: build must be a function at the top level of a module (each "
                f"rank's process loads it by name), got {build!r}"
            ) from None
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise TypeError(
                f"{caller}: world_size must be a whole number of ranks, got {world_size!r}"
            )
        if backend is not None and backend not in BACKENDS:
            raise TypeError(f"{caller}: backend must be one of {BACKENDS} or None, got {backend!r}")
        return cls(build, world_size, backend, settings, test, variant, seed)

    @property
    def label(self) -> str:
        return self.test or getattr(self.build, "__name__", "distributed")


def rank_threads(job: DistributedJob, device_type: str) -> int | None:
    """Each rank's torch threads: as the settings say, else on a CPU the cores shared out
    (torch would give every rank all of them: the ranks would fight for the cores and the
    slowest rank would be whichever lost); on CUDA, torch's own choice."""
    if job.settings.threads or device_type != "cpu":
        return job.settings.threads
    return max(1, (os.cpu_count() or 1) // job.world_size)


def unhostable(world_size: int, backend: str, device_type: str) -> str | None:
    """Why this machine cannot host the world (a skip's reason), or None."""
    if backend == "nccl":
        import torch

        if device_type != "cuda" or not torch.cuda.is_available():
            return "backend nccl needs CUDA: this item runs on the CPU (use gloo, or a GPU)"
        gpus = torch.cuda.device_count()
        if world_size > gpus:
            return (
                f"world_size {world_size} needs {world_size} GPUs (one a rank); this machine "
                f"has {gpus}"
            )
        return None
    cores = os.cpu_count() or 1
    if world_size > cores:
        return f"world_size {world_size} needs a CPU core a rank; this machine has {cores}"
    return None


class WorldClock:
    """The time of a step: the slowest rank's, as each rank timed its own. Each step it
    timed is kept with every rank's time (`timed`): the warm-up's and the blocks', not the
    re-warm steps between blocks, which no clock times."""

    name = "ranks_slowest"

    def __init__(self, world: World) -> None:
        self.world = world
        self.timed: list[tuple[float, ...]] = []

    def time_call(self, fn: Callable[[], Any]) -> float:
        fn()
        self.timed.append(self.world.last)
        return max(self.world.last)


def measure_distributed(
    job: DistributedJob,
    *,
    progress: Progress | None = None,
    sampler: Sampler = sample,
    turn: Callable[[], None] | None = None,
    left: Callable[[], float | None] = lambda: None,
    recorded: Callable[[dict[str, set[int]]], None] | None = None,
    record_root: Path | None = None,
) -> VariantResult:
    """Measure `job` (see the module's docstring); never raises for a rank's failure: it
    becomes the result's error, naming the rank. `record_root`: the ranks record what of
    that repository they run, from loading `build` through the build and its first steps,
    and hand it to `recorded` (repository paths and their lines) before anything is timed."""
    say = progress or (lambda _message: None)
    item: dict[str, Any] = {"test": job.label, "variant": job.variant, "workload": "distributed"}
    if job.variant != "eager":
        why = "a distributed step is measured as its build makes it: variant eager only"
        return VariantResult(**item, status="skipped", error=why)
    from perfguard.measure.runner import resolve_device

    device = resolve_device(job.settings.device)
    backend = job.backend or ("nccl" if device.type == "cuda" else "gloo")
    reason = unhostable(job.world_size, backend, device.type)
    if reason is not None:
        return VariantResult(**item, status="skipped", error=reason)
    world: World | None = None
    try:
        say(f"starting {job.world_size} rank(s) ({backend})")
        world = World.start(
            job.build, job.world_size, backend, device.type,
            seed=job.seed, threads=rank_threads(job, device.type), left=left,
            record_root=None if record_root is None or recorded is None else str(record_root),
        )  # fmt: skip
        say("each rank builds its step (twice: the reference)")
        first = world.ask(("build",), "the build and the first steps")
        if record_root is not None and recorded is not None:
            ran: dict[str, set[int]] = {}
            for answer in world.ask(("reach",), "what the ranks ran"):
                for path, lines in (answer or {}).items():
                    ran.setdefault(path, set()).update(lines)
            recorded(ran)
        if turn is not None:
            say("waiting for its turn")
            turn()
        clock = WorldClock(world)
        outcome = sampler(world.step, clock, job.settings.sampling, say)
        say("peak memory and the collectives")
        memory = world.ask(("memory",), "the memory readings")
        profiles = world.ask(("profile",), "the profiled step")
        # each rank's times of the steps that are the samples: the last the clock timed
        sampled = clock.timed[len(clock.timed) - len(outcome.samples_ms) :]
        return _result(
            job, item, backend, device.type, sampled, outcome, first[0], memory, profiles
        )
    except DistributedError as exc:
        if world is not None:
            world.close(patience=0.0)
        return VariantResult(**item, status="error", error=str(exc))
    finally:
        if world is not None:
            world.close()


def _result(
    job: DistributedJob,
    item: dict[str, Any],
    backend: str,
    device_type: str,
    sampled: Sequence[tuple[float, ...]],
    outcome: SamplingOutcome,
    outputs: Any,
    memory: Sequence[int],
    profiles: Sequence[dict[str, Any]],
) -> VariantResult:
    from perfguard.stats.summary import summarize

    samples = outcome.samples_ms
    if not samples:
        return VariantResult(**item, status="error", error="no step was timed")
    reference, again = outputs
    check, figures = _drift(reference, again)
    per_rank = list(zip(*sampled, strict=True)) if sampled else []
    rank_p50 = [statistics.median(times) for times in per_rank]
    imbalance = [max(s) / min(s) for s in sampled if min(s) > 0]
    slowest = max(range(len(profiles)), key=lambda r: profiles[r]["step_us"]) if profiles else 0
    shares = [p["collective_share"] for p in profiles]
    latency = summarize(samples).metric_fields()
    p50 = latency.get("latency_p50_ms")
    details = Details(
        device=f"{device_type} x{job.world_size}",
        clock=f"{WorldClock.name} ({'cuda' if device_type == 'cuda' else 'perf_counter'})",
        memory_method="cuda_max_allocated" if device_type == "cuda" else "rss_peak",
        warmup_calls=outcome.warmup.calls,
        warmup_stable=outcome.warmup.stable,
        repeats=len(outcome.blocks_ms),
        profile=profiles[slowest]["profile"] if profiles else None,
        build=RankFigures(
            world_size=job.world_size,
            backend=backend,
            rank_p50_ms=tuple(rank_p50),
            imbalance_p50=statistics.median(imbalance) if imbalance else None,
            imbalance_max=max(imbalance) if imbalance else None,
            peak_memory_bytes_per_rank=tuple(memory),
            collective_share=tuple(shares),
            slowest_rank=slowest,
        ).to_json(),
    )
    metrics = Metrics(
        **latency,
        throughput_per_s=1000.0 / p50 if p50 else None,
        peak_memory_bytes=max(memory) if memory else None,
        drift_max_abs=figures[0],
        drift_max_rel=figures[1],
        drift_cosine=figures[2],
    )
    return VariantResult(
        **item,
        status="ok",
        metrics=metrics,
        samples_ms=samples,
        repeats_ms=outcome.repeat_medians_ms,
        block_sizes=tuple(len(b) for b in outcome.blocks_ms),
        drift_check=check,
        details=details,
    )


def _drift(reference: Any, again: Any) -> tuple[Any, tuple[float, float, float]]:
    """Rank 0's second first step against its first, as eager against its reference."""
    import numpy as np

    from perfguard.records import DriftCheck

    ref = np.asarray(reference, dtype=np.float64)
    out = np.asarray(again, dtype=np.float64)
    if ref.shape != out.shape or ref.size == 0:
        check = DriftCheck(
            tolerance_class="exact",
            passed=False,
            error=math.inf,
            eager_error=0.0,
            allowed=0.0,
            reference="fp32",
        )
        return check, (math.inf, math.inf, 0.0)
    diff = np.abs(out - ref)
    rms = float(np.sqrt(np.mean((out - ref) ** 2)))
    scale = float(np.sqrt(np.mean(ref**2))) or 1.0
    max_abs = float(diff.max())
    max_rel = float((diff / np.maximum(np.abs(ref), 1e-12)).max())
    norms = float(np.linalg.norm(ref) * np.linalg.norm(out))
    cosine = float(np.dot(ref, out) / norms) if norms else 1.0
    allowed = 1e-6 * scale  # what reordering a sum of float32 moves, relative to the size
    check = DriftCheck(
        tolerance_class="exact",
        passed=rms <= allowed,
        error=rms,
        eager_error=0.0,
        allowed=allowed,
        reference="fp32",
    )
    return check, (max_abs, max_rel, cosine)


# --- the rank's side: a process of its own --------------------------------------------------
