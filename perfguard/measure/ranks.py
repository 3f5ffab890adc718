"""The ranks of a distributed step (`perfguard.measure.distributed`) and the word between
them and the measuring process.

`World` starts the ranks (processes forked from multiprocessing's fork server, which imported
torch once for the session, or spawned where there is none; joined in a process group through
a file in a folder of their own), asks them in turn and gathers their answers within the item's time
limit, and ends them. Each rank runs `rank.rank_main` (its own module).
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from perfguard.errors import PerfguardError
from perfguard.measure.rank import RankStart, rank_main
from perfguard.measure.stacks import innermost_line

GRACE_S = 2.0
"""A rank that has not answered is named this long before the item's own limit ends it."""
START_S = 120.0
"""How long the ranks may take to start (import torch, join the group) before the item is
an error naming those that did not (within the item's own limit)."""


PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "perfguard.measure.rank")
"""What the ranks' fork server imports once: a spawned rank imported torch itself, about
3 s of CPU a rank, every item again. The compiler's front end too: DistributedDataParallel
(and FSDP) import it as they wrap a model, 2.3 s of CPU in each rank of each item on a
2-core machine; imported here it costs that once for the measuring process."""


def _rank_context() -> Any:
    """Where ranks start: multiprocessing's fork server (a fresh interpreter that imports
    `PRELOAD` once and forks each rank from there: no CUDA is started in it, nothing of the
    measuring process is copied) where the platform has one, else spawned processes."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


class DistributedError(PerfguardError, RuntimeError):
    """A rank failed: raised, exited, or did not answer in time (the message names it)."""


@dataclass
class World:
    """The rank processes of one item, and the word between them and this process."""

    world_size: int
    # seconds the item has left before its limit (None: no limit here): a rank that has not
    # answered by then, less a second's grace, is named before the item's own alarm fires
    left: Callable[[], float | None] = lambda: None
    procs: list[Any] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    folder: Path | None = None
    last: tuple[float, ...] = ()  # each rank's time of the last step (ms)
    done: int = 0  # steps asked for so far

    @classmethod
    def start(
        cls,
        build: Callable[[int, int], Any],
        world_size: int,
        backend: str,
        device_type: str,
        *,
        seed: int,
        threads: int | None,
        left: Callable[[], float | None],
        record_root: str | None = None,
    ) -> World:
        context = _rank_context()
        world = cls(world_size, left)
        world.folder = Path(tempfile.mkdtemp(prefix="perfguard-world-"))
        payload = pickle.dumps(build)
        try:
            for rank in range(world_size):
                mine, theirs = context.Pipe()
                start = RankStart(
                    rank=rank,
                    world_size=world_size,
                    backend=backend,
                    device_type=device_type,
                    folder=str(world.folder),
                    payload=payload,
                    seed=seed,
                    threads=threads,
                    parent=os.getpid(),
                    record_root=record_root,
                )
                proc = context.Process(
                    target=rank_main,
                    args=(start, theirs),
                    name=f"perfguard-rank-{rank}",
                    daemon=True,
                )
                proc.start()
                theirs.close()
                world.procs.append(proc)
                world.conns.append(mine)
            world.ask(None, "start", most=START_S)
        except BaseException:
            world.close()
            raise
        return world

    def ask(self, command: tuple[Any, ...] | None, what: str, most: float = math.inf) -> list[Any]:
        """Send `command` to every rank (None: only wait) and gather each rank's answer,
        within `most` seconds and the item's limit."""
        for conn in self.conns if command is not None else ():
            conn.send(command)
        answers: list[Any] = [None] * self.world_size
        waiting = set(range(self.world_size))
        left = self.left()
        budget = min(most, math.inf if left is None else left - GRACE_S)
        limit = None if math.isinf(budget) else time.monotonic() + budget
        within = f"{most:.0f} s" if budget == most else "the item's time limit"
        while waiting:
            for rank in sorted(waiting):
                conn = self.conns[rank]
                try:
                    ready = conn.poll(0.01)
                    message = conn.recv() if ready else None
                except (EOFError, OSError):
                    self.procs[rank].join(1.0)
                    code = self.procs[rank].exitcode
                    raise DistributedError(
                        f"rank {rank} exited (exit code {code}) during {what}"
                    ) from None
                if message is None:
                    continue
                if message[0] == "error":
                    raise self._failed(rank, message[1], what)
                answers[rank] = message[1]
                waiting.discard(rank)
            if waiting and limit is not None and time.monotonic() > limit:
                done = sorted(set(range(self.world_size)) - waiting)
                where = [f"rank {r} at {self.where(r)}" for r in sorted(waiting)]
                raise DistributedError(
                    f"rank {', '.join(map(str, sorted(waiting)))} did not finish {what} within "
                    f"{within}"
                    + (f" (rank {', '.join(map(str, done))} did)" if done else "")
                    + f"; {'; '.join(where)}"
                )
        return answers

    def _failed(self, rank: int, error: str, what: str) -> DistributedError:
        """Rank `rank` raised: named as the cause unless another rank has exited meanwhile
        (then that rank is, and this rank's error is what the exit did to it: a collective
        that lost its peer)."""
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            gone = [r for r, p in enumerate(self.procs) if r != rank and p.exitcode is not None]
            if gone:
                code = self.procs[gone[0]].exitcode
                return DistributedError(
                    f"rank {gone[0]} exited (exit code {code}) during {what}; then rank "
                    f"{rank}: {error}"
                )
            time.sleep(0.05)
        return DistributedError(f"rank {rank}: {error} (during {what})")

    def where(self, rank: int) -> str:
        """The line rank `rank`'s main thread is on now, from the stack it writes when
        signalled (a rank that is stuck is named with where it is stuck)."""
        if self.folder is None or not hasattr(signal, "SIGUSR1"):
            return "an unknown line"
        dump = self.folder / f"stack-{rank}"
        with contextlib.suppress(OSError):
            os.kill(self.procs[rank].pid, signal.SIGUSR1)
        until = time.monotonic() + 0.5
        text = ""
        while time.monotonic() < until:
            text = dump.read_text() if dump.exists() else ""
            if "rank_main" in text:
                break
            time.sleep(0.02)
        return innermost_line(text) or "an unknown line"

    def step(self) -> None:
        """One timed step of every rank (the clock reads the slowest)."""
        self.done += 1
        times = tuple(float(t) for t in self.ask(("step",), f"step {self.done}"))
        self.last = times

    def close(self, patience: float = 2.0) -> None:
        """End every rank: asked to stop and given `patience` seconds in all, then
        terminated, then killed (a rank that failed or hung: no patience)."""
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):  # a rank gone already
                conn.send(("stop",))
        until = time.monotonic() + patience
        for proc in self.procs:
            proc.join(max(until - time.monotonic(), 0.0))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(0.5)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        for conn in self.conns:
            conn.close()
        if self.folder is not None:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
        self.procs, self.conns = [], []
