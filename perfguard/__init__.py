"""perfguard: performance regression testing for PyTorch models.

The public API: `measure_model(Job.of(model, example_inputs, variant, MeasureSettings(...)))`
measures one model under one variant, returning an immutable `VariantResult` that keeps the
raw samples; given `work=TrainStep(loss_fn, optimizer)`, the job is a training step instead,
and given `work=Generation(max_new_tokens)` a greedy `model.generate`.
Heavy modules (torch) load on first use, so `perfguard report` and `compare` work
without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfguard.errors import PerfguardWarning
from perfguard.version import __version__

if TYPE_CHECKING:
    from perfguard.measure.drift import Reference, compute_reference
    from perfguard.measure.job import Job, MeasureSettings
    from perfguard.measure.runner import measure_model
    from perfguard.measure.sampling import SamplingSettings
    from perfguard.records import Comparison, Metrics, Run, VariantResult
    from perfguard.variants.generation import Generation
    from perfguard.variants.training import TrainStep

_LAZY = {
    # the records load on first use too: the pytest plugin imports this package in every
    # session, asked for or not, and the records bring numpy
    "Comparison": "perfguard.records",
    "Metrics": "perfguard.records",
    "Run": "perfguard.records",
    "VariantResult": "perfguard.records",
    "measure_model": "perfguard.measure.runner",
    "MeasureSettings": "perfguard.measure.job",
    "Job": "perfguard.measure.job",
    "SamplingSettings": "perfguard.measure.sampling",
    "compute_reference": "perfguard.measure.drift",
    "Reference": "perfguard.measure.drift",
    "TrainStep": "perfguard.variants.training",
    "Generation": "perfguard.variants.generation",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'perfguard' has no attribute {name!r}")


__all__ = [
    "Comparison",
    "Generation",
    "Job",
    "MeasureSettings",
    "Metrics",
    "PerfguardWarning",
    "Reference",
    "Run",
    "SamplingSettings",
    "TrainStep",
    "VariantResult",
    "__version__",
    "compute_reference",
    "measure_model",
]
