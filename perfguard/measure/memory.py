"""Peak memory of a few inference calls: CUDA allocator peaks, or the process peak RSS on CPU."""

from __future__ import annotations

import gc
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch


@dataclass(frozen=True)
class MemoryReading:
    peak_bytes: int
    reserved_bytes: int | None
    method: str
    start_bytes: int | None = None  # what was held when the probe started (weights, runtime)


class MemoryProbe(Protocol):
    def start(self) -> None: ...

    def stop(self) -> MemoryReading: ...


class CudaMemory:
    """Free the allocator's cache, reset its peak statistics, run, read max allocated and max
    reserved.

    Emptying the cache first makes "reserved" what this variant holds and needs, not what
    compiling or autotuning left cached. A CUDA-graph variant allocates nothing while it
    replays (its memory pool was allocated when the graph was recorded): its peak is what it
    holds, and its increase over the start is near zero, by design.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._start = 0

    def start(self) -> None:
        torch.cuda.synchronize(self.device)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        self._start = int(torch.cuda.memory_allocated(self.device))

    def stop(self) -> MemoryReading:
        torch.cuda.synchronize(self.device)
        return MemoryReading(
            peak_bytes=int(torch.cuda.max_memory_allocated(self.device)),
            reserved_bytes=int(torch.cuda.max_memory_reserved(self.device)),
            method="cuda max_memory_allocated",
            start_bytes=self._start,
        )


def _read_status(status: Path, key: str) -> int | None:
    try:
        for line in status.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def release_freed_memory() -> bool:
    """Hand the heap's freed pages back to the system (glibc's `malloc_trim`), so that the
    resident set is what is live: a copy perfguard made and freed (a reference, an earlier
    variant) would otherwise stay resident, and the peak read from it would be perfguard's,
    not the model's. False where there is no glibc."""
    import ctypes
    import ctypes.util

    gc.collect()
    name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or name is None:
        return False
    try:
        return bool(ctypes.CDLL(name).malloc_trim(0) or True)
    except (OSError, AttributeError):
        return False


class ProcessRss:
    """Process peak RSS: on Linux reset through /proc/self/clear_refs and read from VmHWM.

    Freed heap pages are handed back first (`release_freed_memory`), so the peak is what the
    process holds (torch's runtime, the model's weights, the inputs) plus what the calls
    allocate, not what perfguard's earlier work left resident.

    Elsewhere (or where /proc cannot be written) it falls back to getrusage's ru_maxrss,
    which cannot be reset: the reading is then the peak of the whole process so far,
    and `method` says so.
    """

    def __init__(self, proc: Path = Path("/proc/self")) -> None:
        self._proc = proc
        self._resettable = False
        self._start: int | None = None

    def start(self) -> None:
        release_freed_memory()
        try:
            (self._proc / "clear_refs").write_text("5")
            self._resettable = _read_status(self._proc / "status", "VmHWM") is not None
        except OSError:
            self._resettable = False
        self._start = _read_status(self._proc / "status", "VmRSS")

    def stop(self) -> MemoryReading:
        if self._resettable:
            peak = _read_status(self._proc / "status", "VmHWM")
            if peak is not None:
                return MemoryReading(
                    peak, None, "process VmHWM (reset before the calls)", self._start
                )
        usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        return MemoryReading(
            usage * scale, None, "process ru_maxrss (not resettable here)", self._start
        )


def probe_for(device: torch.device) -> MemoryProbe:
    return CudaMemory(device) if device.type == "cuda" else ProcessRss()
