"""Clocks that time one call of a callable.

A clock is injectable so that tests can drive the real sampling logic with a
fake one. Every clock returns milliseconds of the *device* work for the call:
the CUDA clock records events on the current stream and synchronizes before
reading them; the host clock is only used where the call is synchronous.

What one sample is: one call as the user's code makes it. It includes Python dispatch,
dynamo's guard checks and the kernel launches (on CUDA the events bracket the launches on the
stream, so host overhead shows whenever the GPU waits for it), and it runs with a hot L2
cache, since the previous call has just run. That is the latency a serving loop sees.
`triton.testing.do_bench` instead flushes L2 before each call; `flush_l2` (the option
`--perfguard-flush-l2`) does the same here: it zeroes a buffer twice the size of L2 and waits
for that to finish before the start event. Waiting matters: were the call dispatched while
the flush runs, its launches would hide behind the flush, and a launch-bound call would read
faster cold than hot. The buffer is freed before memory is measured (`release`), so that it
is in no variant's peak.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol


class Clock(Protocol):
    """Times one call; returns the elapsed milliseconds."""

    name: str

    def time_call(self, fn: Callable[[], Any]) -> float: ...


class HostClock:
    """`perf_counter_ns` around a call that has finished when it returns (CPU work, ORT)."""

    name = "perf_counter_ns"

    def time_call(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - start) / 1e6


class CudaEventClock:
    """CUDA events on the current stream around the call, synchronized before reading.

    The host clock is never read for GPU work: kernels launch asynchronously, so
    the host would time the launch, not the work.
    """

    name = "cuda_event"

    def __init__(self, device: Any, *, flush_l2: bool = False) -> None:
        import torch

        self._torch = torch
        self._device = device
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._scratch: Any = None
        self._flush_bytes = 0
        if flush_l2:
            l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
            self._flush_bytes = 2 * l2 if l2 > 0 else 256 * 2**20  # do_bench's 256 MiB
            self.name = "cuda_event+l2_flush"

    @property
    def device(self) -> Any:
        """The CUDA device it times on (a `torch.device`)."""
        return self._torch.device(self._device)

    def time_call(self, fn: Callable[[], Any]) -> float:
        torch = self._torch
        stream = torch.cuda.current_stream(self._device)
        if self._flush_bytes:
            if self._scratch is None:
                self._scratch = torch.empty(
                    self._flush_bytes, dtype=torch.int8, device=self._device
                )
            self._scratch.zero_()  # evicts L2
            stream.synchronize()  # and is done before the call is dispatched: never timed
        self._start.record(stream)
        fn()
        self._end.record(stream)
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end))

    def release(self) -> None:
        """Free the flush buffer (the next timed call makes it again)."""
        self._scratch = None


class FakeClock:
    """A scripted clock for tests: calls `fn` and returns the next duration from a script.

    `durations` is any iterable of milliseconds; `noise` adds seeded Gaussian noise
    (as a fraction of each duration) so tests can assert exact outcomes on noisy data.
    """

    name = "fake"

    def __init__(self, durations: Iterable[float], *, noise: float = 0.0, seed: int = 0) -> None:
        self._durations: Iterator[float] = iter(durations)
        self._noise = noise
        self._rng = random.Random(seed)
        self.calls = 0

    def time_call(self, fn: Callable[[], Any]) -> float:
        fn()
        self.calls += 1
        try:
            base = next(self._durations)
        except StopIteration:
            raise RuntimeError("FakeClock ran out of scripted durations") from None
        if self._noise:
            base *= 1.0 + self._rng.gauss(0.0, self._noise)
        return max(base, 0.0)
