"""`prune-l1-unstructured` and `prune-ln-structured`: torch.nn.utils.prune, made permanent.

Pruning zeroes weights but keeps them dense, so by itself it gives no speed-up;
the result says so rather than pretend.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import prune

from perfguard.variants.base import VariantUnavailableError, prunable_layers
from perfguard.variants.spec import VariantPart

NOTE = (
    "pruned weights stay dense: no speed-up is expected without a sparse kernel or "
    "a structured re-layout"
)


class Prune:
    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None:
        return None  # torch's own pruning runs wherever torch does

    def apply(self, model: nn.Module, part: VariantPart, built_notes: list[str]) -> nn.Module:
        layers = prunable_layers(model)
        if not layers:
            raise VariantUnavailableError(
                f"{part.name}: the model has no Linear or Conv layers to prune"
            )
        amount = part.amount
        assert amount is not None  # parse_variant always fills the default
        for layer in layers:
            if part.name == "prune-l1-unstructured":
                prune.l1_unstructured(layer, name="weight", amount=amount)
            else:
                prune.ln_structured(layer, name="weight", amount=amount, n=2, dim=0)
            prune.remove(layer, "weight")  # permanent: drop the mask and the hook
        built_notes.append(NOTE)
        return model
