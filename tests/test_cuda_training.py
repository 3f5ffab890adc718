"""Workloads beyond a forward call on CUDA: training steps of the CPU tests' three models (an
MLP, a CNN, BERT from its config) in eager, compile-default and both autocast dtypes, and
generations of their GPT-2 and Llama. A file of its own, so that gpu-check runs it as a step
after the other cuda tests (its compiles are the slowest of them).

Marked `cuda`: skipped with a reason where no GPU is present (see conftest.py).
"""

from __future__ import annotations

import pytest

from perfguard import MeasureSettings, SamplingSettings
from tests.measuring import measure

pytestmark = pytest.mark.cuda

FAST = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.1, repeats=2, min_samples_per_repeat=5), device="cuda"
)


@pytest.mark.parametrize("variant", ["eager", "compile-default", "amp-bf16", "amp-fp16"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "bert"])
def test_a_training_step_on_cuda_counts_gradients_and_optimizer_state(
    name: str, variant: str
) -> None:
    """The models of the CPU's training tests, on the GPU: the step's peak holds the weights,
    their gradients and AdamW's two moments (four times the weights at least); compiled steps
    count their backward graphs; fp16 scales its loss; drift stays in its class."""
    from tests.test_training import case

    model, inputs, named, step = case(name)
    r = measure(model, inputs, variant, FAST, kwargs=named, work=step)
    assert r.status == "ok", r.error
    assert r.workload == "train" and r.details.clock == "cuda_event"
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    m = r.metrics
    assert m.peak_memory_bytes is not None and m.peak_memory_bytes >= 4 * weights
    assert m.throughput_per_s and m.device_time_ms is not None
    assert r.drift_check is not None and r.drift_check.passed, r.drift_check
    counted = r.counters
    assert counted is not None and counted.memory_growth_bytes_per_call == 0
    if variant == "compile-default":
        assert counted.backward_graphs == counted.graphs and counted.graph_breaks == 0


@pytest.mark.parametrize("variant", ["eager", "compile-default", "compile-reduce-overhead"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_generation_on_cuda_times_its_tokens_and_makes_eagers(name: str, variant: str) -> None:
    """The CPU tests' GPT-2 and Llama generating on the GPU: every figure, each token timed
    after a synchronize, eager's tokens, the static cache's decode step compiled (and replayed
    as a CUDA graph under reduce-overhead)."""
    from perfguard import Generation
    from tests.test_generation import gpt2, llama, prompt

    model = gpt2() if name == "gpt2" else llama()
    r = measure(model, (prompt(),), variant, FAST, test=name, work=Generation(6))
    assert r.status == "ok", r.error
    assert r.workload == "generate" and r.details.clock == "cuda_event"
    m = r.metrics
    assert m.ttft_p50_ms and m.tpot_p50_ms and m.tokens_per_s and m.latency_p50_ms
    assert m.ttft_p50_ms < m.latency_p50_ms
    assert m.token_agreement == 1.0
    assert r.drift_check is not None and r.drift_check.passed, r.drift_check
    assert m.peak_memory_bytes is not None and m.peak_memory_bytes > 0
    if variant == "compile-reduce-overhead":  # each decode step replays the graph recorded once
        counted = r.counters
        assert r.details.cudagraph_skips == 0 and m.recompiles == 0
        assert counted is not None and counted.cudagraph_launches is not None
        assert counted.cudagraph_launches >= 6 - 1  # a graph a decode step; the prefill eager
