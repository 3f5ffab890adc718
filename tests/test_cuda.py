"""CUDA paths: the event clock, the allocator's peaks, and the GPU-only variants.

Marked `cuda`: skipped with a reason where no GPU is present (see conftest.py).
"""

from __future__ import annotations

import pytest
import torch

from perfguard import MeasureSettings, SamplingSettings
from perfguard import measure_model as measure
from perfguard.examples import SmallCNN, SmallMLP, example_inputs
from perfguard.measure.clock import CudaEventClock, HostClock
from perfguard.measure.memory import CudaMemory
from perfguard.variants.spec import BASE_VARIANTS

pytestmark = pytest.mark.cuda

FAST = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.1, repeats=2, min_samples_per_repeat=5), device="cuda"
)


def test_event_clock_times_gpu_work_not_the_launch() -> None:
    device = torch.device("cuda")
    a = torch.randn(4096, 4096, device=device)
    torch.cuda.synchronize()
    gpu = CudaEventClock(device).time_call(lambda: a @ a)
    host = HostClock().time_call(lambda: a @ a)  # no sync: only the launch
    torch.cuda.synchronize()
    assert gpu > 0.1  # a 4096^3 matmul takes well over 0.1 ms on any GPU
    assert host < gpu


def test_cuda_memory_peak_sees_a_temporary_allocation() -> None:
    device = torch.device("cuda")
    probe = CudaMemory(device)
    probe.start()
    tmp = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=device)
    del tmp
    reading = probe.stop()
    assert reading.peak_bytes >= 64 * 1024 * 1024
    assert reading.reserved_bytes is not None and reading.reserved_bytes >= reading.peak_bytes


@pytest.mark.parametrize("model_cls", [SmallMLP, SmallCNN])
def test_every_variant_runs_on_cuda(model_cls: type[torch.nn.Module]) -> None:
    model = model_cls().eval()
    inputs = example_inputs(model)
    for variant in BASE_VARIANTS:
        r = measure(model, inputs, variant, FAST)
        assert r.status in ("ok", "skipped"), (variant, r.error)
        if r.status == "skipped":  # only for a missing optional package, said plainly
            assert r.error and "needs the package" in r.error, (variant, r.error)
            continue
        m = r.metrics
        assert m.latency_p50_ms and m.latency_p95_ms and m.latency_p99_ms
        assert m.latency_p50_ms <= m.latency_p95_ms <= m.latency_p99_ms
        assert m.peak_memory_bytes and m.peak_memory_bytes > 0
        assert m.peak_memory_reserved_bytes is not None
        assert r.details["clock"] == (
            "perf_counter_ns" if variant == "onnxruntime" else "cuda_event"
        )
        assert (m.compile_time_s is not None) == variant.startswith("compile-")
        assert r.drift_check is not None and r.drift_check.passed, (variant, r.drift_check)


def test_reduce_overhead_uses_cuda_graphs_and_compiles_once() -> None:
    model = SmallMLP().eval()
    r = measure(model, example_inputs(model), "compile-reduce-overhead", FAST)
    assert r.status == "ok", r.error
    assert r.metrics.recompiles == 0
