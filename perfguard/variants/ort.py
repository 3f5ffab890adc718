"""`onnxruntime`: export with the dynamo-based ONNX exporter, run in an ONNX Runtime session.

Export and session creation happen at build time and are reported as such, never
timed as inference. On CUDA the session must run on the CUDA provider of the run's device
(`device_id`), checked after it is created: a session that fell back to the CPU is refused,
not timed. Inputs and outputs then stay on the GPU through IO binding, so the timed call is
inference, not host copies; the bound input tensors live as long as the call does.

Same numerics: the variant is judged in the compiled-fp32 class, against the same fp32
reference as `torch.compile`. ORT's CUDA provider runs fp32 matmuls and convolutions in TF32
by default, which torch does not (`torch.backends.cuda.matmul.allow_tf32` is off), so TF32 is
turned off here (`use_tf32=0`): the variant then measures ONNX Runtime, not a precision change.
Its memory is ORT's own arena, which torch's allocator cannot see: on CUDA the peak is not
reported (the result says why); on the CPU the process peak RSS includes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from perfguard.variants.base import Requirements, VariantUnavailableError, first_line
from perfguard.variants.exporting import quiet_export
from perfguard.variants.spec import VariantPart


def _numpy_dtype(dtype: torch.dtype) -> Any:
    return torch.empty(0, dtype=dtype).numpy().dtype


class OnnxRuntime:
    requirements = Requirements(
        packages=("onnxruntime", "onnx", "onnxscript"), extra="onnx", extra_on_cuda="onnx-gpu"
    )

    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None:
        missing = self.requirements.unmet(part.name, device)
        if missing is not None or device.type != "cuda":
            return missing
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            # said before the export (seconds) is begun, not after it
            return (
                f"{part.name} needs the package 'onnxruntime-gpu' on CUDA (the installed "
                'onnxruntime has no CUDAExecutionProvider): pip install "perfguard[onnx-gpu]", '
                "without the CPU package onnxruntime beside it"
            )
        return None

    def build(
        self,
        model: nn.Module,
        inputs: Sequence[Any],
        device: torch.device,
        details: dict[str, Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        tensorrt_fp16: bool | None = None,
    ) -> tuple[Callable[[], Callable[[], Any]], Callable[[Callable[[], Any]], Any] | None]:
        """Export and open a session; return `make_call` and, on CUDA, how to read outputs.
        `tensorrt_fp16` not None: on ONNX Runtime's TensorRT provider (fp16 where True)."""
        import onnxruntime as ort

        named = dict(kwargs or {})
        if not all(isinstance(x, torch.Tensor) for x in [*inputs, *named.values()]):
            raise VariantUnavailableError(
                "onnxruntime: only tensor inputs (positional or keyword) can be fed to an "
                "ONNX session"
            )
        started = time.perf_counter()
        try:
            program = _export(model, tuple(inputs), named)
        except Exception as exc:  # the exporter raises many kinds; all mean "cannot export"
            first = first_line(exc)
            raise VariantUnavailableError(f"onnxruntime: the ONNX export failed: {first}") from exc
        data = program.model_proto.SerializeToString()
        details["export_time_s"] = time.perf_counter() - started
        details["onnx_model_bytes"] = len(data)

        use_cuda = device.type == "cuda"  # (its provider is there: unavailable_reason)
        index = _cuda_index(device) if use_cuda else 0
        providers = provider_list(use_cuda, index, tensorrt_fp16)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if use_cuda:  # a node the CUDA provider cannot run fails the session, never runs on the CPU
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        started = time.perf_counter()
        try:
            session = ort.InferenceSession(data, sess_options=options, providers=providers)
        except Exception as exc:  # on CUDA: a node its provider cannot run (no CPU fallback)
            if not use_cuda:
                raise
            raise VariantUnavailableError(
                f"onnxruntime: the CUDA provider cannot run this model whole: {first_line(exc)}"
            ) from exc
        details["session_create_time_s"] = time.perf_counter() - started
        details["ort_provider"] = check_provider(session, use_cuda, tensorrt_fp16 is not None)
        names = [i.name for i in session.get_inputs()]
        tensors = _feeds_in_order(names, inputs, named)
        if use_cuda:
            return _cuda_call(session, names, tensors, index)
        feeds = {name: t.detach().cpu().numpy() for name, t in zip(names, tensors, strict=True)}

        def make_call() -> Callable[[], Any]:
            return lambda: session.run(None, feeds)

        return make_call, None


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


