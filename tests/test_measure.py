"""Every variant on the small example models, on this machine's CPU.

The done-when of the engine: every CPU-capable variant is ok with ordered percentiles,
positive memory, compile time exactly for compiled variants, drift 0 for eager and > 0 for
int8 and pruned; CUDA-only variants state why they cannot run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from perfguard import MeasureSettings, SamplingSettings, VariantResult, compute_reference
from perfguard.examples import SmallCNN, SmallEncoder, SmallMLP, example_inputs
from perfguard.variants.spec import BASE_VARIANTS
from tests.measuring import measure

# pinned to the CPU: these expectations (RSS memory, host clock) are the CPU's; the CUDA
# paths have their own tests in test_cuda.py
FAST = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.05, repeats=2, min_samples_per_repeat=5),
    memory_calls=1,
    device="cpu",
)
CUDA_ONLY = {"compile-reduce-overhead"}
MODELS: dict[str, Callable[[], nn.Module]] = {
    "mlp": SmallMLP,
    "cnn": SmallCNN,
    "encoder": SmallEncoder,
}


@pytest.fixture(
    scope="module",  # every variant of three models measured: its tests are slow ones
    params=[pytest.param(name, marks=pytest.mark.slow) for name in sorted(MODELS)],
)
def measured(request: pytest.FixtureRequest) -> dict[str, VariantResult]:
    torch.manual_seed(0)
    model = MODELS[request.param]().eval()
    inputs = example_inputs(model)
    reference = compute_reference(model, inputs, torch.device("cpu"))
    return {
        v: measure(model, inputs, v, FAST, test=request.param, reference=reference)
        for v in BASE_VARIANTS
        if (request.param == "mlp" or v not in SAME_ON_THE_CPU) and v not in NOT_ON_THE_CPU
    }


SAME_ON_THE_CPU = {"compile-default", "compile-max-autotune", "amp-bf16", "amp-fp16"}
"""Variants measured on the MLP alone. perfguard's compiled path does not depend on the model
(what does is inductor's code generation, torch's to test): the CNN's and the encoder's cold
compiles cost 15 and 11 s on a 2-core CPU and proved nothing the MLP's does not. max-autotune
compiles as compile-default does, autotuning its matmuls; its no-cudagraphs twin is not
measured here at all: on the CPU the two compile alike, with no CUDA graphs to leave out.
Autocasting does not depend on the model either (the CNN's bf16 convolutions took 6 s of
CPU), and fp16 autocasts as bf16 does. Every variant of the MLP and the CNN runs on a GPU
(test_cuda.py), and the compiled training steps there compile all three training models."""
NOT_ON_THE_CPU = {
    "compile-max-autotune-no-cudagraphs",
    "aot-inductor",
    "compile-dynamic",
    "tensorrt",
    "fp8",
    "int4-weight-only",
}
"""(aot-inductor and compile-dynamic: measured on the CPU in test_serving.py, the MLP and its
export failure, shapes and recompiles; a package's C++ build costs 10-20 s a model here.
tensorrt, fp8 and int4-weight-only run on CUDA only: test_own_variants.py holds their skips.)"""


@pytest.mark.slow
def test_every_cpu_variant_is_ok_with_sane_metrics(measured: dict[str, VariantResult]) -> None:
    for variant, r in measured.items():
        if variant in CUDA_ONLY:
            continue
        m = r.metrics
        assert r.status == "ok", (variant, r.error)
        assert m.latency_p50_ms is not None and m.latency_p95_ms is not None
        assert m.latency_p99_ms is not None
        assert 0 < m.latency_p50_ms <= m.latency_p95_ms <= m.latency_p99_ms, variant
        assert m.peak_memory_bytes is not None and m.peak_memory_bytes > 0, variant
        compiled = variant.startswith("compile-")
        assert (m.compile_time_s is not None and m.compile_time_s > 0) == compiled, variant
        assert (m.compile_time_warm_s is not None) == compiled, variant
        assert m.model_size_bytes and m.model_size_bytes > 0
        assert len(r.samples_ms) == m.latency_samples and len(r.repeats_ms) == 2
        assert r.drift_check is not None and r.drift_check.passed, (variant, r.drift_check)


def test_drift_is_zero_for_eager_and_positive_for_int8_and_pruned(
    measured: dict[str, VariantResult],
) -> None:
    assert measured["eager"].metrics.drift_max_abs == 0.0
    assert measured["eager"].metrics.drift_cosine == 1.0
    for variant in (
        "int8-dynamic",
        "int8-weight-only",
        "prune-l1-unstructured",
        "prune-ln-structured",
    ):
        drift = measured[variant].metrics.drift_max_abs
        assert drift is not None and drift > 0, variant


def test_cuda_only_variants_say_why(measured: dict[str, VariantResult]) -> None:
    for variant in CUDA_ONLY:
        r = measured[variant]
        assert r.status == "skipped"
        assert r.error is not None and "needs a CUDA device" in r.error


def test_pruning_reports_its_sparsity_and_quantization_shrinks_the_model(
    measured: dict[str, VariantResult],
) -> None:
    assert measured["prune-l1-unstructured"].metrics.sparsity == pytest.approx(0.5, abs=0.01)
    assert measured["prune-ln-structured"].metrics.sparsity == pytest.approx(0.3, abs=0.05)
    assert measured["eager"].metrics.sparsity is None
    assert "no speed-up" in " ".join(measured["prune-l1-unstructured"].details.notes)
    eager_size = measured["eager"].metrics.model_size_bytes
    int8_size = measured["int8-weight-only"].metrics.model_size_bytes
    assert eager_size is not None and int8_size is not None and int8_size < eager_size


@pytest.mark.slow
def test_compiled_variants_count_graph_breaks_and_recompiles(
    measured: dict[str, VariantResult],
) -> None:
    if "compile-default" not in measured:
        pytest.skip("compiled on the MLP alone (SAME_ON_THE_CPU)")
    m = measured["compile-default"].metrics
    assert m.graph_breaks == 0 and m.recompiles == 0
    counted = measured["compile-default"].counters
    assert counted is not None and counted.graphs == 1 and not counted.break_reasons
    # that the counter is alive (a data-dependent branch splits the graph, and the break and its
    # reason are counted) is test_exact's graph-break test


@pytest.mark.slow
def test_composition_and_amount() -> None:
    model = SmallMLP().eval()
    r = measure(model, example_inputs(model), "prune-l1-unstructured:0.7+compile-default", FAST)
    assert r.status == "ok", r.error
    assert r.metrics.sparsity == pytest.approx(0.7, abs=0.01)
    assert r.metrics.compile_time_s is not None and r.metrics.compile_time_s > 0


@pytest.mark.slow
def test_onnxruntime_reports_export_and_session_time_apart() -> None:
    model = SmallMLP().eval()
    r = measure(model, example_inputs(model), "onnxruntime", FAST)
    assert r.status == "ok", r.error
    assert r.details.build["export_time_s"] > 0 and r.details.build["session_create_time_s"] > 0
    assert r.details.build["ort_provider"] == "CPUExecutionProvider"
    assert r.metrics.compile_time_s is None


@pytest.mark.slow
def test_the_callers_model_is_never_modified() -> None:
    model = SmallMLP().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    measure(model, example_inputs(model), "prune-l1-unstructured", FAST)
    measure(model, example_inputs(model), "int8-dynamic", FAST)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


class Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("shape mismatch in block 3\nmore detail")


class NaNs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.lin(x)
        return y * float("nan") if not torch.compiler.is_compiling() else y


@pytest.mark.slow
def test_a_model_that_raises_is_an_error_result_and_the_next_variant_is_fine() -> None:
    r = measure(Raises(), (torch.ones(2),), "eager", FAST)
    assert r.status == "error"
    assert r.error == "RuntimeError: shape mismatch in block 3"
    ok = measure(SmallMLP().eval(), example_inputs(SmallMLP()), "eager", FAST)
    assert ok.status == "ok"


@pytest.mark.slow
def test_the_turn_comes_after_the_build_and_before_anything_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same-job A/B builds both sides at once and waits at `turn` to time one at a time."""
    from perfguard.measure import runner

    log: list[str] = []
    build, compile_ = runner.build_variant, runner.compile_cached  # type: ignore[attr-defined]

    def logged(name: str, f: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            log.append(name)
            return f(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(runner, "build_variant", logged("build", build))
    monkeypatch.setattr(runner, "compile_cached", logged("compile", compile_))
    model = SmallMLP().eval()
    r = measure(model, example_inputs(model), "eager", FAST, turn=lambda: log.append("turn"))
    assert r.status == "ok"
    assert log == ["build", "turn", "compile"]
    # a model that fails before it is built never takes a turn
    log.clear()
    failed = measure(Raises(), (torch.ones(2),), "eager", FAST, turn=lambda: log.append("turn"))
    assert failed.status == "error"
    assert "turn" not in log


def test_nan_outputs_are_an_error() -> None:
    r = measure(NaNs(), (torch.ones(2, 4),), "eager", FAST)
    assert r.status == "error" and "NaN" in (r.error or "")


def test_torch_state_is_restored() -> None:
    threads = torch.get_num_threads()
    precision = torch.get_float32_matmul_precision()
    settings = MeasureSettings(sampling=FAST.sampling, threads=1, memory_calls=1, device="cpu")
    measure(SmallMLP().eval(), example_inputs(SmallMLP()), "eager", settings)
    assert torch.get_num_threads() == threads
    assert torch.get_float32_matmul_precision() == precision
    assert torch.is_grad_enabled()


def test_inputs_must_be_a_tuple() -> None:
    with pytest.raises(TypeError, match="tuple of positional"):
        measure(SmallMLP(), torch.ones(1, 256), "eager", FAST)


class OutOfMemory(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


def test_out_of_memory_is_an_error_result() -> None:
    r = measure(OutOfMemory(), (torch.ones(2),), "eager", FAST)
    assert r.status == "error"
    assert r.error is not None and r.error.startswith("out of memory: ")


def test_the_profiler_is_asked_to_let_go_of_cuda_where_that_is_safe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counting must not slow the items after it: CUPTI detached after each profile."""
    import os

    from perfguard.measure.counters import let_go_of_cupti

    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    assert let_go_of_cupti("13.0") and os.environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.delenv("TEARDOWN_CUPTI")
    assert not let_go_of_cupti("12.4") and "TEARDOWN_CUPTI" not in os.environ
    assert not let_go_of_cupti("None")  # a CPU build
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")  # the user's (or torch's) choice stands
    assert not let_go_of_cupti("13.0") and os.environ["TEARDOWN_CUPTI"] == "0"


def test_int8_layers_that_cublas_cannot_take_are_named() -> None:
    """On CUDA torchao quietly multiplies such layers in int32 on the CPU (features not
    multiples of 8) or in float32 (16 rows or fewer): the notes say which. The rule reads
    shapes only, so it is checked here on the CPU."""
    pytest.importorskip("torchao")
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    from perfguard.variants.quantize import int8_fallbacks

    model = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 64)).eval()
    quantize_(model, Int8DynamicActivationInt8WeightConfig())
    few_rows = int8_fallbacks(model, lambda: model(torch.randn(4, 30)))
    assert few_rows == [
        "1 of 2 int8 Linear layers have in or out features that are not multiples of 8 (0): "
        "torchao multiplies them in int32 on the CPU, not in a cuBLAS int8 kernel",
        "1 of 2 int8 Linear layers see 16 rows or fewer (2), too few for cuBLAS's int8 "
        "matmul: torchao multiplies them in float32",
    ]
    assert int8_fallbacks(model, lambda: model(torch.randn(2, 32, 30)))[1:] == []
