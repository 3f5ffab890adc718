"""The workload is an object: every measuring step asks it, so a workload of its own (here a
test's) changes what is measured without an edit anywhere else."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from perfguard import MeasureSettings, SamplingSettings
from perfguard.variants.base import Built
from perfguard.variants.spec import VariantSpec
from perfguard.variants.workload import FORWARD, Autocast, Building, Workload
from tests.measuring import measure

FAST = MeasureSettings(sampling=SamplingSettings(budget_s=0.05, repeats=3))


class Scaled(Workload):
    """A forward call whose outputs are scaled after the model: built, referenced and judged
    through the workload's own answers, and refusing every variant but eager."""

    name: ClassVar[str] = "forward"

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.asked: list[str] = []

    def key(self) -> str:
        return f"scaled{self.factor}"

    def refuses(self, spec: VariantSpec) -> str | None:
        self.asked.append(f"refuses {spec.name}")
        return None if spec.name == "eager" else f"{spec.name}: a scaled call runs eagerly only"

    def drift_view(
        self,
        work: nn.Module,
        args: Sequence[Any],
        named: Mapping[str, Any],
        device: torch.device,
        autocast: Autocast,
        tokens: Any,
    ) -> Any:
        self.asked.append("drift_view")
        with torch.inference_mode(), autocast():
            return work(*args, **named) * self.factor

    def build(self, building: Building) -> Built:
        self.asked.append("build")
        _, built = building.forward()
        factor = self.factor

        def make_call() -> Any:
            call = built.make_call()
            return lambda: call() * factor

        return _with_call(built, make_call)


def _with_call(built: Built, make_call: Any) -> Built:
    from dataclasses import replace

    return replace(built, make_call=make_call)


def test_a_workload_of_its_own_is_built_referenced_and_judged_through_its_answers() -> None:
    model, x = nn.Linear(8, 4), torch.randn(2, 8)
    work = Scaled(3.0)
    result = measure(model, (x,), "eager", FAST, work=work)
    assert result.status == "ok", result.error
    assert {"refuses eager", "build", "drift_view"} <= set(work.asked)
    # the outputs judged are the scaled ones, against a scaled reference: no drift
    assert result.drift_check is not None and result.drift_check.passed


def test_a_variant_the_workload_refuses_is_skipped_with_its_reason() -> None:
    result = measure(
        nn.Linear(8, 4), (torch.randn(2, 8),), "compile-default", FAST, work=Scaled(2.0)
    )
    assert result.status == "skipped"
    assert result.error == "compile-default: a scaled call runs eagerly only"


def test_the_forward_call_is_the_default_workload_and_anything_else_is_refused() -> None:
    from perfguard import Job

    job = Job.of(nn.Linear(2, 2), (torch.randn(1, 2),))
    assert job.work is FORWARD and job.workload == "forward" and job.in_place
    with pytest.raises(TypeError, match="work must be a TrainStep or a Generation"):
        Job.of(nn.Linear(2, 2), (torch.randn(1, 2),), work=contextlib.nullcontext())  # type: ignore[arg-type]
