"""The operators' and kernels' times of a variant's calls, block by block, for verdicts per op.

A block is a few calls under the profiler (as many as fill `op_block_ms`: the blocks together
take `OP_SHARE` of the sampling budget, 31 ms a block at the default 2 s and 8 blocks; from
`OP_CALLS_LEAST` to `OP_CALLS_MOST` calls, sized once from one unprofiled call), each inside a
range of its own: on a CPU each ATen operator's self time (its time less its children's, from the
profiler's raw events, on its own thread), on CUDA each kernel's device time (CUPTI's, through
the profiler; a kernel belongs to the call whose range launched it). A block keeps each
place's median over its calls (and the call's): a call preempted on a busy host moves one
call's figures, not the block's. Blocks are taken apart from the timed ones, after them: a
profiled call is slower than a timed one, and the latency figures never see it.

A place in the call is an operator's (or kernel's) name and its occurrence among the call's
events of that name, in the order they started: `aten::addmm #7` is the seventh addmm of the
call, the same layer's on both sides of a comparison. Generated kernels' names may carry a
hash of their source (`## Call CompiledFxGraph f6q... ##`, a Triton module's), which differs
between two builds of the same graph: such runs of hex or base-32 are written `<hash>`, and
the occurrence tells same-named places apart, so a kernel is matched by its place in the graph.

Where the variant runs the module itself (not compiled, exported or handed to a runtime), one
more profiled call with a range around every submodule's forward says which module each place
ran in (`where`): `aten::addmm #7` ran in `layers.6.fc`.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from perfguard.measure.counters import profiler
from perfguard.measure.sampling import SamplingSettings
from perfguard.records.op_times import OpTimes, kept

OP_SHARE = 1 / 8  # the profiled blocks' calls together fill this share of the sampling budget
OP_CALLS_LEAST, OP_CALLS_MOST = 3, 64  # calls per profiled block
CALL = "perfguard: op call"
MODULE = "perfguard: module "
_HASH = re.compile(
    r"(?<![0-9a-z])(?=[0-9a-z]*\d)(?=[0-9a-z]*[a-z])([0-9a-f]{12,}|[0-9a-z]{24,})(?![0-9a-z])"
)


def canonical(name: str) -> str:
    """A place's name with the hashes of generated code written `<hash>`."""
    return _HASH.sub("<hash>", name)


@dataclass(frozen=True)
class _Event:
    name: str
    start: int
    end: int
    thread: int
    device: bool
    correlation: int
    linked: int


def _raw(prof: Any) -> list[_Event]:
    """The profile's raw events (the profiler's own Python event tree is 10x slower to
    build, and a block's time is spent on the model, not on that)."""
    from torch._C._autograd import DeviceType

    out = []
    for e in prof.kineto_results.events():
        device = e.device_type() != DeviceType.CPU
        start = int(e.start_ns())
        out.append(
            _Event(
                str(e.name()),
                start,
                start + int(e.duration_ns()),
                int(e.start_thread_id()),
                device,
                int(e.correlation_id()),
                int(getattr(e, "linked_correlation_id", lambda: 0)()),
            )
        )
    return out


def _self_times(events: Sequence[_Event]) -> dict[int, float]:
    """Each host event's self time (ns), by its index: its time less its children's, the
    events nested in it on its thread."""
    own: dict[int, float] = {}
    by_thread: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        if not e.device:
            by_thread[e.thread].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (events[i].start, -events[i].end))
        stack: list[int] = []
        for i in indices:
            e = events[i]
            while stack and events[stack[-1]].end <= e.start:
                stack.pop()
            own[i] = float(e.end - e.start)
            if stack:
                own[stack[-1]] -= e.end - e.start
            stack.append(i)
    return own


def _calls(events: Sequence[_Event]) -> list[tuple[int, int]]:
    return sorted((e.start, e.end) for e in events if e.name == CALL and not e.device)


def _which(ranges: Sequence[tuple[int, int]], at: int) -> int | None:
    for index, (start, end) in enumerate(ranges):
        if start <= at <= end:
            return index
    return None


def _places(
    events: Sequence[_Event], on_device: bool
) -> tuple[list[float], list[dict[str, float]], list[dict[str, int]]]:
    """Per call: its time (µs), its places' times (µs) and each place's event index."""
    calls = _calls(events)
    host_start = {e.correlation: e.start for e in events if not e.device}
    times: list[dict[str, float]] = [defaultdict(float) for _ in calls]
    index: list[dict[str, int]] = [{} for _ in calls]
    seen: list[dict[str, int]] = [defaultdict(int) for _ in calls]
    own = {} if on_device else _self_times(events)
    order = sorted(range(len(events)), key=lambda i: events[i].start)
    for i in order:
        e = events[i]
        if on_device:
            if not e.device:
                continue
            launched = host_start.get(e.linked, host_start.get(e.correlation))
            call = None if launched is None else _which(calls, launched)
            us = (e.end - e.start) / 1000.0
        else:
            if e.device or e.name == CALL or e.name.startswith(MODULE):
                continue
            call = _which(calls, e.start)
            us = own.get(i, 0.0) / 1000.0
        if call is None:
            continue
        name = canonical(e.name)
        seen[call][name] += 1
        place = f"{name} #{seen[call][name]}"
        times[call][place] += max(us, 0.0)
        index[call][place] = i
    return [(end - start) / 1000.0 for start, end in calls], times, index


