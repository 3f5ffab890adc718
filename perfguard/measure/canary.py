"""Canaries: calls made slower by a known amount, where a regression would act.

`perfguard calibrate` asks how small a slowdown this runner catches. It cannot edit the
user's model, so one side's calls are made slower inside the timed region, by a delay sized to
a share of the item's own call time:

- on CUDA, where calls are timed on the device (CUDA events), a device delay: a kernel that
  spins for a number of GPU cycles (`torch.cuda._sleep`), enqueued on the call's stream after
  its work, so the call's device time grows as a slower kernel's would. The cycles per
  millisecond are measured once per device (`device_cycles_per_ms`);
- elsewhere (the CPU, or a call timed on the host), a host delay: the calling thread spins on
  the monotonic clock until the delay has passed (sleeping would give the core away and be
  late by the scheduler's tick), so the call's host time grows as slower Python or a slower
  CPU kernel would.

What a canary proves: that a slowdown of that size, where it acts, is measured and called by
the same statistics a pull request's check uses, on this runner, today. What it does not: that
every kind of regression is caught alike. A change that adds a synchronization, moves work
between host and device, or slows only the tails acts elsewhere than a delay at the end of the
call does.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

Delay = Callable[[float], None]
"""Make the current call `ms` milliseconds slower."""


def host_delay(ms: float) -> None:
    """Spin on the monotonic clock for `ms` milliseconds (no sleep: see the module)."""
    if ms <= 0:
        return
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


@functools.cache
def device_cycles_per_ms(index: int) -> float:
    """GPU cycles `torch.cuda._sleep` spins per millisecond on device `index`, measured once
    with CUDA events (the median of five spins of about 2 ms each)."""
    import torch

    with torch.cuda.device(index):
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # the first launch loads the kernel
        torch.cuda.synchronize()
        rates = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            rates.append(cycles / max(float(start.elapsed_time(end)), 1e-6))
    rates.sort()
    return float(rates[len(rates) // 2])


def device_delay(index: int) -> Delay:
    """A delay on device `index`'s current stream (see the module)."""
    import torch

    rate = device_cycles_per_ms(index)

    def delay(ms: float) -> None:
        if ms > 0:
            torch.cuda._sleep(max(int(ms * rate), 1))

    return delay


def delay_for(clock: Any) -> Delay:
    """The delay that acts where `clock` times: the device for a CUDA-event clock, else the
    host."""
    device = getattr(clock, "device", None)
    if str(getattr(clock, "name", "")).startswith("cuda_event") and device is not None:
        return device_delay(device.index or 0)
    return host_delay


def slowed(
    call: Callable[[], Any], delay: Delay, slower_ms: Callable[[], float]
) -> Callable[[], Any]:
    """`call`, each time followed by `delay(slower_ms())` inside the same timed call."""

    def run() -> Any:
        out = call()
        ms = slower_ms()
        if ms > 0:
            delay(ms)
        return out

    return run
