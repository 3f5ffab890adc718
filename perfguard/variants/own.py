"""Building a part that carries its own build: `channels-last`, and every variant a team
registers (`perfguard.variants.Variant`).

A part before the `compile` stage changes the model: its build returns the model to run (an
`nn.Module`) and, where it declares `inputs`, the inputs change with it. A part at `compile`
is a backend: its build returns the callable that runs one inference, and the seconds the
build took are the variant's compile time. A build that raises, or returns what it may not,
is the item's error naming the variant and who registered it; the session goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from perfguard.variants.base import VariantBuildError, VariantUnavailableError, first_line
from perfguard.variants.declared import Variant


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
    if variant.name == "channels-last":
        from perfguard.variants.layout import nothing_to_convert

        if nothing_to_convert(out, inputs):
            notes.append("channels-last: no 4-d weight or input, the model runs as it was")
    return out.to(device).eval(), inputs


def own_backend(
    variant: Variant,
    model: nn.Module,
    inputs: tuple[Any, ...],
    named: dict[str, Any],
    device: torch.device,
) -> Engine:
    """A part at `compile`: the callable its build returns, and the build's seconds."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    run = _built(variant, model, inputs, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    build_s = time.perf_counter() - started
    if not callable(run):
        raise VariantBuildError(
            f"variant {_who(variant)}: its build returned {type(run).__name__}, not the "
            "callable that runs one inference (a backend's build returns fn(*inputs))"
        )
    return Engine(run=run, device=device, build_s=build_s)
