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
            t = value.detach()
            digest.update(f"{t.dtype}{tuple(t.shape)}{t.device.type}".encode())
            if t.device.type == "cpu":
                # hashed through the buffer, not a bytes copy: a model's largest weight is
                # often a quarter of it, and its copy was perfguard's largest transient
                digest.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().data)
            else:
                digest.update(checksum(t))
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


WORDS = 1 << 22
"""The 32-bit words a device checksum takes at a time (its transients: 3 x 32 MiB)."""
SEED = 0x5EED
_ODD = 0x9E3779B97F4A7C15  # odd: multiplying by it mod 2**64 loses nothing


def checksum(t: torch.Tensor) -> bytes:
    """A 64-bit checksum of a tensor's bytes, computed where the tensor lies.

    The fingerprint hashed a GPU model's weights on the host: each copied across, then
    blake2b on one core (about 1.4 GB/s), some 20 s a call for a model of 28 GB. Here the
    bytes, as 32-bit words, are summed times fixed random odd weights mod 2**64 on the
    device, and only the sum crosses: a changed word always changes it (an odd weight times a
    nonzero word is never 0 mod 2**64), and two different tensors of one shape share it with
    a chance of at most 2**-33. The bytes past the last whole word are hashed as they are.
    The weights are drawn afresh from a fixed seed on each call, not kept: a block held on
    the device would sit in every later measurement's peak."""
    flat = t.contiguous().reshape(-1).view(torch.uint8)
    whole = flat.numel() // 4 * 4
    words = flat[:whole].view(torch.int32)
    drawn = torch.Generator(t.device).manual_seed(SEED)
    weights = torch.randint(
        -(2**62), 2**62, (min(WORDS, words.numel()),), generator=drawn, dtype=torch.int64,
        device=t.device,
    ) * 2 + 1  # fmt: skip
    sums = [
        (words[at : at + WORDS].to(torch.int64) * weights[: min(WORDS, words.numel() - at)]).sum()
        for at in range(0, words.numel(), WORDS)
    ]
    total = 0
    for k, part in enumerate(torch.stack(sums).tolist() if sums else ()):
        total = (total * _ODD + part + k) % 2**64  # each chunk in its place
    tail = bytes(flat[whole:].cpu().tolist())
    return total.to_bytes(8, "little") + tail
