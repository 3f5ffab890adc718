"""Runner health: what makes numbers unstable on this machine, checked before and during a run.

On CUDA (through NVML, from the `nvidia-ml-py` package): other processes on the GPU, clocks
that move during the run (not locked), thermal or power throttling, persistence mode off,
and a compute mode in which perfguard's own second process (an A/B worker, a confirmation
re-measure) cannot use the GPU. On the CPU: a frequency governor other than `performance`,
and other processes keeping the CPUs busy while perfguard measures.

NVML numbers GPUs in PCI order and ignores `CUDA_VISIBLE_DEVICES`, so the GPU is found by
the UUID (or PCI bus id) CUDA gives for the run's device, never by CUDA's ordinal. This
process and its descendants (A/B workers, the confirmation child) are perfguard's own; a
process NVML reports that this PID namespace cannot see (a container's view of host PIDs)
counts as another only beyond the number of perfguard's own processes.

`Monitor` polls in a background thread while the tests run; `stop()` gives the findings.
Warnings go into the report header; `--perfguard-unhealthy=inconclusive` turns the run's
speed verdicts into `inconclusive` when there is any.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfguard.processes import (
    cpu_governors,
    in_this_namespace,
    machine_cpu_s,
    own_cpu_s,
    process_tree,
)

POLL_S = 1.0
CPU_BUSY_LIMIT = 0.15  # other processes' share of all CPUs above which we warn
CLOCK_MOVE_LIMIT = 0.05  # SM clock range over its maximum within the run

# NVML clocks-event (throttle) reason bits, from nvml.h
THROTTLE_REASONS = {
    0x0000000000000004: "software power cap",
    0x0000000000000008: "hardware slowdown",
    0x0000000000000020: "software thermal slowdown",
    0x0000000000000040: "hardware thermal slowdown",
    0x0000000000000080: "hardware power brake",
}
DEFAULT_COMPUTE = 0  # NVML_COMPUTEMODE_DEFAULT
PROHIBITED = 2  # NVML_COMPUTEMODE_PROHIBITED
EXCLUSIVE_PROCESS = 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
EXCLUSIVE_ADVICE = (
    "GPU compute mode is EXCLUSIVE_PROCESS: perfguard's A/B workers and its confirmation "
    "re-measure need a second process on the GPU and cannot run; set DEFAULT "
    "(nvidia-smi -c DEFAULT) and keep one runner job per GPU instead"
)


@dataclass(frozen=True)
class GpuId:
    """Which GPU NVML should watch: CUDA's ordinal is not NVML's."""

    index: int  # CUDA's ordinal (within CUDA_VISIBLE_DEVICES)
    uuid: str | None = None  # "GPU-8f6d...", as NVML names it
    pci_bus_id: str | None = None  # "00000000:17:00.0"


def gpu_handle(nvml: Any, gpu: GpuId) -> Any:
    """NVML's handle of the run's GPU, by UUID, else PCI bus id; by index only when CUDA
    and NVML number the GPUs alike (no CUDA_VISIBLE_DEVICES). CUDA's UUID does not say
    whether it is a GPU's or a MIG instance's: both prefixes are tried, and an instance gives
    its physical GPU (whose clocks, throttling and processes are the instance's)."""
    if gpu.uuid:
        bare = gpu.uuid.removeprefix("GPU-").removeprefix("MIG-")
        for uuid in dict.fromkeys([gpu.uuid, f"GPU-{bare}", f"MIG-{bare}"]):
            with contextlib.suppress(Exception):
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                mig = uuid.startswith("MIG-")
                return nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle) if mig else handle
        raise LookupError(f"NVML knows no GPU or MIG instance with the UUID {bare}")
    if gpu.pci_bus_id:
        return nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci_bus_id)
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip():
        raise LookupError(
            "the GPU's UUID is unknown and CUDA_VISIBLE_DEVICES is set, so NVML's index "
            f"{gpu.index} may be another GPU"
        )
    return nvml.nvmlDeviceGetHandleByIndex(gpu.index)


@dataclass(frozen=True)
class Health:
    """What was checked (facts) and what is wrong (warnings, one line each)."""

    warnings: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"warnings": list(self.warnings), "facts": dict(self.facts)}

    @classmethod
    def from_json(cls, data: Any) -> Health:
        if not isinstance(data, Mapping):
            return cls()
        return cls(tuple(str(w) for w in data.get("warnings") or ()), dict(data.get("facts") or {}))


# --- CPU ---------------------------------------------------------------------------------


def cpu_static_warnings(governors: set[str]) -> list[str]:
    if governors and governors != {"performance"}:
        return [
            f"CPU frequency governor is {', '.join(sorted(governors))}, not performance: "
            "clock speeds change under load"
        ]
    return []


# --- CUDA through NVML -------------------------------------------------------------------


