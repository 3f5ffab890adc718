"""The ONNX Runtime variant's CUDA decisions, with a stand-in session (no GPU needed)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from perfguard.variants.base import VariantUnavailableError
from perfguard.variants.ort import _cuda_call, _feeds_in_order, check_provider, provider_list


class Binding:
    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []
        self.outputs: list[tuple[str, str, int]] = []

    def bind_input(self, **kwargs: Any) -> None:
        self.inputs.append(kwargs)

    def bind_output(self, name: str, device: str, index: int) -> None:
        self.outputs.append((name, device, index))

    def copy_outputs_to_cpu(self) -> list[Any]:
        return []


class Session:
    def __init__(self, providers: list[str]) -> None:
        self.providers = providers
        self.binding = Binding()
        self.runs = 0

    def get_providers(self) -> list[str]:
        return self.providers

    def io_binding(self) -> Binding:
        return self.binding

    def get_outputs(self) -> list[Any]:
        return [type("Out", (), {"name": "y"})()]

    def run_with_iobinding(self, binding: Binding) -> None:
        self.runs += 1


def test_the_cuda_session_runs_on_the_runs_gpu_without_tf32() -> None:
    providers = provider_list(True, 2)
    assert providers[0] == ("CUDAExecutionProvider", {"device_id": 2, "use_tf32": 0})
    assert provider_list(False, 0) == ["CPUExecutionProvider"]


def test_a_session_that_fell_back_to_the_cpu_is_refused_on_cuda() -> None:
    with pytest.raises(VariantUnavailableError, match="runs on CPUExecutionProvider"):
        check_provider(Session(["CPUExecutionProvider"]), use_cuda=True)
    assert check_provider(Session(["CPUExecutionProvider"]), use_cuda=False) == (
        "CPUExecutionProvider"
    )
    both = Session(["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert check_provider(both, use_cuda=True) == "CUDAExecutionProvider"


@pytest.mark.slow
def test_bound_inputs_live_as_long_as_the_call() -> None:
    session = Session(["CUDAExecutionProvider"])
    tensors = [torch.randn(4, 4)]
    watch = weakref.ref(tensors[0])
    make_call, _ = _cuda_call(session, ["x"], tensors, 3)
    assert session.binding.inputs[0]["device_id"] == 3
    assert session.binding.inputs[0]["buffer_ptr"] == tensors[0].data_ptr()
    del tensors
    gc.collect()
    assert watch() is not None  # the closure holds it while the pointer is bound
    make_call()()
    assert session.runs == 1
    del make_call
    gc.collect()


def test_keyword_inputs_feed_the_graph_inputs_of_their_name() -> None:
    a, b, m = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    fed = _feeds_in_order(["a", "mask", "b"], [a, b], {"mask": m})
    assert [float(t[0]) for t in fed] == [0.0, 2.0, 1.0]
    with pytest.raises(VariantUnavailableError, match="3 inputs"):
        _feeds_in_order(["a", "b", "c"], [a], {"mask": m})


def test_on_cuda_without_the_cuda_provider_the_variant_skips_before_exporting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import onnxruntime

    from perfguard.variants.ort import OnnxRuntime
    from perfguard.variants.spec import VariantPart

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    part = VariantPart("onnxruntime", "onnxruntime")
    why = OnnxRuntime().unavailable_reason(part, torch.device("cuda"))
    assert why is not None and "needs the package 'onnxruntime-gpu'" in why
    assert 'pip install "perfguard[onnx-gpu]"' in why
    assert OnnxRuntime().unavailable_reason(part, torch.device("cpu")) is None
