"""`tensorrt`: the model built into a TensorRT engine, through Torch-TensorRT where it is
installed, else through ONNX Runtime's TensorRT execution provider (onnxruntime-gpu built
with it). CUDA only.

The engine's build (Torch-TensorRT's compile, or the export and the session's engine build)
is the variant's compile time. fp32 by default; `amp-fp16+tensorrt` builds an fp16 engine
(`amp-bf16+tensorrt`: bf16 where Torch-TensorRT allows it). Judged in the compiled-fp32 class,
or reduced-precision with its amp part.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from perfguard.variants.base import VariantUnavailableError, first_line
from perfguard.variants.own import Engine, timed_build
from perfguard.variants.spec import VariantPart

INSTALL = (
    'pip install torch-tensorrt (a build matching this torch), or "perfguard[onnx-gpu]" with '
    "TensorRT's libraries for ONNX Runtime's TensorRT provider"
)


def _ort_has_tensorrt() -> bool:
    if importlib.util.find_spec("onnxruntime") is None:
        return False
    import onnxruntime

    from perfguard.variants.ort import TENSORRT_PROVIDER

    return TENSORRT_PROVIDER in onnxruntime.get_available_providers()


class TensorRT:
    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None:
        if device.type != "cuda":
            return f"{part.name} builds a TensorRT engine, CUDA only; this run is on {device.type}"
        if importlib.util.find_spec("torch_tensorrt") is None and not _ort_has_tensorrt():
            return (
                f"{part.name} needs Torch-TensorRT or ONNX Runtime's TensorRT provider: {INSTALL}"
            )
        return None

    def build(
        self,
        model: nn.Module,
        inputs: Sequence[Any],
        named: Mapping[str, Any],
        device: torch.device,
        dtype: torch.dtype | None,
    ) -> Engine:
        """The engine, built now (timed); `dtype`: the amp part's, for a reduced-precision
        engine."""
        via = _torch_tensorrt if importlib.util.find_spec("torch_tensorrt") else _onnxruntime
        engine, seconds = timed_build(device, lambda: via(model, inputs, named, device, dtype))
        engine.build_s = seconds
        return engine


def _torch_tensorrt(
    model: nn.Module,
    inputs: Sequence[Any],
    named: Mapping[str, Any],
    device: torch.device,
    dtype: torch.dtype | None,
) -> Engine:
    import torch_tensorrt

    precisions = {torch.float32, *([dtype] if dtype is not None else [])}
    try:
        engine = torch_tensorrt.compile(
            model,
            ir="dynamo",
            inputs=list(inputs),
            kwarg_inputs=dict(named) or None,
            enabled_precisions=precisions,
        )
    except Exception as exc:  # an op TensorRT cannot convert, a shape it cannot take
        raise VariantUnavailableError(
            f"tensorrt: Torch-TensorRT could not build an engine: {first_line(exc)}"
        ) from exc
    version = getattr(torch_tensorrt, "__version__", "?")
    via = {"tensorrt_via": f"torch_tensorrt {version}"}
    return Engine(run=engine, device=device, details=via, autocast=False)


def _onnxruntime(
    model: nn.Module,
    inputs: Sequence[Any],
    named: Mapping[str, Any],
    device: torch.device,
    dtype: torch.dtype | None,
) -> Engine:
    from perfguard.variants.ort import OnnxRuntime

    details: dict[str, Any] = {"tensorrt_via": "onnxruntime"}
    make_call, fetch = OnnxRuntime().build(
        model, inputs, device, details, named, tensorrt_fp16=dtype == torch.float16
    )
    call = make_call()  # the session holds the inputs it was bound to
    return Engine(
        run=lambda *_args, **_named: call(),
        device=device,
        details=details,
        fetch_outputs=fetch,
        autocast=False,
    )