def load_nvml() -> Any | None:
    """The `pynvml` module initialised, or None when it or a driver is not there."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: there is nothing to check
        return None
    return pynvml


def _throttle_reasons(nvml: Any, handle: Any) -> int:
    getter = (
        getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return int(getter(handle))


VIOLATION_POLICIES = {"power": 0, "thermal": 1}  # NVML_PERF_POLICY_POWER, _THERMAL
VIOLATION_WARN_MS = 100.0  # time held back by a limit during the run, above which we warn


def _violation_ns(nvml: Any, handle: Any) -> dict[str, int]:
    """NVML's cumulative time (ns) the GPU was held back by each limit: unlike the reason
    bits, which say what holds it back at the instant they are read, nothing between two
    polls is missed."""
    out: dict[str, int] = {}
    for name, policy in VIOLATION_POLICIES.items():
        with contextlib.suppress(Exception):  # not every board or driver counts them
            out[name] = int(nvml.nvmlDeviceGetViolationStatus(handle, policy).violationTime)
    return out


def _other_pids(
    nvml: Any, handle: Any, own_pids: set[int], visible: Callable[[int], bool]
) -> list[int]:
    """Processes computing on the GPU now that are not perfguard's own.

    `visible(pid)`: whether this PID namespace has the pid. Pids it lacks (NVML reporting
    host PIDs inside a container) cannot be told apart from ours, so they count as others
    only beyond the number of our own processes."""
    pids = [int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    seen = [p for p in pids if visible(p)]
    unseen = [p for p in pids if not visible(p)]
    others = [p for p in seen if p not in own_pids]
    ours_seen = len(seen) - len(others)
    spare = max(len(own_pids) - ours_seen, 0)
    return others + unseen[spare:]


def gpu_static(
    nvml: Any,
    gpu: GpuId,
    own_pids: set[int],
    visible: Callable[[int], bool] = in_this_namespace,
) -> tuple[list[str], dict[str, Any]]:
    handle = gpu_handle(nvml, gpu)
    warnings: list[str] = []
    facts: dict[str, Any] = {}
    persistence = int(nvml.nvmlDeviceGetPersistenceMode(handle))
    facts["persistence_mode"] = bool(persistence)
    if not persistence:
        warnings.append(
            "GPU persistence mode is off: the driver may re-initialise between jobs "
            "(nvidia-smi -pm 1)"
        )
    mode = int(nvml.nvmlDeviceGetComputeMode(handle))
    facts["compute_mode"] = mode
    if mode == EXCLUSIVE_PROCESS:
        warnings.append(EXCLUSIVE_ADVICE)
    elif mode == PROHIBITED:
        warnings.append("GPU compute mode is PROHIBITED: no CUDA process can use it")
    else:
        facts["compute_mode_note"] = (
            "default: other jobs could share the GPU; one runner job per GPU keeps it to this "
            "job, and other processes on it are reported"
        )
    others = _other_pids(nvml, handle, own_pids, visible)
    facts["other_gpu_processes"] = len(others)
    if others:
        warnings.append(f"{len(others)} other process(es) on the GPU: pids {others[:5]}")
    facts["sm_clock_max_mhz"] = int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
    return warnings, facts


@dataclass
class _GpuPoll:
    clocks: list[int] = field(default_factory=list)
    reasons: int = 0
    violations_first: dict[str, int] = field(default_factory=dict)
    violations_last: dict[str, int] = field(default_factory=dict)
    temperature_max: int | None = None
    other_processes: int = 0


def gpu_poll(
    nvml: Any,
    gpu: GpuId,
    own_pids: set[int],
    into: _GpuPoll,
    visible: Callable[[int], bool] = in_this_namespace,
    clocks: bool = True,
) -> None:
    """One look at the GPU; its SM clock only when `clocks` (a block is being timed)."""
    handle = gpu_handle(nvml, gpu)
    if clocks:
        into.clocks.append(int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)))
    into.reasons |= _throttle_reasons(nvml, handle)
    violations = _violation_ns(nvml, handle)
    into.violations_first = into.violations_first or violations
    into.violations_last = violations or into.violations_last
    temp = int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    into.temperature_max = temp if into.temperature_max is None else max(into.temperature_max, temp)
    others = _other_pids(nvml, handle, own_pids, visible)
    into.other_processes = max(into.other_processes, len(others))


def gpu_dynamic_warnings(poll: _GpuPoll, clock_max: int | None) -> tuple[list[str], dict[str, Any]]:
    warnings: list[str] = []
    facts: dict[str, Any] = {}
    if poll.clocks:
        low, high = min(poll.clocks), max(poll.clocks)
        facts["sm_clock_mhz_range"] = [low, high]
        span = (high - low) / (clock_max or high or 1)
        if span > CLOCK_MOVE_LIMIT:
            warnings.append(
                f"GPU SM clock moved between {low} and {high} MHz during the run: clocks are "
                "not locked (nvidia-smi -lgc)"
            )
    held = {
        name: round((poll.violations_last[name] - first) / 1e6, 1)
        for name, first in poll.violations_first.items()
        if name in poll.violations_last
    }
    if held:
        facts["held_back_ms"] = held
    for name, ms in held.items():
        if ms >= VIOLATION_WARN_MS:
            warnings.append(f"GPU held back by its {name} limit for {ms:.0f} ms during the run")
    reasons = [name for bit, name in THROTTLE_REASONS.items() if poll.reasons & bit]
    facts["throttle_reasons"] = reasons
    if reasons:
        warnings.append(f"GPU throttled during the run: {', '.join(reasons)}")
    if poll.temperature_max is not None:
        facts["gpu_temperature_max_c"] = poll.temperature_max
    if poll.other_processes:
        warnings.append(f"{poll.other_processes} other process(es) used the GPU during the run")
    return warnings, facts


# --- the monitor -------------------------------------------------------------------------


class Monitor:
    """Checks at start, polls in the background, and sums up at `stop()`."""

    def __init__(
        self,
        device_type: str,
        *,
        gpu: GpuId | None = None,
        nvml_loader: Callable[[], Any | None] = load_nvml,
        governors: Callable[[], set[str]] = cpu_governors,
        poll_s: float = POLL_S,
        own_pids: Callable[[], set[int]] = lambda: process_tree(os.getpid()),
        visible: Callable[[int], bool] = in_this_namespace,
        timed: Callable[[], bool] = lambda: True,
    ) -> None:
        """`timed`: whether a block is being timed now (clocks are read only then)."""
        self.device_type = device_type
        self._timed = timed
        self.gpu = gpu or GpuId(0)
        self.poll_s = poll_s
        self._nvml = nvml_loader() if device_type == "cuda" else None
        self._governors = governors
        self._own_pids = own_pids  # this process and its children, asked at each poll
        self._visible = visible
        self._gpu = _GpuPoll()
        self._warnings: list[str] = []
        self._facts: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_start: tuple[float, float] | None = None
        self._own_start = 0.0
        self._wall_start = 0.0

    def start(self) -> None:
        governors = self._governors()
        self._facts["cpu_governor"] = sorted(governors) or "unknown (no cpufreq)"
        self._warnings += cpu_static_warnings(governors)
        if hasattr(os, "getloadavg"):
            load = os.getloadavg()[0]
            # a fact only: the 1-minute average still holds whatever ran just before (an
            # install step); what others do *during* the run is measured in stop()
            self._facts["load_1min_at_start"] = round(load, 2)
        if self.device_type == "cuda":
            if self._nvml is None:
                self._facts["gpu_checks"] = (
                    'skipped: nvidia-ml-py is not installed (pip install "perfguard[nvml]") '
                    "or there is no driver"
                )
            else:
                try:
                    w, f = gpu_static(self._nvml, self.gpu, self._own_pids(), self._visible)
                    self._warnings += w
                    self._facts.update(f)
                except Exception as exc:  # NVML refuses some queries on some boards
                    self._facts["gpu_checks"] = f"incomplete: {type(exc).__name__}: {exc}"
        self._cpu_start = machine_cpu_s()
        self._own_start = own_cpu_s()
        self._wall_start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="perfguard-health", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        if self._nvml is not None:
            try:
                gpu_poll(
                    self._nvml, self.gpu, self._own_pids(), self._gpu, self._visible, self._timed()
                )
            except Exception:  # a failed poll is not a finding
                return

    def stop(self) -> Health:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.poll()
        warnings, facts = list(self._warnings), dict(self._facts)
        end = machine_cpu_s()
        if self._cpu_start is not None and end is not None:
            elapsed = time.monotonic() - self._wall_start
            cpus = os.cpu_count() or 1
            busy = end[0] - self._cpu_start[0]
            others = max(busy - (own_cpu_s() - self._own_start), 0.0)
            if elapsed > 0:
                # a share of all CPUs: /proc/stat counts in ticks and getrusage does not, so a
                # machine busy to the last cycle can read a little over 1 (seen: 1.024)
                share = min(others / (elapsed * cpus), 1.0)
                facts["other_cpu_share"] = round(share, 3)
                if share > CPU_BUSY_LIMIT:
                    warnings.append(
                        f"other processes kept {100 * share:.0f}% of the CPUs busy during the run"
                    )
        if self._nvml is not None:
            w, f = gpu_dynamic_warnings(self._gpu, facts.get("sm_clock_max_mhz"))
            warnings += w
            facts.update(f)
        return Health(tuple(warnings), facts)


def compute_mode(gpu: GpuId, nvml_loader: Callable[[], Any | None] = load_nvml) -> int | None:
    """The GPU's NVML compute mode, or None when NVML cannot say."""
    nvml = nvml_loader()
    if nvml is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetComputeMode(gpu_handle(nvml, gpu)))
    except Exception:  # no answer is no finding
        return None
