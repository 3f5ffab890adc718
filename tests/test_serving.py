"""The variants serving teams ship: `aot-inductor` (torch.export, then an AOTInductor package
loaded and run) and `compile-dynamic` (compiled once with dynamic dimensions, measured at every
shape a test declares, its recompiles an exact signal with dynamo's reasons)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from perfguard import MeasureSettings, SamplingSettings, VariantResult, compute_reference
from perfguard.bounds import check_shapes
from perfguard.examples import SmallMLP, example_inputs
from perfguard.records import Comparison
from perfguard.stats.exact import exact_comparisons
from perfguard.variants.spec import UnknownVariantError, parse_variant
from tests.measuring import measure

FAST = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.05, repeats=2, min_samples_per_repeat=3),
    memory_calls=1,
    device="cpu",
)
SHAPES = ((2, 16), (4, 16), (8, 16), (16, 16))


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("aot-inductor", True),
        ("int8-dynamic+aot-inductor", True),
        ("prune-l1-unstructured+aot-inductor", True),
        ("amp-bf16+aot-inductor", False),
        ("aot-inductor+compile-default", False),
        ("compile-dynamic", True),
        ("int8-dynamic+compile-dynamic", True),
    ],
)
def test_the_new_names_parse_and_combine_as_documented(name: str, ok: bool) -> None:
    if ok:
        assert parse_variant(name).name == name
    else:
        with pytest.raises(UnknownVariantError):
            parse_variant(name)


@pytest.mark.slow
def test_aot_inductor_measures_the_mlp_with_its_export_build_and_load_apart() -> None:
    torch.manual_seed(0)
    model = SmallMLP().eval()
    inputs = example_inputs(model)
    reference = compute_reference(model, inputs, torch.device("cpu"))
    result = measure(model, inputs, "aot-inductor", FAST, reference=reference)
    assert result.status == "ok", result.error
    build = result.details.build
    assert {"export_time_s", "package_build_time_s", "load_time_s", "package_bytes"} <= set(build)
    assert result.metrics.compile_time_s == build["package_build_time_s"] > 0
    assert build["package_bytes"] > 0 and result.metrics.latency_p50_ms is not None
    check = result.drift_check
    assert check is not None and check.passed and check.tolerance_class == "compiled-fp32"


def test_the_packages_cold_build_comes_after_the_processs_compiler_discovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process's first inductor build on the CPU also builds inductor's probes of the
    vector instruction sets; inside the build's fresh cache that landed on the package's
    build time (16 s where the same build took 5.5 s second in the process)."""
    import torch._inductor

    from perfguard.variants import aoti

    happened: list[str] = []
    monkeypatch.setattr(aoti, "prime_compiler", lambda device: happened.append("primed"))

    def package(program: object, package_path: str) -> str:
        happened.append("built")
        Path(package_path).write_bytes(b"pt2")
        return package_path

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", package)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda path: "runner")
    monkeypatch.setattr(torch.export, "export", lambda *args, **kwargs: "program")
    engine = aoti.AotInductor().build(Clean(), (torch.randn(2, 16),), {}, torch.device("cpu"))
    assert happened == ["primed", "built"] and engine.details["package_bytes"] == 3


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # control flow on a value: torch.export cannot take it
            return x * 2
        return x


def test_an_export_failure_is_the_items_error_with_the_frame_it_points_to() -> None:
    result = measure(DataDependent(), (torch.randn(3),), "aot-inductor", FAST)
    assert result.status == "error"
    error = result.error or ""
    assert error.startswith("aot-inductor: torch.export failed: ")
    assert "test_serving.py" in error and "in forward" in error and "\n" not in error


class Clean(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


class GuardsOnASize(Clean):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.lin(x))
        return y * 2 if x.shape[0] == 4 else y  # a guard on the size: a recompile at 4


def dynamic(cls: type[nn.Module]) -> tuple[float | None, VariantResult]:
    torch.manual_seed(0)
    settings = MeasureSettings(sampling=FAST.sampling, memory_calls=1, device="cpu", shapes=SHAPES)
    result = measure(cls().eval(), (torch.randn(8, 16),), "compile-dynamic", settings)
    assert result.status == "ok", result.error
    return result.metrics.compile_time_s, result


@pytest.mark.slow
def test_compile_dynamic_is_measured_at_every_shape_and_a_guard_on_a_size_is_flagged() -> None:
    compile_s, clean = dynamic(Clean)
    _, guarded = dynamic(GuardsOnASize)
    _, again = dynamic(Clean)
    assert compile_s is not None and compile_s > 0
    shapes = clean.details.build["shapes_p50_ms"]
    assert list(shapes) == ["2x16", "4x16", "8x16", "16x16"] and all(v > 0 for v in shapes.values())
    assert clean.counters is not None and clean.counters.recompiles == 0
    assert guarded.counters is not None and guarded.counters.recompiles == 1

    def rows(base: VariantResult, head: VariantResult) -> dict[str, Comparison]:
        found = exact_comparisons(
            "t",
            "compile-dynamic",
            base.counters,
            head.counters,
            gate_ops=False,
        )
        return {c.metric: c for c in found}

    storm = rows(clean, guarded)["recompiles"]
    assert storm.verdict == "regression" and storm.gating
    assert "recompiled: x.size()[0] != 4" in storm.note
    assert rows(clean, again)["recompiles"].verdict == "unchanged"


def test_declared_shapes_are_checked_in_one_line() -> None:
    assert check_shapes([[1, 16], [8, 16]]) is None
    assert "non-empty list" in (check_shapes([]) or "")
    assert "positive whole numbers" in (check_shapes([[1, -2]]) or "")
    assert "recompile limit" in (check_shapes([[n, 4] for n in range(1, 11)]) or "")


@pytest.mark.cuda
@pytest.mark.parametrize("variant", ["aot-inductor", "compile-dynamic"])
def test_the_serving_variants_run_on_cuda(variant: str) -> None:
    torch.manual_seed(0)
    model = SmallMLP().eval().cuda()
    inputs = tuple(x.cuda() for x in example_inputs(model))
    settings = MeasureSettings(
        sampling=SamplingSettings(budget_s=0.1, repeats=2, min_samples_per_repeat=5),
        device="cuda",
        shapes=tuple((n, *inputs[0].shape[1:]) for n in (1, 4, 16)),
    )
    result = measure(model, inputs, variant, settings)
    assert result.status == "ok", result.error
    assert result.drift_check is not None and result.drift_check.passed
    assert result.metrics.compile_time_s is not None and result.metrics.compile_time_s > 0
    if variant == "compile-dynamic":
        assert len(result.details.build["shapes_p50_ms"]) == 3


def test_the_report_shows_compile_dynamic_at_each_shape_beside_the_base() -> None:
    from dataclasses import replace

    from perfguard.report.markdown import render_markdown
    from tests.factories import result, run

    def at(ms: dict[str, float]) -> VariantResult:
        r = result("t.py::test_x", "compile-dynamic", 1.0)
        return replace(r, details=replace(r.details, build={"shapes_p50_ms": ms}))

    head = replace(run([at({"1x16": 0.5, "8x16": 0.9})]), baseline_results=(at({"1x16": 0.4}),))
    text = render_markdown(head)
    section = text.split("### compile-dynamic at each shape", 1)[1].split("###", 1)[0]
    row = "| t.py::test&#95;x | compile-dynamic | {} |"
    assert row.format("1x16 | 500.0\u00a0µs | 400.0\u00a0µs") in section
    assert row.format("8x16 | 900.0\u00a0µs | –") in section
