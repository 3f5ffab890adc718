"""Exact counters of one variant, counted in calls of their own after the timed samples.

- graphs, graph breaks (with dynamo's reason for each) and recompiles: dynamo's counters,
  read after the compiling call and after sampling (the runner passes them in);
- the ATen operators one call dispatches, by name: the profiler over `CALLS` calls (the
  profiler observes; it does not enter the dispatcher as a mode would, so a compiled call
  runs its compiled code and no guard fails), divided by the number of calls;
- FLOPs of one call: `torch.utils.flop_counter.FlopCounterMode` over the variant's module
  uncompiled (a dispatch mode, which dynamo would see: compiled code never runs under it);
- parameter and buffer bytes of the module as measured;
- the bytes a warm call leaves allocated (a leak: outputs kept in a list, a cache that grows),
  from the profiler's allocation events;
- on CUDA, the kernels and the CUDA graphs one call launches, from the profiler's runtime
  events.
The same profiled calls give each operator's host self time per call (a result's `profile`,
which says where a regression's time went) and, when asked, their Chrome trace. On CUDA they
also give the second clock: the device time of one call's kernels (`device_us`, the sum of
their durations as CUPTI measured them, so the host's launch overhead is not in it) and that
time by kernel name (`kernels_us`). A host-overhead change moves the latency and leaves the
device time; a kernel change moves both.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perfguard.records import Counters

CALLS = 3  # calls profiled; every count must divide by it (deterministic code)
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
GRAPH_LAUNCHES = ("cudaGraphLaunch",)


def dynamo_breaks() -> tuple[int, tuple[tuple[str, int], ...]]:
    """Graph breaks so far, and how often each reason occurred."""
    from torch._dynamo.utils import counters

    reasons = tuple((str(reason), int(n)) for reason, n in counters["graph_break"].items())
    return sum(n for _, n in reasons), reasons


def dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def backward_graphs(forward: int) -> int:
    """Backward graphs compiled since the counters were cleared: inductor compiles one graph
    per forward graph and one per backward, so those past the forward ones (a cold compile,
    in a fresh cache: every graph is a miss or a bypass)."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    compiled = sum(int(inductor[k]) for k in ("fxgraph_cache_miss", "fxgraph_cache_bypass"))
    return max(compiled - forward, 0)


PROFILE_TOP = 30  # operators (and kernels) kept in a result's profile summary, by self time


def device_work(events: Iterable[Any], calls: int) -> tuple[float, dict[str, float]]:
    """Device time of one call (µs) and the `PROFILE_TOP` kernels by their time per call,
    from the profiler's events: those that ran on the device (kernels, copies, sets), each
    counted for its own duration."""
    from torch._C._autograd import DeviceType

    by_name: dict[str, float] = {}
    for event in events:
        if getattr(event, "device_type", None) == DeviceType.CUDA:
            name = str(event.name)
            by_name[name] = by_name.get(name, 0.0) + float(event.device_time_total)
    total = sum(by_name.values()) / calls
    top = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:PROFILE_TOP]
    return total, {name: us / calls for name, us in top if us > 0}


def let_go_of_cupti(cuda_version: str | None = None) -> bool:
    """Ask the profiler to detach from CUDA (CUPTI) when a profile ends; whether it will.

    Left attached, CUPTI's callbacks slow every later kernel launch in the process: items
    counted after the first would read slower, and results would depend on the items'
    order. Kineto detaches when TEARDOWN_CUPTI=1. Before CUDA 12.6 that crashed once CUDA
    graphs were used, and there torch sets it to 0 itself; a value set by the user stands."""
    if "TEARDOWN_CUPTI" in os.environ:
        return os.environ["TEARDOWN_CUPTI"] == "1"
    version = cuda_version if cuda_version is not None else torch.version.cuda
    try:
        major, minor = (int(part) for part in str(version).split(".")[:2])
    except ValueError:  # no CUDA, or a version we cannot read: leave the default alone
        return False
    if (major, minor) < (12, 6):
        return False
    os.environ["TEARDOWN_CUPTI"] = "1"
    return True


def profiler(device: torch.device, memory: bool = False) -> Any:
    """A profile of calls on `device` (with allocations when `memory`): on CUDA,
    torch.profiler's, of the host and the device, asked to detach from CUDA when it is done
    (it also keeps CUPTI safe around CUDA graphs); elsewhere torch.autograd's profiler, which
    torch.profiler wraps: the wrapper's start asks `hasattr(torch, "_inductor")`, and that
    imports the compiler (dynamo, inductor, sympy: about 2 s of CPU) in a process that may
    compile nothing."""
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        let_go_of_cupti()
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        return profile(activities=activities, profile_memory=memory)
    from torch.autograd.profiler import profile as host_profile

    return host_profile(use_kineto=True, profile_memory=memory)


def _events(prof: Any) -> Any:
    """A finished profile's events (torch.profiler's or torch.autograd's)."""
    return prof.events() if hasattr(prof, "events") else prof.function_events


