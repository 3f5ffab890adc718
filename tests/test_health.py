"""Runner health checks, with NVML faked (no GPU here) and /proc read for real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfguard.health import (
    EXCLUSIVE_PROCESS,
    GpuId,
    Health,
    Monitor,
    compute_mode,
    cpu_static_warnings,
    gpu_handle,
)
from perfguard.processes import cpu_governors, process_tree
from perfguard.records import reason
from perfguard.records.environment import ENVIRONMENT_KEYS, HARDWARE_KEYS
from perfguard.stats.verdicts import compare_runs, withhold_speed_verdicts
from tests.factories import result, run


class FakeNvml:
    """The handful of pynvml calls perfguard.health makes, with settable answers."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(
        self,
        *,
        persistence: int = 1,
        compute_mode: int = 0,
        pids: tuple[int, ...] = (),
        clocks: tuple[int, ...] = (1590,),
        reasons: int = 0,
        uuid: str = "GPU-0000-watched",
        held_ns: tuple[int, ...] = (),
    ) -> None:
        self.held_ns = list(held_ns)  # the power limit's cumulative violation time, per read
        self.persistence = persistence
        self.compute_mode = compute_mode
        self.pids = pids  # every process NVML reports on the GPU: no pid is assumed ours
        self.clocks = list(clocks)
        self.reasons = reasons
        self.uuid = uuid
        self.asked: list[str] = []

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.asked.append(f"index {index}")
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.asked.append(f"uuid {uuid}")
        if uuid != self.uuid:
            raise LookupError(f"no GPU {uuid}")
        return "watched"

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: str) -> str:
        return f"parent of {handle}"

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:
        self.asked.append(f"pci {bus}")
        return "watched"

    def nvmlDeviceGetPersistenceMode(self, handle: str) -> int:
        return self.persistence

    def nvmlDeviceGetComputeMode(self, handle: str) -> int:
        return self.compute_mode

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
        return [SimpleNamespace(pid=p) for p in self.pids]

    def nvmlDeviceGetMaxClockInfo(self, handle: str, kind: int) -> int:
        return 1980

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        return self.clocks.pop(0) if len(self.clocks) > 1 else self.clocks[0]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return self.reasons

    def nvmlDeviceGetViolationStatus(self, handle: str, policy: int) -> Any:
        if policy != 0 or not self.held_ns:
            raise NotImplementedError("not counted on this board")
        now = self.held_ns.pop(0) if len(self.held_ns) > 1 else self.held_ns[0]
        return SimpleNamespace(violationTime=now)

    def nvmlDeviceGetTemperature(self, handle: str, kind: int) -> int:
        return 61


def watch(
    nvml: FakeNvml,
    polls: int = 3,
    governors: set[str] | None = None,
    *,
    own: set[int] | None = None,
    visible: Callable[[int], bool] = lambda pid: True,
    timed: Callable[[], bool] = lambda: True,
) -> Health:
    monitor = Monitor(
        "cuda",
        gpu=GpuId(0, uuid="GPU-0000-watched"),
        nvml_loader=lambda: nvml,
        governors=lambda: {"performance"} if governors is None else governors,
        poll_s=3600,  # the test polls by hand
        own_pids=lambda: {100} if own is None else own,
        visible=visible,
        timed=timed,
    )
    monitor.start()
    for _ in range(polls):
        monitor.poll()
    return monitor.stop()


def test_a_well_prepared_gpu_runner_has_no_gpu_warnings() -> None:
    health = watch(FakeNvml(pids=(100,)))  # only our own process on the GPU
    assert not [w for w in health.warnings if "GPU" in w]
    assert health.facts["persistence_mode"] is True
    assert health.facts["sm_clock_mhz_range"] == [1590, 1590]
    assert health.facts["throttle_reasons"] == []


def test_each_gpu_problem_is_named() -> None:
    health = watch(
        FakeNvml(
            persistence=0,
            compute_mode=EXCLUSIVE_PROCESS,
            pids=(100, 4242),
            clocks=(1980, 1755, 1410, 1410),
            reasons=0x20 | 0x04,
        )
    )
    text = "\n".join(health.warnings)
    assert "persistence mode is off" in text
    assert "other process(es) on the GPU: pids [4242]" in text
    assert "moved between 1410 and 1980 MHz" in text
    assert "software power cap" in text and "software thermal slowdown" in text
    assert "EXCLUSIVE_PROCESS: perfguard's A/B workers and its confirmation" in text


