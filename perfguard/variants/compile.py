"""`compile-*`: `torch.compile(model, mode=...)`. Compilation happens on the first call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from perfguard.variants.base import Requirements
from perfguard.variants.spec import VariantPart

DYNAMIC = "compile-dynamic"
"""torch.compile with every dimension dynamic: compiled once and measured at every shape the
test declares (its marker's `shapes`), its recompiles across them counted."""
CUDA_GRAPH_MODES = {"compile-reduce-overhead"}
GRAPHED_ON_CUDA = {"compile-reduce-overhead", "compile-max-autotune"}
"""The modes that record CUDA graphs on a GPU (max-autotune does too, unless told not to)."""
POOL_NOTE = (
    "memory: a CUDA-graph variant keeps its activations in the graph's private pool, "
    "allocated when the graph was recorded; peak memory is what the replays allocate "
    "(about weights and outputs), reserved memory holds the pool"
)


class Compile:
    def requirements_for(self, part: VariantPart) -> Requirements:
        if part.name in CUDA_GRAPH_MODES:
            return Requirements(
                cuda=True,
                why_cuda="its point is CUDA graphs; on a CPU it would measure compile-default",
            )
        return Requirements()

    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None:
        if not hasattr(torch, "compile"):
            return f"{part.name}: this torch has no torch.compile"
        return self.requirements_for(part).unmet(part.name, device)

    def compiler(self, part: VariantPart) -> Callable[[nn.Module], Callable[..., Any]]:
        if part.name == DYNAMIC:  # every dimension dynamic from the first compile
            return lambda model: torch.compile(model, dynamic=True)
        mode = part.name.removeprefix("compile-")
        return lambda model: torch.compile(model, mode=mode)
