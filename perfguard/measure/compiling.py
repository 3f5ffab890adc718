"""Compiling a variant before it is timed: the cold compile in a fresh cache, the warm one
after a dynamo reset, and dynamo's figures of the first (graphs, breaks and their reasons;
for a training step, the backward graphs too)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perfguard.measure.compile_cache import CompileCache
from perfguard.measure.counters import backward_graphs, dynamo_breaks, dynamo_graphs
from perfguard.measure.isolation import dynamo_counts, reset_dynamo
from perfguard.measure.sampling import Progress
from perfguard.variants.base import Built


def timed_first_call(call: Callable[[], Any], device: torch.device) -> float:
    """Seconds of a first (compiling) call, synchronized on CUDA."""
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


@dataclass
class Compiled:
    """What compiling a variant gave: cold and warm seconds, dynamo's graph figures."""

    cold_s: float | None = None
    warm_s: float | None = None
    graph_breaks: int | None = None
    graphs: int | None = None
    backward_graphs: int | None = None  # a training step's
    break_reasons: tuple[tuple[str, int], ...] = ()
    frames_before_sampling: int = 0


def compile_variant(
    built: Built, device: torch.device, warm: bool, progress: Progress
) -> tuple[Callable[[], Any], Compiled]:
    """The variant's call, compiled (cold, then again from the warm cache when `warm`), with
    the figures of its compile; an uncompiled variant's call as it is."""
    info = Compiled()
    reset_dynamo()
    call = built.make_call()
    if not built.compiled:
        return call, info
    progress("compiling (cold cache)")
    info.cold_s = timed_first_call(call, device)
    info.graph_breaks, info.break_reasons = dynamo_breaks()
    info.graphs = dynamo_graphs()
    if built.training:
        info.backward_graphs = backward_graphs(info.graphs)
    if warm:
        progress("compiling (warm cache)")
        reset_dynamo()
        call = built.make_call()
        info.warm_s = timed_first_call(call, device)
    info.frames_before_sampling = dynamo_counts()[2]
    return call, info


def compile_cached(
    built: Built,
    device: torch.device,
    cache: CompileCache | None,
    warm: bool,
    progress: Progress,
) -> tuple[Callable[[], Any], Compiled]:
    """`compile_variant`, in the fresh cache the caller opened: cold, or from main's
    artifacts where this side loads them (then no cold figure: `details.build` says
    `compile_cache` hit, with the compile's seconds); main's run writes its cold compile's
    artifacts (`perfguard.measure.compile_cache`)."""
    if cache is None or cache.mode == "cold" or not built.compiled:
        return compile_variant(built, device, warm, progress)
    if cache.mode == "write":
        cache.start()
        call, compiled = compile_variant(built, device, warm, progress)
        built.details["compile_cache"] = "written" if cache.write(device) else "not written"
        return call, compiled
    missed = cache.load(device)
    hit = missed is None
    call, compiled = compile_variant(built, device, warm, progress)
    built.details["compile_cache"] = "hit" if hit else "miss"
    if missed is not None:
        built.details["compile_cache_miss"] = missed
    if hit:  # not a cold compile: the cold figure is main's (its stored baseline's)
        built.details["compile_from_cache_s"] = compiled.cold_s
        compiled.cold_s = None
    return call, compiled