def test_no_nvml_is_a_fact_not_a_failure() -> None:
    health = watch(None)  # type: ignore[arg-type]
    assert "nvidia-ml-py" in health.facts["gpu_checks"]


def test_cpu_governor_other_than_performance_warns(tmp_path: Path) -> None:
    for cpu, gov in (("cpu0", "powersave"), ("cpu1", "performance")):
        d = tmp_path / cpu / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(gov + "\n")
    governors = cpu_governors(tmp_path)
    assert governors == {"powersave", "performance"}
    assert "powersave" in cpu_static_warnings(governors)[0]
    assert cpu_static_warnings({"performance"}) == []
    assert cpu_static_warnings(set()) == []  # no cpufreq (VMs, containers): nothing to say


@pytest.mark.slow  # processes spinning on every core for most of a second
def test_cpu_monitor_measures_other_processes_share() -> None:
    """Processes that spin beside the monitor for its whole window are its "others": their
    share of all CPUs is at least most of what they could take (other load on the machine
    only adds to it; this process's own time is left out)."""
    cpus = os.cpu_count() or 1
    hogs = min(cpus, 4)
    spin = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(hogs)]
    try:
        time.sleep(0.3)  # the interpreters are up and spinning
        monitor = Monitor("cpu", governors=lambda: {"performance"}, poll_s=3600)
        monitor.start()
        time.sleep(0.6)
        health = monitor.stop()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    share = health.facts["other_cpu_share"]
    assert 0.5 * hogs / cpus <= share <= 1.0, (share, hogs, cpus)
    assert health.facts["cpu_governor"] == ["performance"]


def test_health_round_trips_through_json() -> None:
    h = Health(("a warning",), {"x": 1})
    assert Health.from_json(h.to_json()) == h
    assert Health.from_json(None) == Health()


def test_inconclusive_mode_withholds_speed_verdicts_but_not_drift() -> None:
    base = run([result("t", "eager", 1.0, seed=1)])
    head = run([result("t", "eager", 1.6, seed=2, drift=1.0, drift_ok=False)])
    comparisons = compare_runs(base, head)
    assert any(c.verdict == "regression" and c.metric == "latency_p50_ms" for c in comparisons)
    unhealthy = reason("runner_health", warnings="GPU throttled during the run")
    held = withhold_speed_verdicts(comparisons, unhealthy)
    latency = [c for c in held if c.metric.startswith("latency")]
    assert {c.verdict for c in latency} <= {"inconclusive", "unchanged"}
    assert all(c.reasons[-1] == unhealthy for c in latency if c.verdict == "inconclusive")
    flagged = next(c for c in latency if c.verdict == "inconclusive")
    assert flagged.note.endswith("runner health: GPU throttled during the run")  # its words
    drift = next(c for c in held if c.metric == "drift_max_rel")
    assert drift.verdict == "regression"


def test_a_hardware_change_forbids_speed_verdicts() -> None:
    base = run([result("t", "eager", 1.0, seed=1)])
    head = run([result("t", "eager", 1.6, seed=2)], device="Other GPU")
    latency = [c for c in compare_runs(base, head) if c.metric == "latency_p50_ms"]
    assert latency[0].verdict == "inconclusive"
    assert latency[0].reasons[-1] == reason(
        "hardware_change", changes="device Test GPU -> Other GPU"
    )
    same = replace(head, environment={**head.environment, "device": "Test GPU", "torch": "2.14"})
    assert any(c.verdict == "regression" for c in compare_runs(base, same))


def test_the_environment_holds_exactly_the_keys_of_its_table() -> None:
    """What gates a verdict and what the report watches come from the one table, and the
    table lists nothing that is not written (the CUDA keys: tests/test_cuda.py)."""
    import torch

    from perfguard.environment import collect_environment

    written = set(collect_environment(torch.device("cpu")))
    assert written == {k.name for k in ENVIRONMENT_KEYS if not k.cuda}
    assert set(HARDWARE_KEYS) <= written and "device" in HARDWARE_KEYS


def test_nvml_finds_the_gpu_by_uuid_never_by_cudas_ordinal() -> None:
    nvml = FakeNvml(pids=(100,))
    watch(nvml)
    assert nvml.asked and all(a == "uuid GPU-0000-watched" for a in nvml.asked)
    assert gpu_handle(nvml, GpuId(1, pci_bus_id="00000000:17:00.0")) == "watched"


