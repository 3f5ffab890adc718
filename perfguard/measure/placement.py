"""Where the measuring thread runs: one CPU, the same for both sides of same-job A/B.

The thread that calls the model does the serial part of every call (Python, dispatch, the
operators too small to split), so a call's time depends on the CPU it runs on. The
scheduler keeps a thread where it is for seconds at a time, and on a shared host the CPUs
of a VM are not equally fast at every moment (a neighbour on a core's sibling thread). Two
workers whose threads sit on different CPUs then differ by 10% to 40% for seconds on
identical code, in the same direction block after block, which pairing cannot cancel. Both
workers of same-job A/B therefore time each block from the same CPU, the lowest one they may
use, and for that block every other thread of the process runs on the other CPUs. Without
that second half, a busy host turned pinning into a trap: with one core held by other work
(2-core VM, 2026-11-24), the scheduler pulled the operators' pool thread onto the pinned
caller's CPU, the two threads of each matmul took turns on one CPU, and a 1-ms model's
blocks read 4 to 200 ms (runs of 75-298 s instead of about 21 s).

Linux only (`sched_setaffinity` on a thread); elsewhere, or with one CPU, nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


def _affinity_api() -> bool:
    return hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")


def _tasks() -> list[int]:
    """This process's thread ids (Linux), or none when /proc cannot say."""
    try:
        return [int(p.name) for p in Path("/proc/self/task").iterdir()]
    except (OSError, ValueError):
        return []


def _move(tids: set[int], cpus: set[int]) -> dict[int, set[int]]:
    """Put these threads on `cpus`; returns the CPUs each of the moved ones had."""
    had = {}
    for tid in tids:
        with contextlib.suppress(OSError):  # it may have ended already
            mask = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
            had[tid] = mask
    return had


@contextlib.contextmanager
def on_one_cpu() -> Iterator[int | None]:
    """Run the calling thread on the lowest CPU it may use until the block ends, and this
    process's other threads (the operators' pool) on the other CPUs; yields that CPU, or
    None where nothing was pinned. Afterwards each thread gets back the CPUs it had; a
    thread started meanwhile (a thread pool made on first use inherits its creator's CPUs)
    is given every CPU, so pinning never shrinks the pool's room."""
    if not _affinity_api():
        yield None
        return
    try:
        allowed = os.sched_getaffinity(0)
    except OSError:
        yield None
        return
    if len(allowed) < 2:
        yield None
        return
    cpu = min(allowed)
    me = threading.get_native_id()
    before = set(_tasks())
    try:
        os.sched_setaffinity(0, {cpu})  # 0: the calling thread, on Linux
    except OSError:
        yield None
        return
    had = _move(before - {me}, allowed - {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)
        for tid, mask in had.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, mask)
        for tid in set(_tasks()) - before - {me}:
            with contextlib.suppress(OSError):  # it may have ended already
                if os.sched_getaffinity(tid) == {cpu}:
                    os.sched_setaffinity(tid, allowed)
