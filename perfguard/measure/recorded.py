"""What a session that records runs of a perf test's work, untimed, besides its eager
reference: one whole call of the workload as it is timed (a training step with its
optimizer's `step`, a whole generation, and a second call, for what only later calls run),
and where that work runs code no tracer sees: the files of its TorchScript modules.

The eager reference is a forward call (a training step's is its first loss and gradients),
so a record built from it alone misses an optimizer's step, a generation's later tokens and
a cache a model fills on its first call. These calls run in the recording's context and are
never timed. A model that fails here fails again, and is reported, where it is measured.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

from perfguard.measure.isolation import torch_state
from perfguard.measure.job import Job
from perfguard.variants.registry import build_variant
from perfguard.variants.spec import parse_variant

CALLS = 2
"""Whole calls of the workload: the first, and one after it."""


def run_as_timed(job: Job, device: torch.device) -> None:
    """`CALLS` whole calls of `job`'s workload, eager, untimed (see the module)."""
    eager = parse_variant("eager")
    copies = job.work.copies_model
    with contextlib.suppress(Exception), torch_state(job.settings.threads):
        holder = (
            contextlib.nullcontext(job.model) if copies else job.work.workspace(job.model, device)
        )
        with holder as work:
            built = build_variant(
                work, job.inputs, eager, device, job.kwargs, job.work, lent=not copies
            )
            call = built.make_call()
            for _ in range(CALLS):
                call()


def script_sources(model: object) -> set[Path]:
    """The source files of the TorchScript modules (scripted or traced) in `model`: their
    Python classes' modules, as TorchScript names them (`__torch__.<module>.<Class>`)."""
    found: set[Path] = set()
    if not isinstance(model, torch.nn.Module):
        return found
    for module in model.modules():
        if not isinstance(module, torch.jit.ScriptModule):
            continue
        with contextlib.suppress(Exception):
            name = str(module._c._type().qualified_name())
            found |= _files_of(name)
    return found


def _files_of(qualified: str) -> set[Path]:
    """The file of the Python module a TorchScript qualified name lies in."""
    parts = qualified.removeprefix("__torch__.").split(".")
    for end in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:end]))
        path = getattr(module, "__file__", None)
        if path:
            return {Path(path)}
    return set()