def profile_counts(
    call: Callable[[], Any],
    device: torch.device,
    calls: int = CALLS,
    trace: Path | None = None,
) -> dict[str, Any]:
    """Per call: ATen operators by name, their host self time, and on CUDA kernel and graph
    launches and the kernels' device time. `trace`: also write the Chrome trace of these
    calls there."""
    with profiler(device) as prof:
        for _ in range(calls):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    events = _events(prof)
    names: Counter[str] = Counter(e.name for e in events)
    ops = {name: n // calls for name, n in names.items() if name.startswith("aten::")}
    self_us: dict[str, float] = {}
    for avg in prof.key_averages():
        # host time only: on CUDA the kernels' time is the device's, kept apart below
        own = float(avg.self_cpu_time_total)
        if own > 0:
            self_us[str(avg.key)] = own / calls
    top = dict(sorted(self_us.items(), key=lambda kv: -kv[1])[:PROFILE_TOP])
    out: dict[str, Any] = {
        "ops": {k: v for k, v in ops.items() if v > 0},
        "profile": {"calls": calls, "self_us": {k: round(v, 3) for k, v in top.items()}},
    }
    if device.type == "cuda":
        out["kernel_launches"] = sum(names[n] for n in KERNEL_LAUNCHES) // calls
        out["cudagraph_launches"] = sum(names[n] for n in GRAPH_LAUNCHES) // calls
        device_us, kernels = device_work(events, calls)
        out["profile"]["device_us"] = round(device_us, 3)
        out["profile"]["kernels_us"] = {k: round(v, 3) for k, v in kernels.items()}
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
        out["profile"]["trace"] = trace.name
    return out


GROWTH_CALLS = 5  # warm calls whose allocations and frees are tallied
_FIRST = "perfguard: first tallied call"


def retained_per_call(
    call: Callable[[], Any], device: torch.device, calls: int = GROWTH_CALLS
) -> int:
    """Bytes a warm call leaves allocated, on the host and the device, per call, over
    `calls` calls (at least two), counted from the end of the first call to the end of the last.
    Exact, whatever the allocator caches: a model that keeps nothing between calls gives 0,
    one that appends its outputs to a list gives their size.

    The host's part from the profiler's memory events. From the end of the first call, not
    from the start: what a call replaces each time (a training step's gradients, freed by the
    next step's zero_grad) was allocated before the profile began, and the profiler does not
    see such a block freed; counted from the start, it would read as one call's leak.

    The device's part from the CUDA allocator's count of live bytes at the end of the first
    and the last call: on an H200 the profiler's device memory events left out the frees of
    a training step's weight gradients (allocated in the backward pass's own thread), and
    read 1.5 MB a step of leak in an MLP that keeps nothing."""
    from torch.autograd.profiler import record_function

    live: list[int] = []
    with profiler(device, memory=True) as prof:
        for i in range(max(calls, 2)):
            with record_function(_FIRST if i == 0 else "perfguard: tallied call"):
                call()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                live.append(torch.cuda.memory_allocated(device))
    events = _events(prof)
    first_end = max(e.time_range.end for e in events if e.name == _FIRST)
    host = sum(int(e.self_cpu_memory_usage) for e in events if e.time_range.start > first_end)
    on_device = live[-1] - live[0] if live else 0
    return max(host + on_device, 0) // (max(calls, 2) - 1)


@contextlib.contextmanager
def _compiler_left_unloaded() -> Iterator[None]:
    """Let the FLOP counter's dispatch mode run without importing torch's compiler.

    torch wraps each dispatch mode's `__torch_dispatch__` so that dynamo never traces it,
    and the wrapper imports dynamo (with inductor and sympy: about 2 s of CPU, in every
    process that measures) at the mode's first call, to build that guard. In a process that
    has not imported dynamo nothing is being compiled, so nothing can trace the mode: for
    the counted call the wrapper is told its guard is the mode's own function, and told
    nothing afterwards, so that a later compile in the process guards the mode as torch
    does. Where torch has no such wrapper, nothing is changed."""
    from torch.utils import flop_counter

    mode = getattr(flop_counter, "_FlopCounterMode", flop_counter.FlopCounterMode)
    raw = getattr(mode.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if raw is None or "torch._dynamo" in sys.modules or hasattr(raw, _GUARD):
        yield
        return
    setattr(raw, _GUARD, raw)
    try:
        yield
    finally:
        delattr(raw, _GUARD)


_GUARD = "__dynamo_disable"  # where torch._compile._disable_dynamo keeps the guarded function


def flops_of(eager_call: Callable[[], Any]) -> int | None:
    """FLOPs of one uncompiled call; None when the counter cannot follow it."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with _compiler_left_unloaded(), FlopCounterMode(display=False) as counter:
            eager_call()
    except Exception:  # an op the counter cannot follow: no figure rather than a wrong one
        return None
    return int(counter.get_total_flops())


def tensor_bytes(tensors: Sequence[torch.Tensor]) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def count(
    call: Callable[[], Any],
    module: nn.Module | None,
    eager_call: Callable[[], Any] | None,
    device: torch.device,
    compiled: Mapping[str, Any] | None = None,
    trace: Path | None = None,
    calls: int = CALLS,
    growth_calls: int = GROWTH_CALLS,
) -> tuple[Counters, dict[str, Any]]:
    """The counters of a built variant, and its profile summary (self time per operator,
    the trace's file name): `call` as timed, `module` and `eager_call` uncompiled.
    `compiled`: dynamo's figures the runner read (graphs, graph_breaks, break_reasons,
    recompiles), for a compiled variant. `calls` and `growth_calls`: how many calls the
    profile and the leak check make (fewer for a slow model: `sampling.fixed_work`)."""
    profiled = profile_counts(call, device, calls=calls, trace=trace)
    parameters = list(module.parameters()) if module is not None else []
    buffers = list(module.buffers()) if module is not None else []
    counters = Counters(
        **dict(compiled or {}),
        ops=tuple(profiled["ops"].items()),
        flops=flops_of(eager_call) if eager_call is not None else None,
        param_bytes=tensor_bytes(parameters) if module is not None else None,
        buffer_bytes=tensor_bytes(buffers) if module is not None else None,
        kernel_launches=profiled.get("kernel_launches"),
        cudagraph_launches=profiled.get("cudagraph_launches"),
        memory_growth_bytes_per_call=retained_per_call(call, device, growth_calls),
    )
    return counters, profiled["profile"]
