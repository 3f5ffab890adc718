"""`int8-dynamic` and `int8-weight-only` with torchao (not the deprecated torch.ao.quantization)."""

from __future__ import annotations

from typing import Any

from torch import nn

from perfguard.variants.base import Requirements, VariantUnavailableError, first_line
from perfguard.variants.spec import VariantPart


def _config(name: str) -> Any:
    from torchao import quantization

    if name == "int8-dynamic":
        return quantization.Int8DynamicActivationInt8WeightConfig()
    return quantization.Int8WeightOnlyConfig()


def _quantized_count(model: nn.Module) -> int:
    return sum(
        1
        for m in model.modules()
        if isinstance(m, nn.Linear) and type(m.weight).__module__.startswith("torchao")
    )


class Quantize:
    requirements = Requirements(packages=("torchao",), extra="torchao")
    tolerance_class = "int8"

    def apply(self, model: nn.Module, part: VariantPart, built_notes: list[str]) -> nn.Module:
        from torchao.quantization import quantize_

        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise VariantUnavailableError(
                f"{part.name}: torchao quantizes nn.Linear layers and the model has none"
            )
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
