"""The tests' shorthand for measuring: `measure(model, inputs, variant, settings, ...)` makes
the job (`Job.of`, which checks its inputs) and measures it."""

from __future__ import annotations

from typing import Any

from perfguard import Job, VariantResult
from perfguard.measure.runner import measure_model


def measure(
    model: Any,
    inputs: Any,
    variant: str = "eager",
    settings: Any = None,
    *,
    test: str = "",
    kwargs: Any = None,
    work: Any = None,
    **hooks: Any,
) -> VariantResult:
    job = Job.of(model, inputs, variant, settings, kwargs=kwargs, work=work, test=test)
    return measure_model(job, **hooks)
