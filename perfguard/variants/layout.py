"""`channels-last`: the model's 4-d weights and its 4-d inputs in channels_last memory format
(NHWC in memory, NCHW in shape), the layout cuDNN's and oneDNN's fastest convolutions read.

A part of the `layout` stage: it composes with what comes before (pruning, int8) and after
(autocast, a compile mode), `channels-last+compile-default`. It converts a copy of the model
(its weights' layout is theirs to keep) and every 4-d tensor input; a model with no 4-d
weight or input is measured as it is, with a note that nothing changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from perfguard.variants.declared import Changed


def _is_image(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 4


def channels_last_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Every 4-d tensor among `inputs` in channels_last memory format; the rest as they are."""
    return tuple(
        pytree.tree_map(
            lambda x: x.contiguous(memory_format=torch.channels_last) if _is_image(x) else x,
            tuple(inputs),
        )
    )


def channels_last(model: nn.Module, inputs: Sequence[Any], device: torch.device) -> Changed:
    """The model (a copy: the registry makes it) with its 4-d weights in channels_last, and
    a note where no 4-d parameter, buffer or input leaves anything to convert."""
    converted: nn.Module = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    tensors = [*model.parameters(), *model.buffers(), *pytree.tree_leaves(tuple(inputs))]
    if any(_is_image(t) for t in tensors):
        return Changed(converted)
    return Changed(converted, ("channels-last: no 4-d weight or input, the model runs as it was",))
