"""Global torch state, set and restored around each measurement, never leaked."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

_primed: set[str] = set()


PRELOAD = ("torch.profiler", "torch.utils.flop_counter")
"""What measuring any model imports besides torch (the exact counters' profiler and FLOP
counter). Torch's compiler (about 2 s of CPU) is left to the variants that compile and to
torchao's: nothing else in a measurement imports it (`measure.counters` sees to that)."""


def preload() -> bool:
    """Import `PRELOAD` now (an A/B worker does, while its driver collects); whether CUDA
    is available."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    return bool(torch.cuda.is_available())


@contextlib.contextmanager
def torch_state(threads: int | None = None) -> Iterator[None]:
    """Restore threads, grad mode, determinism and precision flags however the block ends."""
    saved_threads = torch.get_num_threads()
    saved_grad = torch.is_grad_enabled()
    saved_det = torch.are_deterministic_algorithms_enabled()
    saved_det_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    saved_precision = torch.get_float32_matmul_precision()
    saved_dtype = torch.get_default_dtype()
    saved_cudnn = torch.backends.cudnn.benchmark
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        yield
    finally:
        torch.set_num_threads(saved_threads)
        torch.set_grad_enabled(saved_grad)
        det_now = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        if det_now != (saved_det, saved_det_warn):  # setting it imports inductor: seconds
            torch.use_deterministic_algorithms(saved_det, warn_only=saved_det_warn)
        torch.set_float32_matmul_precision(saved_precision)
        torch.set_default_dtype(saved_dtype)
        torch.backends.cudnn.benchmark = saved_cudnn


def reset_dynamo() -> None:
    """Forget compiled code and counters so one variant's cache cannot flatter the next.
    A process that never imported dynamo has compiled nothing: there is nothing to forget,
    and importing it to reset it would cost an eager-only session seconds."""
    if "torch._dynamo" not in sys.modules:
        return
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


def fresh_compile_cache() -> contextlib.AbstractContextManager[None]:
    """A fresh, temporary inductor (and triton) cache directory, in-memory caches cleared."""
    from torch._inductor import utils

    fresh: Callable[..., contextlib.AbstractContextManager[None]] | None = getattr(
        utils, "fresh_cache", None
    ) or getattr(utils, "fresh_inductor_cache", None)
    if fresh is None:  # pragma: no cover - very old torch
        return contextlib.nullcontext()
    return fresh()


def prime_compiler(device: torch.device) -> None:
    """Compile a trivial function once per process and device.

    The first compile in a process pays seconds of one-time start-up (imports, compiler
    discovery); without priming, that cost would land on whichever variant runs first.
    It compiles in the user's inductor cache, not a fresh one: on the CPU, inductor's
    discovery builds a small program for each vector instruction set it might use (9 s of
    the 11 s of a first compile here), and in a fresh cache every process built them again;
    in the user's cache the next process finds them built. What a variant's cold compile
    measures is unchanged: it compiles in a fresh cache, after this.
    """
    if device.type in _primed:
        return
    x = torch.ones(4, device=device)

    def tiny(t: torch.Tensor) -> Any:
        return (t * 2).relu()

    reset_dynamo()
    torch.compile(tiny)(x)
    reset_dynamo()
    _primed.add(device.type)


def cudagraph_skips() -> int:
    """How many times inductor declined to use CUDA graphs so far (reduce-overhead's point)."""
    from torch._dynamo.utils import counters

    return int(sum(counters["inductor"].get(k, 0) for k in ("cudagraph_skips",)))


def dynamo_counts() -> tuple[int, int, int]:
    """(graph breaks, unique graphs, frames compiled) from dynamo's counters so far."""
    from torch._dynamo.utils import counters

    breaks = sum(counters["graph_break"].values())
    graphs = int(counters["stats"]["unique_graphs"])
    frames = int(counters["frames"]["total"])
    return breaks, graphs, frames