def summary(
    call_us: Sequence[float], times: Sequence[Mapping[str, float]]
) -> tuple[float, dict[str, float]]:
    """A block of calls as it is kept: the call's median time and each place's median over
    the calls (0 in a call it did not run in), the places `kept` keeps."""
    call = statistics.median(call_us)
    places = {place for per_call in times for place in per_call}
    median = {p: statistics.median(per_call.get(p, 0.0) for per_call in times) for p in places}
    return call, kept(median, call)


def op_block_ms(budget_s: float, blocks: int) -> float:
    """How long one profiled block's calls take: `OP_SHARE` of the sampling budget over the
    blocks. The budget a user sets for the timed samples' precision sets theirs too."""
    return 1000.0 * budget_s * OP_SHARE / max(blocks, 1)


class OpProfiler:
    """Takes one variant's op blocks (`block`) and, once, where each place ran (`where`)."""

    def __init__(
        self,
        call: Callable[[], Any],
        device: torch.device,
        module: nn.Module | None = None,
        calls: int | None = None,
        block_ms: float | None = None,
    ) -> None:
        """`module`: the module the call runs as it is (None for a compiled, exported or
        runtime variant: a range around its submodules would change what runs); `calls`
        per block, None: as many as fill `block_ms` (`op_block_ms`; None: the default
        sampling budget's), sized at the first block."""
        self.call, self.device, self.module, self.calls = call, device, module, calls
        if block_ms is None:
            block_ms = op_block_ms(SamplingSettings.budget_s, SamplingSettings.op_blocks)
        self.block_ms = block_ms
        self.clock = "device" if device.type == "cuda" else "host"
        self.failed: str | None = None  # why the profiler could not take a block here

    def _sized(self) -> int:
        """Calls per block: as many as fill `block_ms`, timed from one call."""
        if self.calls is None:
            start = time.perf_counter()
            self.call()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            ms = 1000.0 * (time.perf_counter() - start)
            fill = math.ceil(self.block_ms / ms) if ms > 0 else OP_CALLS_MOST
            self.calls = min(OP_CALLS_MOST, max(OP_CALLS_LEAST, fill))
        return self.calls

    def _profiled(self, calls: int) -> list[_Event]:
        from torch.autograd.profiler import record_function

        with profiler(self.device) as prof:
            for _ in range(calls):
                with record_function(CALL):
                    self.call()
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
        return _raw(prof)

    def block(self) -> tuple[float, dict[str, float]]:
        """One block: a call's time and each place's time per call (µs, medians over the
        block's calls), as a block keeps them (`records.op_times.kept`)."""
        if self.failed is not None:
            return 0.0, {}
        try:
            events = self._profiled(self._sized())
        except Exception as exc:  # another profiler already running, an unprofilable call
            self.failed = f"the operators' times could not be taken: {str(exc).strip()[:200]}"
            return 0.0, {}
        call_us, times, _ = _places(events, self.clock == "device")
        if not call_us:
            return 0.0, {}
        return summary(call_us, times)

    def where(self) -> dict[str, str]:
        """The module each place ran in (one more call, ranges around every submodule);
        empty where the variant does not run its module as it is."""
        if self.module is None:
            return {}
        paths = {id(m): name for name, m in self.module.named_modules() if name}
        if not paths:
            return {}
        with _module_ranges(paths):
            events = self._profiled(1)
        _, _, index = _places(events, self.clock == "device")
        if not index:
            return {}
        host_start = {e.correlation: e.start for e in events if not e.device}
        ranges = sorted(
            (e.start, -e.end, e.name[len(MODULE) :])
            for e in events
            if not e.device and e.name.startswith(MODULE)
        )
        out: dict[str, str] = {}
        for place, i in index[0].items():
            e = events[i]
            at = host_start.get(e.linked, e.start) if e.device else e.start
            inner = [name for start, neg_end, name in ranges if start <= at <= -neg_end]
            if inner:
                out[place] = inner[-1]  # the innermost: it started last
        return out

    def times(self, blocks: Sequence[tuple[float, Mapping[str, float]]]) -> OpTimes | None:
        """The result's record of its blocks (None: none were taken, or one failed)."""
        if not blocks or self.failed is not None or not all(block for _, block in blocks):
            return None
        where = self.where()
        places = {p for _, block in blocks for p in block}
        return OpTimes(
            clock=self.clock,  # type: ignore[arg-type]
            calls=self.calls or OP_CALLS_LEAST,
            call_us=tuple(call for call, _ in blocks),
            blocks=tuple(dict(block) for _, block in blocks),
            where={p: w for p, w in where.items() if p in places},
        )


@contextmanager
def _module_ranges(paths: Mapping[int, str]) -> Iterator[None]:
    """A profiler range around each forward of the modules in `paths` (by id)."""
    from torch.autograd.profiler import record_function
    from torch.nn.modules import module as module_hooks

    open_ranges: list[Any] = []

    def before(module: nn.Module, args: Any) -> None:
        name = paths.get(id(module))
        if name is not None:
            scope = record_function(MODULE + name)
            scope.__enter__()
            open_ranges.append((id(module), scope))

    def after(module: nn.Module, args: Any, output: Any) -> None:
        if open_ranges and open_ranges[-1][0] == id(module):
            open_ranges.pop()[1].__exit__(None, None, None)

    handles = [
        module_hooks.register_module_forward_pre_hook(before),
        module_hooks.register_module_forward_hook(after),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        while open_ranges:  # a forward that raised
            open_ranges.pop()[1].__exit__(None, None, None)