def test_without_a_uuid_and_with_cuda_visible_devices_the_index_is_not_trusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(LookupError, match="CUDA_VISIBLE_DEVICES"):
        gpu_handle(FakeNvml(), GpuId(0))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_handle(FakeNvml(), GpuId(2)) == "gpu2"


def test_perfguards_own_children_are_not_other_processes() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = process_tree(os.getpid())
        assert {os.getpid(), child.pid} <= tree
        health = watch(FakeNvml(pids=(os.getpid(), child.pid)), own=tree)
        assert health.facts["other_gpu_processes"] == 0
        assert not [w for w in health.warnings if "GPU" in w]  # (CPU load is another matter)
    finally:
        child.kill()
        child.wait()


def test_pids_from_another_namespace_count_only_beyond_our_own() -> None:
    def hidden(pid: int) -> bool:
        return False  # a container: NVML reports host pids this namespace cannot see

    ours = watch(FakeNvml(pids=(91001, 91002)), own={1, 7}, visible=hidden)
    assert ours.facts["other_gpu_processes"] == 0
    more = watch(FakeNvml(pids=(91001, 91002, 91003)), own={1, 7}, visible=hidden)
    assert more.facts["other_gpu_processes"] == 1


def test_compute_mode_is_read_from_the_watched_gpu() -> None:
    nvml = FakeNvml(compute_mode=EXCLUSIVE_PROCESS)
    assert compute_mode(GpuId(0, uuid="GPU-0000-watched"), lambda: nvml) == EXCLUSIVE_PROCESS
    assert compute_mode(GpuId(0, uuid="GPU-other"), lambda: nvml) is None
    assert compute_mode(GpuId(0), lambda: None) is None


def test_a_mig_instance_is_found_by_its_mig_uuid_and_watched_through_its_gpu() -> None:
    nvml = FakeNvml(uuid="MIG-1234")  # CUDA gave the UUID bare, we guessed GPU- first
    assert gpu_handle(nvml, GpuId(0, uuid="GPU-1234")) == "parent of watched"
    assert nvml.asked == ["uuid GPU-1234", "uuid MIG-1234"]
    with pytest.raises(LookupError):
        gpu_handle(FakeNvml(uuid="GPU-other"), GpuId(0, uuid="GPU-1234"))


def test_clocks_are_read_only_while_a_block_is_timed() -> None:
    """Between compiles a GPU idles at low clocks: read then, every unlocked GPU would be
    reported as moving."""
    timing = iter([False, True, True, False])
    health = watch(FakeNvml(clocks=(1980, 1980, 345)), polls=3, timed=lambda: next(timing))
    assert health.facts["sm_clock_mhz_range"] == [1980, 1980]
    assert not [w for w in health.warnings if "clock" in w]
    assert "sm_clock_mhz_range" not in watch(FakeNvml(), timed=lambda: False).facts


def test_the_sampler_says_when_it_times_a_block() -> None:
    from perfguard.measure.clock import FakeClock
    from perfguard.measure.sampling import TIMED, SamplingSettings, sample

    seen: list[bool] = []
    sample(
        lambda: seen.append(TIMED.is_set()),
        FakeClock([1.0] * 500),
        SamplingSettings(
            repeats=2,
            rewarm_calls=1,
            min_samples_per_repeat=3,
            max_samples_per_repeat=3,
            min_warmup=0,
            warmup_window=1,
            budget_s=0.001,
        ),
    )
    assert seen[0] is False  # warming up
    assert seen.count(True) == 6 and not TIMED.is_set()


def test_time_held_back_by_a_limit_between_polls_is_counted_not_missed() -> None:
    """The reason bits are a snapshot; NVML's violation counters add up every nanosecond."""
    health = watch(FakeNvml(held_ns=(5_000_000, 5_000_000, 400_000_000, 400_000_000)))
    assert health.facts["held_back_ms"] == {"power": 395.0}
    assert "GPU held back by its power limit for 395 ms during the run" in health.warnings
    quiet = watch(FakeNvml(held_ns=(7, 7, 7)))
    assert quiet.facts["held_back_ms"] == {"power": 0.0}
    assert not [w for w in quiet.warnings if "held back" in w]
    assert "held_back_ms" not in watch(FakeNvml()).facts  # a board that does not count
