"""A test's model and inputs as one hash: when two items' hashes match, so does eager, and
the drift reference computed for one serves the other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

_PLAIN = (int, float, str, bool, type(None))


def _settings(module: nn.Module) -> str:
    """A module's own plain settings (a scale, an activation's name, `training`), which
    change its outputs as much as its weights do."""
    plain = {
        k: v
        for k, v in vars(module).items()
        if not k.startswith("_")
        and (
            isinstance(v, _PLAIN)
            or (isinstance(v, tuple) and all(isinstance(x, _PLAIN) for x in v))
        )
    }
    return f"{type(module).__module__}.{type(module).__qualname__}{sorted(plain.items())!r}"


def fingerprint(
    model: nn.Module, inputs: Sequence[Any], kwargs: Mapping[str, Any] | None = None
) -> str:
    """A hash of the model's classes, settings, weights and the inputs: when it matches,
    so does eager."""
    import hashlib

    digest = hashlib.blake2b(digest_size=16)
    for name, module in model.named_modules():
        digest.update(f"{name}:{_settings(module)}".encode())
    tensors = [
        *model.state_dict().items(),
        *((f"input{i}", x) for i, x in enumerate(pytree.tree_leaves(tuple(inputs)))),
        *((f"kwarg {k}", x) for k, v in (kwargs or {}).items() for x in pytree.tree_leaves(v)),
    ]
    for name, value in tensors:
        digest.update(name.encode())
        if isinstance(value, torch.Tensor):
            t = value.detach().to("cpu").contiguous()
            digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
            # hashed through the buffer, not a bytes copy: a model's largest weight is often
            # a quarter of it, and its copy was perfguard's largest transient
            digest.update(t.reshape(-1).view(torch.uint8).numpy().data)
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()
