"""Building a part that carries its own build: `channels-last`, and every variant a team
registers (`perfguard.variants.Variant`).

A part before the `compile` stage changes the model: its build returns the model to run (an
`nn.Module`, or a `Changed` with sentences for the report) and, where it declares `inputs`,
the inputs change with it. A part at `compile`
is a backend: its build returns the callable that runs one inference, and the seconds the
build took are the variant's compile time. A build that raises, or returns what it may not,
is the item's error naming the variant and who registered it; the session goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from perfguard.variants.base import VariantBuildError, VariantUnavailableError, first_line
from perfguard.variants.declared import Changed, Variant

T = TypeVar("T")


@dataclass
class Engine:
    """A model built ahead of time into a callable of its own (a TensorRT engine, a team's
    backend): `run(*inputs, **kwargs)` is one inference."""

    run: Callable[..., Any]
    device: torch.device
    build_s: float | None = None
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    fetch_outputs: Callable[[Callable[[], Any]], Any] | None = None  # as `Built`'s
    autocast: bool = True  # runs under the variant's autocast (an engine built in its dtype: no)


def timed_build(device: torch.device, build: Callable[[], T]) -> tuple[T, float]:
    """`build()` and its seconds, the device's queue drained either side (an engine's build
    may leave kernels running)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    out = build()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - started


def _who(variant: Variant) -> str:
    return variant.name if variant.origin == "perfguard" else f"{variant.name} ({variant.origin})"


def _built(variant: Variant, *args: Any) -> Any:
    """The variant's build called on `args`; its failure said as the item's error."""
    try:
        return variant.builder()(*args)
    except VariantUnavailableError:
        raise  # the build itself says it cannot run here: a skip, with its reason
    except Exception as exc:  # a team's code may raise anything: the item's error
        raise VariantBuildError(
            f"variant {_who(variant)}: its build raised {type(exc).__name__}: {first_line(exc)}"
        ) from exc


def own_transform(
    variant: Variant,
    model: nn.Module,
    inputs: tuple[Any, ...],
    device: torch.device,
    notes: list[str],
) -> tuple[nn.Module, tuple[Any, ...]]:
    """A part before `compile`: the model it returns (on `device`, in eval mode), and the
    inputs as it changes them."""
    out = _built(variant, model, inputs, device)
    if isinstance(out, Changed):
        notes.extend(str(n) for n in out.notes)
        out = out.model
    if not isinstance(out, nn.Module):
        raise VariantBuildError(
            f"variant {_who(variant)}: its build returned {type(out).__name__}, not the "
            f"nn.Module to run (a part of the {variant.stage!r} stage changes the model)"
        )
    if variant.inputs is not None:
        try:
            inputs = variant.changed_inputs(tuple(inputs))
        except Exception as exc:
            raise VariantBuildError(
                f"variant {_who(variant)}: its inputs raised {type(exc).__name__}: "
                f"{first_line(exc)}"
            ) from exc
    return out.to(device).eval(), inputs


def own_backend(
    variant: Variant,
    model: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    device: torch.device,
) -> Engine:
    """A part at `compile`: the callable its build returns, and the build's seconds."""
    run, build_s = timed_build(device, lambda: _built(variant, model, inputs, device))
    if not callable(run):
        raise VariantBuildError(
            f"variant {_who(variant)}: its build returned {type(run).__name__}, not the "
            "callable that runs one inference (a backend's build returns fn(*inputs))"
        )
    return Engine(run=run, device=device, build_s=build_s)
