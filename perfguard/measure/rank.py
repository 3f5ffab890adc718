"""What runs in each rank's process of a distributed step (`perfguard.distributed`): it
joins the process group, builds the step twice (the drift reference), then answers the
measuring process (`ranks.World`) until it is told to stop: a timed step after a barrier,
the peak memory, five profiled steps (the share in collectives), and, in a session that
records what each test ran, the lines of the repository it ran so far. Every rank writes its
threads' stacks to a file when signalled, so that a rank that is stuck is named with the
line it is on."""

from __future__ import annotations

import os
import pickle
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.selection.tracer import CodeTracer

COLLECTIVE = re.compile(
    r"gloo|nccl|c10d::|all_?reduce|all_?gather|reduce_?scatter|broadcast|all_?to_?all",
    re.IGNORECASE,
)
"""A profiler event that is communication: gloo's and NCCL's work, c10d's calls."""


@dataclass(frozen=True, kw_only=True)
class RankStart:
    """What a rank's process is started with."""

    rank: int
    world_size: int
    backend: str  # gloo, nccl
    device_type: str  # cpu, cuda (a rank's GPU is its rank)
    folder: str  # the world's folder: the rendezvous file, each rank's stack file
    payload: bytes  # `build`, pickled
    seed: int
    threads: int | None  # torch's threads in the rank (None: its default)
    parent: int  # the measuring process: the rank ends with it
    # the repository whose code the rank records, from loading `build` to its first steps
    # (a session that records what each test ran; None: nothing recorded)
    record_root: str | None = None


def rank_main(start: RankStart, conn: Connection) -> None:
    """A rank: join the group, then answer the measuring process until it says stop."""
    from perfguard.processes import follow_parent

    # the process that started it: the measuring process, or the fork server, which ends
    # when the measuring process does
    follow_parent(os.getppid())
    if start.parent != os.getppid() and not _alive(start.parent):
        os._exit(1)  # the measuring process ended before the signal was armed
    _stack_on_signal(Path(start.folder) / f"stack-{start.rank}")
    tracer = None
    if start.record_root is not None:
        from perfguard.selection.tracer import CodeTracer

        tracer = CodeTracer()
        tracer.start()  # before `build` is loaded: its module's own code counts
    try:
        import torch
        import torch.distributed as dist

        if start.threads:
            torch.set_num_threads(start.threads)
        if start.device_type == "cuda":
            torch.cuda.set_device(start.rank)
        dist.init_process_group(
            start.backend,
            init_method=f"file://{Path(start.folder) / 'rendezvous'}",
            rank=start.rank,
            world_size=start.world_size,
        )
        build = pickle.loads(start.payload)
    except BaseException as exc:
        conn.send(("error", _line(exc)))
        return
    conn.send(("ok", None))
    rank_loop(
        start.rank,
        start.world_size,
        build,
        conn,
        start.seed,
        start.device_type,
        tracer,
        start.record_root,
    )


def _inside(root: str | None) -> Callable[[str], str | None]:
    """A file's path in the repository `root` (None: another's, an installed package's)."""
    top = Path(root or "/nonexistent").resolve()

    def inside(name: str) -> str | None:
        try:
            rel = Path(name).resolve().relative_to(top)
        except (ValueError, OSError):
            return None
        skipped = ("site-packages", "dist-packages", ".git", "__pycache__")
        return None if any(p in skipped for p in rel.parts) else rel.as_posix()

    return inside


def _stack_on_signal(path: Path) -> None:
    """Write every thread's stack to `path` when the measuring process signals."""
    import faulthandler

    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=path.open("w"), all_threads=True)


def rank_loop(
    rank: int,
    world_size: int,
    build: Callable[[int, int], Callable[[], Any]],
    conn: Connection,
    seed: int,
    device_type: str,
    tracer: CodeTracer | None = None,
    record_root: str | None = None,
) -> None:
    import torch
    import torch.distributed as dist

    def sync() -> None:
        if device_type == "cuda":
            torch.cuda.synchronize()

    step: Callable[[], Any] | None = None
    while True:
        try:
            command = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if command[0] == "stop":
                dist.destroy_process_group()
                return
            if command[0] == "reach":  # what the rank ran so far, recorded: stop recording
                ran = {} if tracer is None else tracer.stop(_inside(record_root))
                conn.send(("ok", {path: sorted(lines) for path, lines in ran.get("", {}).items()}))
                tracer = None
                continue
            if command[0] == "build":
                outputs = []
                for _ in range(2):  # the reference, then the step that is timed
                    torch.manual_seed(seed)
                    step = build(rank, world_size)
                    if not callable(step):
                        raise TypeError(f"build returned {type(step).__name__}, not a step")
                    out = step()
                    sync()
                    outputs.append(_flat(out) if rank == 0 else None)
                    _finite(out)
                conn.send(("ok", outputs if rank == 0 else None))
            elif command[0] == "step":
                assert step is not None
                dist.barrier()
                sync()
                began = time.perf_counter()
                step()
                sync()
                conn.send(("ok", (time.perf_counter() - began) * 1000.0))
            elif command[0] == "memory":
                conn.send(("ok", _peak_bytes(device_type)))
            elif command[0] == "profile":
                assert step is not None
                conn.send(("ok", _profiled(step, sync, dist)))
        except Exception as exc:  # the measuring process names the rank
            conn.send(("error", _line(exc)))


def _flat(out: Any) -> list[float]:
    from perfguard.measure.drift import flatten_outputs

    return [float(v) for v in flatten_outputs(out)]


def _finite(out: Any) -> None:
    import numpy as np

    from perfguard.measure.drift import flatten_outputs

    try:
        flat = flatten_outputs(out)
    except ValueError:
        return  # a step that returns nothing to compare: its time is what it has
    if not np.all(np.isfinite(flat)):
        raise ValueError("the step returned NaN or Inf")


def _peak_bytes(device_type: str) -> int:
    if device_type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated())
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


PROFILED_STEPS = 5
"""Steps profiled after the timed blocks: one step's share in collectives swings (0.28 to
0.58 on identical code in the distributed study); five steps' together hold steadier."""


def _profiled(step: Callable[[], Any], sync: Callable[[], None], dist: Any) -> dict[str, Any]:
    """`PROFILED_STEPS` profiled steps, each after a barrier: the time of a step, the
    collectives' share of it, the operators' self time per step (the barriers left out)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    step_us = 0.0
    with profile(activities=activities) as prof:
        for _ in range(PROFILED_STEPS):
            dist.barrier()
            sync()
            began = time.perf_counter()
            step()
            sync()
            step_us += (time.perf_counter() - began) * 1e6
    self_us: dict[str, float] = {}
    comm_us = 0.0
    for event in prof.key_averages():
        if "barrier" in event.key:  # the steps' start, not their work
            continue
        device = float(getattr(event, "self_device_time_total", 0.0) or 0.0)
        own = float(event.self_cpu_time_total) + device
        self_us[event.key] = self_us.get(event.key, 0.0) + own / PROFILED_STEPS
        if COLLECTIVE.search(event.key):
            comm_us += float(event.cpu_time_total) + device
    share = min(comm_us / step_us, 1.0) if step_us > 0 else 0.0
    top = dict(sorted(self_us.items(), key=lambda kv: -kv[1])[:40])
    return {
        "step_us": step_us / PROFILED_STEPS,
        "collective_share": share,
        "profile": {"calls": 1, "self_us": top},
    }


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        pass
    return True
