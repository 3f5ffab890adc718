"""Quantization with torchao (not the deprecated torch.ao.quantization): `int8-dynamic` and
`int8-weight-only` anywhere torchao runs, and for serving on CUDA `int4-weight-only` (torchao's
int4 weight-only kernels) and `fp8` (float8 weights and dynamic float8 activations, for GPUs
with float8 tensor cores: compute capability 8.9 and up, Ada, Hopper and later)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from perfguard.variants.base import Requirements, VariantUnavailableError, first_line
from perfguard.variants.spec import VariantPart


def _config(name: str) -> Any:
    from torchao import quantization

    if name == "int8-dynamic":
        return quantization.Int8DynamicActivationInt8WeightConfig()
    if name == "int4-weight-only":
        return quantization.Int4WeightOnlyConfig(group_size=128)
    if name == "fp8":
        return quantization.Float8DynamicActivationFloat8WeightConfig()
    return quantization.Int8WeightOnlyConfig()


BF16_ACTIVATIONS = ("int4-weight-only",)
"""Quantized in bfloat16 and run under bfloat16 autocast: torchao's int4 weight-only kernels
(tinygemm, fbgemm) take bfloat16 weights and activations, as LLM serving runs them."""

FP8_CAPABILITY = (8, 9)
"""The first compute capability with float8 tensor cores (Ada; Hopper is 9.0)."""


def _quantized(model: nn.Module) -> dict[str, nn.Linear]:
    return {
        name: m
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and type(m.weight).__module__.startswith("torchao")
    }


def _quantized_count(model: nn.Module) -> int:
    return len(_quantized(model))


CUBLAS_MIN_ROWS = 17  # torch._int_mm on CUDA wants more than 16 rows


def int8_fallbacks(model: nn.Module, call: Callable[[], Any]) -> list[str]:
    """int8-dynamic on CUDA: the quantized layers whose int8 matmul cuBLAS cannot take, said.

    torchao hands the int8 matmul to `torch._int_mm` (cuBLAS) only when the layer's in and
    out features are multiples of 8; otherwise it multiplies in int32 on the CPU and copies
    back. cuBLAS also refuses 16 rows or fewer (batch x sequence), and torchao then
    multiplies in float32. Either way the variant runs, slower than an int8 kernel, and
    nothing says so: these notes do. `call` runs the model once, to see each layer's rows."""
    layers = _quantized(model)
    rows: dict[str, int] = {}

    def seen(name: str) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0] if args else None
            if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[-1]:
                rows[name] = min(rows.get(name, x.numel()), x.numel() // x.shape[-1])

        return hook

    hooks = [m.register_forward_pre_hook(seen(name)) for name, m in layers.items()]
    try:
        with torch.inference_mode():
            call()
    finally:
        for h in hooks:
            h.remove()
    unaligned = [n for n, m in layers.items() if m.in_features % 8 or m.out_features % 8]
    few = [n for n, r in rows.items() if r < CUBLAS_MIN_ROWS and n not in unaligned]
    notes = []
    if unaligned:
        notes.append(
            f"{len(unaligned)} of {len(layers)} int8 Linear layers have in or out features "
            f"that are not multiples of 8 ({', '.join(unaligned[:3])}"
            f"{', ...' if len(unaligned) > 3 else ''}): torchao multiplies them in int32 on "
            "the CPU, not in a cuBLAS int8 kernel"
        )
    if few:
        notes.append(
            f"{len(few)} of {len(layers)} int8 Linear layers see {CUBLAS_MIN_ROWS - 1} rows "
            f"or fewer ({', '.join(few[:3])}{', ...' if len(few) > 3 else ''}), too few for "
            "cuBLAS's int8 matmul: torchao multiplies them in float32"
        )
    return notes


class Quantize:
    requirements = Requirements(packages=("torchao",), extra="torchao")

    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None:
        if part.name in ("int4-weight-only", "fp8") and device.type != "cuda":
            return f"{part.name} runs torchao's CUDA kernels; this run is on {device.type}"
        missing = self.requirements.unmet(part.name, device)
        if missing or part.name != "fp8":
            return missing
        capability = torch.cuda.get_device_capability(device)
        if capability < FP8_CAPABILITY:
            name = torch.cuda.get_device_name(device)
            return (
                f"fp8 needs float8 tensor cores (compute capability 8.9 or newer: Ada, H100, "
                f"H200); {name} is {capability[0]}.{capability[1]}"
            )
        return None

    def apply(self, model: nn.Module, part: VariantPart, built_notes: list[str]) -> nn.Module:
        from torchao.quantization import quantize_

        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise VariantUnavailableError(
                f"{part.name}: torchao quantizes nn.Linear layers and the model has none"
            )
        if part.name in BF16_ACTIVATIONS:
            for linear in linears:
                linear.to(torch.bfloat16)
        try:
            quantize_(model, _config(part.name))
        except (RuntimeError, NotImplementedError, ValueError, AssertionError) as exc:
            first = first_line(exc)
            raise VariantUnavailableError(
                f"{part.name}: torchao could not quantize: {first}"
            ) from exc
        done = _quantized_count(model)
        if done == 0:
            raise VariantUnavailableError(
                f"{part.name}: torchao left every nn.Linear unquantized on this device and dtype"
            )
        built_notes.append(f"{done} of {len(linears)} Linear layers quantized by torchao")
        return model
