"""The counted side of `--perfguard-instructions`: a model's cold compile and one warm
forward call, each inside a callgrind region (see `perfguard.measure.callgrind`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from perfguard.measure.callgrind import Regions
from perfguard.measure.isolation import (
    fresh_compile_cache,
    prime_compiler,
    reset_dynamo,
    torch_state,
)
from perfguard.measure.job import Job
from perfguard.measure.runner import resolve_device
from perfguard.variants.registry import build_variant


def _synced(call: Any, device: torch.device) -> None:
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_regions(job: Job, modes: Sequence[str], regions: Regions) -> None:
    """Run the job's model under its variant as the measurer does, counting the asked regions.

    `compile`: the first call on a fresh inductor cache, after the compiler was warmed on a
    trivial function (a compiled variant only). `forward`: one call once the variant is warm.
    Both on one thread (the setting `threads` does not apply), so that the count is the work.
    Raises what building or calling the model raises: the caller reports it.
    """
    spec, settings = job.variant, job.settings
    device = resolve_device(settings.device)
    # one thread: a thread pool's waiting threads spin, and their spinning would be counted
    with torch_state(1):
        built = build_variant(job.model, job.inputs, spec, device, job.kwargs)
        if built.compiled:
            prime_compiler(device)
        cache = fresh_compile_cache() if built.compiled else contextlib.nullcontext()
        with cache:
            reset_dynamo()
            call = built.make_call()
            if built.compiled and "compile" in modes:
                with regions.count("compile"):
                    _synced(call, device)
            else:
                _synced(call, device)
            if "forward" in modes:
                _synced(call, device)  # warm: lazy initialisation stays out of the count
                with regions.count("forward"):
                    _synced(call, device)
        if built.compiled:
            reset_dynamo()
