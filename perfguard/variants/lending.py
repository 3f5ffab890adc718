"""The user's model, lent to a measurement and given back as it was.

A variant that leaves the weights alone (eager, autocast, every compile mode) measures the
user's model itself: a copy would double the footprint of the very models teams care about
(a 6 GB model would need 12 GB and more). While lent, the model is on the measuring device
and in eval mode (its own `eval()`); afterwards each module has its own training flag back,
set through its own `train()` (an override of it runs), the weights are on the device they
came from, an instance `forward` or a `generation_config` that a generation set is undone,
and no attribute the measuring added is left on any module (`torch.compile` marks the module
it compiles). The caller's random number generators are left as they were.

What in-place measuring does not undo is what the model's own forward does to itself: a
forward that updates a buffer (a running statistic in train mode, a cache, a call counter)
has done so once per measured call when the model comes back.

A variant that changes the weights (int8, pruning, an ONNX export) makes its own copy
instead (`perfguard.variants.registry`), and a training step, which changes them by design,
works on one too.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from perfguard.errors import PerfguardError

_MISSING = object()


class NotLendable(PerfguardError):
    """The model cannot be measured in place (its weights lie on several devices): the
    variant measures a copy instead."""


def devices_of(model: nn.Module) -> set[torch.device]:
    return {t.device for t in itertools.chain(model.parameters(), model.buffers())}


def _rng_devices(device: torch.device, home: set[torch.device]) -> list[int]:
    cuda = [d for d in (device, *home) if d.type == "cuda"]
    if not cuda or not torch.cuda.is_available():
        return []
    return sorted({d.index if d.index is not None else torch.cuda.current_device() for d in cuda})


@contextlib.contextmanager
def lent(model: nn.Module, device: torch.device) -> Iterator[nn.Module]:
    """`model` on `device` in eval mode until the block ends, then given back as it was.
    Raises NotLendable (before touching anything) when its weights lie on several devices."""
    home = devices_of(model)
    if len(home) > 1:
        raise NotLendable(
            f"its weights lie on {len(home)} devices ({', '.join(sorted(map(str, home)))})"
        )
    modes = [(m, m.training) for m in model.modules()]
    attributes = [(m, set(m.__dict__)) for m in model.modules()]
    own_forward = model.__dict__.get("forward", _MISSING)
    config = getattr(model, "generation_config", None)
    saved_config = copy.deepcopy(config) if config is not None else None
    moved = bool(home) and home != {device}
    with torch.random.fork_rng(devices=_rng_devices(device, home)):
        try:
            if moved:
                model.to(device)
            model.eval()
            yield model
        finally:
            if moved:
                model.to(next(iter(home)))
            _give_back_modes(model, modes)
            for module, had in attributes:  # nothing of the measuring's stays on it
                for name in set(module.__dict__) - had - {"forward"}:
                    del module.__dict__[name]
            if own_forward is _MISSING:
                model.__dict__.pop("forward", None)
            else:
                model.__dict__["forward"] = own_forward
            if saved_config is not None:
                model.generation_config = saved_config


def _give_back_modes(model: nn.Module, modes: list[tuple[nn.Module, bool]]) -> None:
    """Each module's training flag as it was, through the modules' own `train()`: the
    root's first (an override may set its children as it likes), then, parents before
    children, each module still off its flag."""
    root = modes[0][1] if modes else model.training
    model.train(root)
    for module, training in modes:
        if module.training != training:
            module.train(training)


def lent_or_copied(
    model: nn.Module, device: torch.device
) -> contextlib.AbstractContextManager[nn.Module]:
    """The model lent (see `lent`), or, where it cannot be, a copy of it on `device` in eval
    mode: what a measurement that leaves the weights alone works on."""
    if len(devices_of(model)) > 1:
        return contextlib.nullcontext(copy.deepcopy(model).to(device).eval())
    return lent(model, device)


def fp64_bytes_of_largest_piece(model: nn.Module) -> int:
    """What the biggest module's own floating weights take in fp64: the most that computing
    the high-precision reference piece by piece holds beside the model at once."""
    largest = 0
    for module in model.modules():
        own = itertools.chain(module.parameters(recurse=False), module.buffers(recurse=False))
        largest = max(largest, sum(t.numel() * 8 for t in own if t.is_floating_point()))
    return largest


@contextlib.contextmanager
def in_fp64(model: nn.Module) -> Iterator[Any]:
    """Run `model` in fp64 one module at a time, without a second copy of it: as each module
    is called, its own floating weights and buffers are swapped for fp64 ones, and swapped
    back as it returns (the originals are kept, untouched, so the model is given back bit for
    bit). A module that uses another's weights outside that one's call (a weight read in a
    parent's forward) then meets fp32 beside fp64, and the run raises: the caller judges on
    fp32 instead."""
    saved: dict[int, list[tuple[str, str, torch.Tensor]]] = {}
    depth: dict[int, int] = {}

    def before(module: nn.Module, _args: Any) -> None:
        key = id(module)
        depth[key] = depth.get(key, 0) + 1
        if depth[key] > 1:  # re-entered: its weights are fp64 already
            return
        kept = []
        for name, p in module.named_parameters(recurse=False):
            if p.is_floating_point():
                kept.append(("param", name, p.data))
                p.data = p.data.to(torch.float64)
        for name, b in module.named_buffers(recurse=False):
            if b is not None and b.is_floating_point():
                kept.append(("buffer", name, b))
                module._buffers[name] = b.to(torch.float64)
        saved[key] = kept

    def after(module: nn.Module, _args: Any, _out: Any) -> None:
        key = id(module)
        depth[key] -= 1
        if depth[key] == 0:
            _give_back(module, saved.pop(key, []))

    handles = []
    for module in model.modules():
        has_own = any(True for _ in module.parameters(recurse=False)) or any(
            True for _ in module.buffers(recurse=False)
        )
        if has_own:
            handles.append(module.register_forward_pre_hook(before))
            handles.append(module.register_forward_hook(after))
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()
        for module in model.modules():  # a call that raised midway: give every piece back
            _give_back(module, saved.pop(id(module), []))


def _give_back(module: nn.Module, kept: list[tuple[str, str, torch.Tensor]]) -> None:
    for kind, name, original in kept:
        if kind == "param":
            getattr(module, name).data = original
        else:
            module._buffers[name] = original