TENSORRT_PROVIDER = "TensorrtExecutionProvider"


def provider_list(use_cuda: bool, index: int, tensorrt_fp16: bool | None = None) -> list[Any]:
    """The session's providers: on CUDA, the run's GPU with fp32 kept fp32 (no TF32); with
    `tensorrt_fp16` not None, TensorRT's provider first (fp16 where True)."""
    if not use_cuda:
        return ["CPUExecutionProvider"]
    cuda = [("CUDAExecutionProvider", {"device_id": index, "use_tf32": 0}), "CPUExecutionProvider"]
    if tensorrt_fp16 is None:
        return cuda
    trt = {"device_id": index, "trt_fp16_enable": bool(tensorrt_fp16)}
    return [(TENSORRT_PROVIDER, trt), *cuda]


def check_provider(session: Any, use_cuda: bool, tensorrt: bool = False) -> str:
    """The provider the session really runs on; a CUDA session that fell back is refused."""
    used = list(session.get_providers())
    first = used[0] if used else "none"
    wanted = TENSORRT_PROVIDER if tensorrt else "CUDAExecutionProvider"
    if use_cuda and first != wanted:
        raise VariantUnavailableError(
            f"onnxruntime: the session runs on {first}, not {wanted} (a CUDA, cuDNN or "
            "TensorRT library onnxruntime-gpu needs is missing?): not timed as a CUDA variant"
        )
    return first


def _feeds_in_order(
    names: Sequence[str], inputs: Sequence[torch.Tensor], kwargs: Mapping[str, torch.Tensor]
) -> list[torch.Tensor]:
    """The tensors for the session's inputs, in its order: a keyword input by its name, the
    positional ones in turn (the exporter names graph inputs after `forward`'s parameters)."""
    positional = list(inputs)
    if len(names) != len(inputs) + len(kwargs):
        raise VariantUnavailableError(
            f"onnxruntime: the exported graph takes {len(names)} inputs, the example has "
            f"{len(inputs)} positional and {len(kwargs)} keyword"
        )
    out = []
    for name in names:
        if name in kwargs:
            out.append(kwargs[name])
        elif positional:
            out.append(positional.pop(0))
        else:
            raise VariantUnavailableError(
                f"onnxruntime: the exported graph's input {name!r} matches no keyword input"
            )
    return [t.contiguous() for t in out]


def _export(model: nn.Module, inputs: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    # the exporter prints progress lines and logs warnings about torchvision ops: kept quiet
    with quiet_export():
        return torch.onnx.export(model, inputs, kwargs=dict(kwargs), dynamo=True, verbose=False)


def _cuda_call(
    session: Any, names: Sequence[str], tensors: Sequence[torch.Tensor], index: int
) -> tuple[Callable[[], Callable[[], Any]], Callable[[Callable[[], Any]], Any]]:
    binding = session.io_binding()
    # ORT holds only the pointers: the tensors must live as long as the binding is used
    keep_alive = tuple(tensors)
    for name, t in zip(names, keep_alive, strict=True):
        binding.bind_input(
            name=name,
            device_type="cuda",
            device_id=index,
            element_type=_numpy_dtype(t.dtype),
            shape=tuple(t.shape),
            buffer_ptr=t.data_ptr(),
        )
    for out in session.get_outputs():
        binding.bind_output(out.name, "cuda", index)

    def run(_inputs: tuple[torch.Tensor, ...] = keep_alive) -> None:
        # (`_inputs` keeps the bound tensors alive for as long as this call exists)
        session.run_with_iobinding(binding)  # synchronous: returns when outputs are ready

    def make_call() -> Callable[[], Any]:
        return run

    def fetch_outputs(call: Callable[[], Any]) -> list[np.ndarray[Any, Any]]:
        call()
        return [np.asarray(o) for o in binding.copy_outputs_to_cpu()]

    return make_call, fetch_outputs
