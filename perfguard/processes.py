"""Processes and CPUs of this machine, from Linux's /proc and /sys: a process's descendants,
which pids this PID namespace can see, CPU time spent, the CPUs' governors. Elsewhere, the
answers that assume nothing. And a child's side of its life: ending with its parent, and
ending fast (`follow_parent`, `end_worker`)."""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path
from typing import NoReturn


def process_tree(root: int, proc: Path = Path("/proc")) -> set[int]:
    """`root` and every process descended from it (Linux /proc; just `root` elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def in_this_namespace(pid: int) -> bool:
    """Whether this PID namespace sees `pid` (a container sees not all of the host's)."""
    return Path(f"/proc/{pid}").exists() if Path("/proc/self").exists() else True


def cpu_governors(root: Path = Path("/sys/devices/system/cpu")) -> set[str]:
    """The CPUs' frequency governors (none where there is no cpufreq: VMs, containers)."""
    found = set()
    for path in root.glob("cpu[0-9]*/cpufreq/scaling_governor"):
        try:
            found.add(path.read_text().strip())
        except OSError:
            continue
    return found


def machine_cpu_s(path: Path = Path("/proc/stat")) -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, or None off Linux."""
    try:
        first = path.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    values = [float(v) / ticks for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    total = sum(values[:8])  # guest time is already inside user
    return total - idle, total


def own_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime


def follow_parent(parent: int) -> None:
    """End this process (an A/B worker, a study's session) when its parent ends, even by
    SIGKILL (which lets the parent clean nothing up): the kernel's parent-death signal on
    Linux, a watchdog elsewhere."""
    import signal
    import sys
    import threading
    import time

    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    else:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="perfguard-follow-parent", daemon=True).start()
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os._exit(1)


def end_worker(code: int) -> NoReturn:
    """Exit with the worker session's `code`, without the interpreter's teardown: freeing
    the modules of torch and its compiler takes 0.6-0.7 s (benchmarks/worker_exit.py), paid
    by both workers while the driver waits for them. The exit handlers still run and the
    output is flushed; a thread of the tests still running (not a daemon) gets the usual
    exit, which waits for it."""
    import atexit
    import sys
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
