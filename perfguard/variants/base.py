"""What a built variant is, what a family must say about itself, and shared measurements."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from torch import nn

from perfguard.errors import PerfguardError
from perfguard.variants.spec import VariantPart

Timing = Literal["device", "host"]
"""`device`: time with the device clock (CUDA events on CUDA). `host`: the call is synchronous."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type name when it has none."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class VariantUnavailableError(PerfguardError):
    """This variant cannot run here (no CUDA, a missing package, an unsupported model)."""


class VariantBuildError(PerfguardError):
    """A registered variant's own build failed or returned what it may not: the item's error,
    naming the variant and who registered it."""


@dataclass(frozen=True)
class Requirements:
    """What a variant needs; `unmet` says in one sentence what is missing, and how to get it."""

    cuda: bool = False
    packages: tuple[str, ...] = ()
    why_cuda: str = ""
    extra: str | None = None  # perfguard's extra that brings `packages`
    extra_on_cuda: str | None = None  # ... when the run is on CUDA, if another one

    def unmet(self, name: str, device: torch.device) -> str | None:
        if self.cuda and device.type != "cuda":
            return f"{name} needs a CUDA device ({self.why_cuda}); this run is on {device.type}"
        for package in self.packages:
            if importlib.util.find_spec(package) is None:
                extra = (self.extra_on_cuda if device.type == "cuda" else None) or self.extra
                how = f'pip install "perfguard[{extra}]"' if extra else f"pip install {package}"
                return f"{name} needs the package {package!r}: {how}"
        return None


@dataclass
class Built:
    """A variant ready to run: `make_call()` returns the callable that runs one inference.

    Compiled variants compile lazily on the first call of a fresh `make_call()`, which is
    how the measurer times cold and warm compilation.
    """

    make_call: Callable[[], Callable[[], Any]]
    timing: Timing
    tolerance_class: str
    compiled: bool = False
    build_s: float | None = None
    """An ahead-of-time build's seconds (a package, an engine): its compile time."""
    model_size_bytes: int | None = None
    sparsity: float | None = None
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    fetch_outputs: Callable[[Callable[[], Any]], Any] | None = None
    """How to get outputs for the drift check from a call; default: the call's return value."""
    autocast_dtype: Any = None
    """The dtype a reduced-precision variant runs in (its drift is held to eager's in it)."""
    training: bool = False  # a training step (`training.py`), not a forward call
    generation: Any = None  # a generation's token clock (`generation.TokenTimes`)
    memory_unseen: str | None = None
    # the module as measured (quantized, pruned; not compiled), and one call of it uncompiled:
    # what the exact counters look at (parameter bytes, FLOPs)
    module: nn.Module | None = None
    eager_call: Callable[[], Any] | None = None
    """Why torch's memory probe cannot see this variant's memory (ORT's own CUDA arena)."""

    def outputs(self, call: Callable[[], Any]) -> Any:
        return call() if self.fetch_outputs is None else self.fetch_outputs(call)


def compiled_or_eager(
    module: nn.Module, compiler: Callable[[nn.Module], Callable[..., Any]] | None, compiled: bool
) -> Callable[..., Any]:
    """`module` through `compiler` when there is one and `compiled` asks for it (each call a
    fresh compile: the cold and the warm one are timed apart), else `module` itself."""
    return compiler(module) if compiled and compiler is not None else module


class ModuleTransform(Protocol):
    """A family that rewrites the module (pruning, quantization) before it runs."""

    def unavailable_reason(self, part: VariantPart, device: torch.device) -> str | None: ...

    def apply(self, model: nn.Module, part: VariantPart, built_notes: list[str]) -> nn.Module: ...


def _leaf_tensors(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The plain tensors behind `t`, unpacking tensor subclasses (torchao's quantized weights)."""
    if type(t) in (torch.Tensor, nn.Parameter) or not hasattr(t, "__tensor_flatten__"):
        yield t
        return
    names, _ = t.__tensor_flatten__()
    for name in names:
        yield from _leaf_tensors(getattr(t, name))


def model_size_bytes(model: nn.Module) -> int:
    """Bytes held by parameters and buffers, counting what quantized weights really store."""
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        for leaf in _leaf_tensors(tensor):
            key = id(leaf)
            if key in seen:
                continue
            seen.add(key)
            total += leaf.numel() * leaf.element_size()
    return total


def prunable_layers(model: nn.Module) -> list[nn.Module]:
    """Linear and Conv layers with a weight: the layers pruning and int8 quantization act on."""
    kinds = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
    return [m for m in model.modules() if isinstance(m, kinds) and m.weight is not None]


def weight_sparsity(model: nn.Module) -> float:
    """Fraction of exact zeros over the weights of Linear and Conv layers."""
    weights = [m.weight for m in prunable_layers(model) if isinstance(m.weight, torch.Tensor)]
    zeros = sum(int((w == 0).sum()) for w in weights)
    total = sum(w.numel() for w in weights)
    return zeros / total if total else 0.0
