"""`amp-bf16` and `amp-fp16`: the model run under `torch.autocast` to that dtype."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from perfguard.variants.spec import VariantPart

DTYPES = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}


class Amp:
    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None:
        if not torch.amp.is_autocast_available(device.type):
            return f"{part.name}: autocast is not available on {device.type}"
        if part.name == "amp-bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return f"{part.name}: this GPU does not support bfloat16"
        return None

    def dtype(self, part: VariantPart) -> torch.dtype:
        return DTYPES[part.name]

    @staticmethod
    def context(
        dtype: torch.dtype | None, device: torch.device
    ) -> Callable[[], contextlib.AbstractContextManager[object]]:
        """A fresh autocast context to `dtype` on `device` per call; a no-op for None."""
        if dtype is None:
            return contextlib.nullcontext
        return lambda: torch.autocast(device.type, dtype=dtype)
