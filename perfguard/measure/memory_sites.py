"""Where the memory went: the bytes live at one call's peak, grouped by allocation site.

A site is the innermost frame of the call's stack outside torch and perfguard (the user's
code, or Inductor's generated code of a compiled variant) with the operator that allocated
beside it. Recorded on one extra, untimed call, only where a memory verdict stands (the
pipeline asks for it: `MeasureSettings.record_sites`):

- on CUDA, with the caching allocator's history (`torch.cuda.memory._record_memory_history`
  with Python stacks): each block's frames carry their line; the snapshot is written as a
  pickle that pytorch.org/memory_viz opens;
- on the CPU, with the profiler's memory events (`profile_memory=True, with_stack=True`):
  each allocation and free with the stack of Python calls and operators around it. The
  profiler names a Python frame by its function's first line, so on the CPU a site is the
  function and the operator, not the statement; sizes are exact (the allocator's bytes).

Either way the allocations and frees are replayed in order to the moment the total was
highest; what is live then is grouped by site. What the call found allocated (the weights,
the inputs, caches) is one site of its own, `BEFORE`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from perfguard.records.sites import BEFORE, KEPT, Place, Site

FRAMES = 4  # frames kept above a site
OUTSIDE = (
    "torch/",
    "perfguard/",
    "<built-in",
    "nn.Module: ",
    "contextlib.py",
    "pluggy/",
    "_pytest/",
)


def callers(frames: Sequence[str]) -> tuple[str, ...]:
    """The frames above a site that say something to its reader: the user's code and the
    modules it ran in, not torch's or perfguard's machinery (at most `FRAMES`)."""
    kept = [f for f in frames if f.startswith("nn.Module: ") or user_frame([f]) == 0]
    return tuple(kept[:FRAMES])


GENERATED = re.compile(r"/[a-z0-9]{2}/c[a-z0-9]{40,}\.py\(")
"""A module inductor wrote (its cache's `xx/c<hash>.py`): torch's code, in a temporary
folder, named anew by each compile; the user's frame is further out."""


def user_frame(frames: Sequence[str]) -> int | None:
    """The index of the innermost frame (frames innermost first) outside torch, perfguard,
    inductor's generated code and the interpreter's machinery; None when every frame is
    theirs."""
    for i, frame in enumerate(frames):
        name = frame.replace("\\", "/")
        theirs = any(part in name for part in OUTSIDE) or GENERATED.search(name)
        if not theirs and not name.startswith("<"):
            return i
    return None


Recorded = tuple[list[Site], list[Site]]
"""(the sites live at the call's peak, the sites of blocks the call left allocated)."""


def record(call: Callable[[], Any], device: Any, snapshot: Path | None = None) -> Recorded:
    """The sites live at the peak of one `call()` on `device`, and those of the blocks it
    allocated and left allocated (a leak's); on CUDA the allocator's snapshot is also
    written to `snapshot` (a pickle for memory_viz) when given."""
    if getattr(device, "type", "cpu") == "cuda":
        return _record_cuda(call, device, snapshot)
    return _record_cpu(call)


def _record_cpu(call: Callable[[], Any]) -> Recorded:
    # torch.autograd's profiler, which torch.profiler wraps: the wrapper's start imports the
    # compiler (2-3 s of CPU) in a process that may compile nothing (`counters.profiler`)
    from torch._C._profiler import _EventType
    from torch.autograd.profiler import profile

    with profile(use_kineto=True, profile_memory=True, with_stack=True) as p:
        call()
    tree = p.kineto_results.experimental_event_tree()
    events = sorted(
        (
            n
            for n in _walk(tree)
            if n.tag == _EventType.Allocation and n.extra_fields.device.type == "cpu"
        ),
        key=lambda n: n.start_time_ns,
    )
    if not events:
        return [], []
    first = events[0].extra_fields
    steps = (
        (
            int(n.extra_fields.ptr),
            (int(n.extra_fields.alloc_size), *_cpu_site(n), "")
            if n.extra_fields.alloc_size > 0
            else None,
            int(n.extra_fields.total_allocated),  # the allocator's own total
        )
        for n in events
    )
    return _replay(steps, int(first.total_allocated - first.alloc_size))


Block = tuple[int, str, str, tuple[str, ...], str]
"""A live block: (bytes, where, op, frames above, statement)."""


def _replay(steps: Iterable[tuple[int, Block | None, int]], before: int) -> Recorded:
    """Allocations and frees in order, each (address, the block allocated there or None
    for a free, the total allocated after it), replayed: the sites live when the total was
    highest, and those still live at the end."""
    live: dict[int, Block] = {}
    peak, at_peak = before, dict(live)
    for addr, block, total in steps:
        if block is not None:
            live[addr] = block
        else:
            live.pop(addr, None)
        if total > peak:
            peak, at_peak = total, dict(live)
    return _with_before(grouped(at_peak.values()), before), grouped(live.values())


def grouped(live: Iterable[tuple[int, str, str, tuple[str, ...], str]]) -> list[Site]:
    """(bytes, where, op, frames above, statement) of each live block -> sites, largest
    first."""
    sites: dict[tuple[str, str, str], list[Any]] = {}
    for size, where, op, above, code in live:
        entry = sites.setdefault((where, op, code), [0, 0, above])
        entry[0] += size
        entry[1] += 1
    out = [
        Site(Place.parse(w), o, int(b), n, tuple(a), c) for (w, o, c), (b, n, a) in sites.items()
    ]
    return sorted(out, key=lambda s: (-s.bytes, s.where, s.op))[:KEPT]


def _with_before(sites: list[Site], before: int) -> list[Site]:
    if before > 0:
        sites = [*sites, Site(Place(BEFORE), "", before, 0)]
    return sorted(sites, key=lambda s: (-s.bytes, s.where, s.op))[:KEPT]


def _walk(nodes: Iterable[Any]) -> Iterator[Any]:
    for node in nodes:
        yield node
        yield from _walk(node.children)


def _cpu_site(node: Any) -> tuple[str, str, tuple[str, ...]]:
    """(where, op, frames above) of one profiler allocation event: its Python frames come
    from the PyCall nodes above it, the operator from the outermost op below the frame."""
    from torch._C._profiler import _EventType

    frames: list[str] = []
    ops: list[str] = []  # innermost first
    parent = node.parent
    while parent is not None:
        if parent.tag == _EventType.PyCall:
            frames.append(parent.name)
        elif parent.tag == _EventType.TorchOp and not frames:
            ops.append(parent.name)
        parent = parent.parent
    at = user_frame(frames)
    op = ops[-1] if ops else ""
    if at is None:
        return "", op, ()
    return frames[at], op, callers(frames[at + 1 :])


def _record_cuda(call: Callable[[], Any], device: Any, snapshot: Path | None) -> Recorded:
    import pickle

    import torch

    torch.cuda.synchronize(device)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    try:
        before = int(torch.cuda.memory_allocated(device))
        call()
        torch.cuda.synchronize(device)
        taken = torch.cuda.memory._snapshot(device)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    if snapshot is not None:
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_bytes(pickle.dumps(taken))
    return cuda_sites(taken, int(getattr(device, "index", None) or 0), before)


def cuda_sites(taken: dict[str, Any], index: int, before: int) -> Recorded:
    """The sites live at the peak of a memory-history snapshot's trace (`device_traces`)."""
    traces = taken.get("device_traces") or []
    return _replay(_cuda_steps(traces[index] if index < len(traces) else [], before), before)


def _cuda_steps(
    trace: Iterable[dict[str, Any]], before: int
) -> Iterator[tuple[int, Block | None, int]]:
    """The trace's allocations, and frees of the blocks they made, with the running total
    from what was allocated `before` the call."""
    total, sizes = before, {}
    for event in trace:
        action, addr = event.get("action"), int(event.get("addr", 0))
        if action == "alloc":
            size = int(event.get("size", 0))
            sizes[addr] = size
            total += size
            yield addr, (size, *_cuda_site(event.get("frames") or ())), total
        elif action in ("free_requested", "free") and addr in sizes:
            total -= sizes.pop(addr)
            yield addr, None, total


def _cuda_site(frames: Sequence[dict[str, Any]]) -> tuple[str, str, tuple[str, ...], str]:
    """(where, op, frames above, statement) of a block: the allocator's frames carry their
    line, and the statement's source names the site across lines that moved."""
    import linecache

    names = [f"{f.get('filename', '?')}({f.get('line', 0)}): {f.get('name', '?')}" for f in frames]
    at = user_frame(names)
    if at is None:
        return "", "", (), ""
    frame = frames[at]
    code = linecache.getline(str(frame.get("filename", "")), int(frame.get("line", 0))).strip()
    return names[at], "", callers(names[at + 1 :]), code
