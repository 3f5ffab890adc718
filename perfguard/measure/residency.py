"""Where a tree's weights wait between its turns in same-job A/B on one GPU.

Both trees' models are resident at once only where both fit with room to spare. Where they
do not, the side that is not timing keeps its weights in host memory: before each of its
blocks they move onto the device, after it back to the host, so the pairs stay interleaved
and the side being timed has the device's memory to itself. The moves are outside the timed
calls; what they cost is counted, and the result says so.

A CUDA-graphed variant (compile-reduce-overhead, compile-max-autotune) stays resident: its
graphs hold the addresses of the weights they were recorded with. So does a variant that
works on a copy of the model (int8, pruning): the copy is what is timed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfguard.measure.job import Job

ROOM_SHARE = 0.25
"""Room to spare: with both trees resident, the device keeps at least this share of its
memory free (or this side's weights, if more) for activations, workspaces and compiling."""


def waits_on_host(free_bytes: int, total_bytes: int, weights_bytes: int) -> bool:
    """Whether the idle side's weights should wait in host memory: the device's free memory,
    with both trees resident, is less than the room a turn may need."""
    return free_bytes < max(weights_bytes, ROOM_SHARE * total_bytes)


@dataclass
class Residency:
    """One side's weights between its A/B turns: decided at its first block, from the
    device's free memory with both trees built."""

    module: Any  # the nn.Module that is timed (the user's model, measured in place)
    device: Any  # torch.device
    movable: bool = True  # False: a graphed or copied variant, kept resident
    on_host: bool | None = None  # None: not decided yet
    moves: int = 0
    move_s: float = 0.0
    free_bytes: int = 0
    total_bytes: int = 0
    log: list[str] = field(default_factory=list)

    def _decide(self) -> bool:
        import torch

        from perfguard.variants.base import model_size_bytes

        if not self.movable or self.device.type != "cuda":
            return False
        self.free_bytes, self.total_bytes = torch.cuda.mem_get_info(self.device)
        return waits_on_host(self.free_bytes, self.total_bytes, model_size_bytes(self.module))

    def _move(self, where: Any) -> None:
        import torch

        start = time.perf_counter()
        self.module.to(where)
        torch.cuda.synchronize(self.device)
        self.move_s += time.perf_counter() - start
        self.moves += 1

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Around one block: the weights on the device for it, and back on the host after
        it where they wait there."""
        if self.on_host is None:
            self.on_host = self._decide()
        elif self.on_host:
            self._move(self.device)
        try:
            yield
        finally:
            if self.on_host:
                self._move("cpu")

    def give_back(self) -> None:
        """After the last block: the weights where the test left them (on the device)."""
        if self.on_host:
            self._move(self.device)

    def note(self) -> str | None:
        if not self.on_host:
            return None
        gib = 2**30
        return (
            f"same-job A/B: both trees did not fit on the device with room to spare "
            f"({self.free_bytes / gib:.1f} of {self.total_bytes / gib:.1f} GiB free with both "
            f"resident): this side's weights waited in host memory between its turns "
            f"({self.moves} moves, {self.move_s:.1f} s, outside the timed calls)"
        )

    def annotate(self, result: Any) -> Any:
        """`result` (a VariantResult) with the note, where there is one."""
        note = self.note()
        if note is None or result.details is None:
            return result
        details = replace(result.details, notes=(*result.details.notes, note))
        return replace(result, details=details)


def residency_for(job: Job) -> Residency | None:
    """Where an A/B side's weights wait between its blocks, on a GPU: the model measured in
    place may wait in host memory; a copy (int8, pruning, a training step) or CUDA graphs
    (which hold their weights' addresses) stay resident. None off a GPU."""
    from perfguard.measure.runner import resolve_device
    from perfguard.variants.compile import GRAPHED_ON_CUDA

    try:
        device = resolve_device(job.settings.device)
    except Exception:  # the measurement says what is wrong with it
        return None
    if device.type != "cuda":
        return None
    compile_part = job.variant.part("compile")
    graphed = compile_part is not None and compile_part.name in GRAPHED_ON_CUDA
    return Residency(job.model, device, movable=job.in_place and not graphed)
