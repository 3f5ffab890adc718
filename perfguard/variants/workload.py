"""What one sample is: a forward call, a training step, or a generation.

Every place that measures asks the workload what it needs of it, and branches on nothing:

- its name (the result's `workload`) and what it adds to the key of a shared reference;
- which variants it refuses (`refuses`: a training step runs under eager, compile-* and
  amp-*; a generation under no exported graph);
- its reference: where eager runs (`workspace`: the model itself, lent, or a copy that a
  training step may change), what eager makes first (`reference_tokens`: a generation's
  tokens), and what drift is judged on (`drift_view`: a forward call's outputs, a training
  step's loss and gradients, a generation's first two tokens' logits);
- how a variant builds it (`build`, from what the registry prepared: `Building`);
- the random state each variant starts from, and how a failure of its own reads.

`FORWARD` is the forward call; `TrainStep` (`variants.training`) and `Generation`
(`variants.generation`) are the others. A new workload is one class here, not an edit of
each measuring step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from perfguard.variants.base import Built
from perfguard.variants.spec import VariantSpec

Autocast = Callable[[], contextlib.AbstractContextManager[object]]


@dataclass(frozen=True)
class Building:
    """What the registry prepared for a workload to build a variant from: the user's model,
    the inputs on the device, the variant, its autocast and compiler, and `forward`, which
    builds the variant's forward call (the model transformed as the variant says, and its
    build)."""

    model: nn.Module
    inputs: tuple[Any, ...]
    named: dict[str, Any]
    spec: VariantSpec
    device: torch.device
    autocast: Autocast
    autocast_dtype: torch.dtype | None
    compiler: Callable[[Any], Callable[..., Any]] | None
    tolerance_class: str
    forward: Callable[[], tuple[nn.Module, Built]]


class Workload:
    """A forward call, and what every workload answers (see the module's docstring)."""

    name: ClassVar[str] = "forward"
    copies_model: ClassVar[bool] = False  # works on a copy of its own (it changes the weights)

    def key(self) -> str:
        """What this workload adds to the key of an eager reference shared by variants."""
        return self.name

    def refuses(self, spec: VariantSpec) -> str | None:
        """Why `spec` cannot run this workload, or None."""
        return None

    def random(self, device: torch.device) -> contextlib.AbstractContextManager[None]:
        """The random state each variant starts from (a forward call's own is the caller's)."""
        return contextlib.nullcontext()

    def error(self, message: str) -> str:
        """A failure of the model's own (`message`: its first line), as the result says it."""
        return message

    def workspace(
        self, model: nn.Module, device: torch.device
    ) -> contextlib.AbstractContextManager[nn.Module]:
        """What the eager references run: the model itself, lent (on the device, in eval mode,
        given back as it was)."""
        from perfguard.variants.lending import lent_or_copied

        return lent_or_copied(model, device)

    def reference_tokens(
        self, work: nn.Module, args: Sequence[Any], named: Mapping[str, Any]
    ) -> Any:
        """What eager makes before its outputs are judged (a generation's tokens), or None."""
        return None

    def drift_view(
        self,
        work: nn.Module,
        args: Sequence[Any],
        named: Mapping[str, Any],
        device: torch.device,
        autocast: Autocast,
        tokens: Any,
    ) -> Any:
        """Eager's outputs that drift is judged on (a pytree of tensors)."""
        with torch.inference_mode(), autocast():
            return work(*args, **named)

    def build(self, building: Building) -> Built:
        """The variant's build of this workload."""
        return building.forward()[1]


FORWARD = Workload()
"""The forward call: `model(*inputs, **kwargs)`, each sample one call."""
