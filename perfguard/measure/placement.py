"""Where the measuring thread runs: one CPU, the same for both sides of same-job A/B.

The thread that calls the model does the serial part of every call (Python, dispatch, the
operators too small to split), so a call's time depends on the CPU it runs on. The
scheduler keeps a thread where it is for seconds at a time, and on a shared host the CPUs
of a VM are not equally fast at every moment (a neighbour on a core's sibling thread). Two
workers whose threads sit on different CPUs then differ by 10% to 40% for seconds on
identical code, in the same direction block after block, which pairing cannot cancel. Both
workers of same-job A/B therefore time each block from the same CPU, the lowest one they may
use; the threads of the operators' thread pool stay free to run anywhere.

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


@contextlib.contextmanager
def on_one_cpu() -> Iterator[int | None]:
    """Run the calling thread on the lowest CPU it may use until the block ends; yields that
    CPU, or None where nothing was pinned. A thread started meanwhile (a thread pool made on
    first use inherits its creator's CPUs) is given back every CPU afterwards, so pinning
    never shrinks the pool's room."""
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
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)
        for tid in set(_tasks()) - before - {me}:
            with contextlib.suppress(OSError):  # it may have ended already
                if os.sched_getaffinity(tid) == {cpu}:
                    os.sched_setaffinity(tid, allowed)
