"""Variants a team brings: registered from a conftest (`pytest_perfguard_variants`) and from an
installed package (the `perfguard.variants` entry point group), through the same registry
perfguard's own families are in; channels-last, the built-in that builds as a team's does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from perfguard.variants import VARIANTS, UnknownVariantError, Variant, VariantRegistry
from perfguard.variants.spec import parse_variant
from tests import forkserver
from tests.gitrepo import commit, git
from tests.measuring import measure
from tests.test_same_job import FAST, LEAST

# a team's own weight-only int8 recipe: each output channel's weights rounded to its own int8
# grid (as GPTQ/AWQ-style recipes store them), kept in float for the kernels a team ships
RECIPE = '''
import torch
from torch import nn


def rounded(model, inputs, device):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                scale = m.weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127
                m.weight.copy_(torch.round(m.weight / scale) * scale)
    return model


def traced(model, inputs, device):
    """A backend: the model traced and frozen by TorchScript, run as a serving stack runs it."""
    return torch.jit.freeze(torch.jit.trace(model, inputs))
'''


def _recipe(where: Path) -> None:
    (where / "team_recipe.py").write_text(RECIPE)


@pytest.fixture
def registry() -> Iterator[VariantRegistry]:
    with VARIANTS.scope() as scoped:
        yield scoped


def test_a_declaration_says_what_is_wrong_with_it() -> None:
    bads: list[tuple[dict[str, object], str]] = [
        (dict(name="a+b"), "one word"),
        (dict(name="x", stage="late"), "stage must be one of prune, quantize, layout"),
        (dict(name="x", tolerance="loose"), "tolerance must be one of exact"),
        (dict(name="x", devices=("tpu",)), "devices must be 'cpu' and/or 'cuda'"),
        (dict(name="x", build=42), "a callable or a 'module:attribute'"),
        (dict(name="pytest-benchmark"), "one word"),
    ]
    for bad, message in bads:
        fields: dict[str, object] = {"build": lambda m, i, d: m, **bad}
        with pytest.raises(UnknownVariantError, match=message):
            Variant(**fields)  # type: ignore[arg-type]


def test_a_registered_variant_parses_composes_and_is_gone_after_its_scope(
    registry: VariantRegistry,
) -> None:
    registry.add(
        Variant("team-int8", "team_recipe:rounded", "quantize", tolerance="int8",
                changes_weights=True),
        origin="conftest.py",
    )  # fmt: skip
    spec = parse_variant("team-int8+compile-default")
    assert [p.name for p in spec.parts] == ["team-int8", "compile-default"]
    assert spec.changes_weights
    with pytest.raises(UnknownVariantError, match="order prune, quantize"):
        parse_variant("compile-default+team-int8")
    with pytest.raises(UnknownVariantError, match=r"same kind|one of each"):
        parse_variant("int8-dynamic+team-int8")  # two parts of the quantize stage
    # registered twice, differently: both named
    with pytest.raises(UnknownVariantError, match=r"registered twice: by conftest\.py and by"):
        registry.add(Variant("team-int8", "team_recipe:rounded", "layout"), origin="plugin.py")
    with VARIANTS.scope():
        pass
    assert "team-int8" in registry.names()


def test_an_unknown_name_lists_what_is_registered_a_teams_too(registry: VariantRegistry) -> None:
    registry.add(Variant("traced", "team_recipe:traced"), origin="conftest.py")
    with pytest.raises(UnknownVariantError, match=r"unknown variant 'tracd'.*eager.*traced"):
        parse_variant("tracd")
    with registry.scope():
        registry.add(Variant("other", "team_recipe:traced"))
    assert "other" not in registry.names() and "traced" in registry.names()


def _installed(site: Path, name: str, entry: str, module: str = "") -> None:
    """A package as pip leaves it installed: its module and its dist-info with an entry point
    in the `perfguard.variants` group."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[perfguard.variants]\n{name} = {entry}\n")
    if module:
        (site / f"{name}.py").write_text(module)


PACKAGE = (
    RECIPE
    + """

from perfguard.variants import Variant

VARIANTS = [
    Variant("traced", "team_variants:traced", about="TorchScript, traced and frozen"),
    Variant("rounded-int8", rounded, "quantize", tolerance="int8", changes_weights=True),
]
"""
)


def test_an_installed_packages_entry_point_registers_and_a_broken_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(tmp_path, "team_variants", "team_variants:VARIANTS", PACKAGE)
    _installed(tmp_path, "broken_variants", "broken_variants:nothing_here")
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = VariantRegistry()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = fresh.names()
    assert {"traced", "rounded-int8"} <= set(names)
    assert fresh.get("traced").origin.startswith("the entry point 'team_variants'")  # type: ignore[union-attr]
    (warned,) = [str(w.message) for w in caught]
    assert "broken_variants" in warned and "ModuleNotFoundError" in warned
    assert "not loaded: the entry point 'broken_variants'" in fresh.known()


PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "team-variants"
version = "1.0"

[project.entry-points."perfguard.variants"]
team = "team_variants:VARIANTS"

[tool.setuptools]
py-modules = ["team_variants"]
"""


def _pip_installed(tmp_path: Path) -> Path:
    """The team's package built and installed by pip (into a folder of its own, put on the
    sessions' path), as a team installs its variants beside perfguard."""
    source = tmp_path / "team-variants"
    source.mkdir()
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "team_variants.py").write_text(PACKAGE)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--no-index", "--target", str(site), str(source)], check=True)
    assert (site / "team_variants-1.0.dist-info" / "entry_points.txt").exists()
    return site


def _tiny_cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).eval()
    return model, (torch.randn(2, 3, 16, 16),)


@pytest.mark.slow  # three variants measured
def test_channels_last_converts_a_copy_and_its_image_inputs() -> None:
    from perfguard import MeasureSettings, SamplingSettings
    from perfguard.examples import SmallMLP, example_inputs

    least = SamplingSettings(budget_s=0.01, repeats=2, min_samples_per_repeat=3)
    measuring = MeasureSettings(sampling=least, memory_calls=1, device="cpu")
    model, inputs = _tiny_cnn()
    conv = next(iter(model.children()))
    seen: list[bool] = []  # the hook goes with the copy the variant converts
    conv.register_forward_pre_hook(
        lambda _m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    eager = measure(model, inputs, "eager", measuring)
    assert eager.status == "ok" and not any(seen)
    r = measure(model, inputs, "channels-last", measuring)
    assert r.status == "ok", r.error
    assert r.drift_check is not None and r.drift_check.passed
    assert seen[-1] and sum(seen) >= 3  # the timed calls got channels_last inputs
    # the caller's model and inputs are as they were: converted on a copy
    assert isinstance(conv, nn.Conv2d) and conv.weight.is_contiguous()
    assert not inputs[0].is_contiguous(memory_format=torch.channels_last)
    mlp = SmallMLP().eval()
    plain = measure(mlp, example_inputs(mlp), "channels-last", measuring)
    assert plain.status == "ok" and any("no 4-d weight or input" in n for n in plain.details.notes)


def test_the_new_cuda_variants_skip_on_a_cpu_with_what_they_need() -> None:
    from tests.test_measure import FAST as MEASURE

    model, inputs = _tiny_cnn()
    for name, needs in [
        ("tensorrt", "CUDA only"),
        ("fp8", "CUDA kernels"),
        ("int4-weight-only", "CUDA kernels"),
        ("amp-fp16+tensorrt", "CUDA only"),
    ]:
        r = measure(model, inputs, name, MEASURE)
        assert r.status == "skipped" and needs in (r.error or ""), (name, r.error)


CONFTEST = """
from perfguard.variants import Variant


def wrong(model, inputs, device):
    return "an engine"


def raising(model, inputs, device):
    raise RuntimeError("the recipe needs calibration data")


def pytest_perfguard_variants(registry):
    registry.add(Variant("team-int8", "team_recipe:rounded", "quantize", tolerance="int8",
                         changes_weights=True))
    registry.add(Variant("team-wrong", wrong, "layout"))
    registry.add(Variant("team-raises", raising))
"""

TESTS = """
import pytest, torch
from torch import nn

WIDTH = {width}


@pytest.mark.perfguard(variants=["team-int8+compile-default", "traced", "team-wrong",
                                 "team-raises"])
def test_mlp(perfguard):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 64)).eval()
    perfguard.run(model, (torch.randn(16, 64),))
"""


@pytest.mark.slow
def test_a_teams_variants_from_a_conftest_and_a_package_are_measured_and_compared_in_ab(
    tmp_path: Path,
) -> None:
    """A conftest's variant composed with compile-default, an installed package's backend, a
    build that raises and one that returns a string: in same-job A/B, the first two measured
    and compared on both sides, the two broken ones each an error naming it."""
    site = _pip_installed(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    _recipe(repo)
    (repo / "conftest.py").write_text(CONFTEST)
    (repo / ".gitignore").write_text("reports/\n*.json\n__pycache__/\nbaselines/\n")
    (repo / "test_models.py").write_text(TESTS.format(width=64))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    commit(repo, "base")
    (repo / "test_models.py").write_text(TESTS.format(width=96))
    git(repo, "commit", "-qam", "wider")
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = forkserver.run_pytest(
        repo, *FAST, *LEAST, "--perfguard", "--perfguard-ab=HEAD~1", "--perfguard-json=out.json",
        env=env,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    doc = json.loads((repo / "out.json").read_text())
    results = {r["variant"]: r for r in doc["results"]}
    composed, traced = results["team-int8+compile-default"], results["traced"]
    assert composed["status"] == "ok" and traced["status"] == "ok", (composed, traced)
    assert composed["metrics"]["compile_time_s"] > 0  # compile-default's cold compile
    assert traced["metrics"]["compile_time_s"] > 0  # the backend's build is its compile
    assert composed["drift_check"]["tolerance_class"] == "int8"
    compared = {c["variant"] for c in doc["comparisons"] if c["metric"] == "latency_p50_ms"}
    assert {"team-int8+compile-default", "traced"} <= compared
    wrong, raises = results["team-wrong"], results["team-raises"]
    assert wrong["status"] == "error" and "team-wrong" in wrong["error"]
    assert "returned str, not the nn.Module" in wrong["error"]
    assert raises["status"] == "error" and "team-raises" in raises["error"]
    assert "RuntimeError: the recipe needs calibration data" in raises["error"]
    assert "pytest_perfguard_variants hook" in raises["error"]


@pytest.mark.slow  # two pytest sessions
def test_a_variant_named_on_the_command_line_may_come_from_the_root_conftest(
    tmp_path: Path,
) -> None:
    """The command line is checked at configure: a root conftest's variant is known by then,
    and a misspelt one is a usage error listing it."""
    _recipe(tmp_path)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_models.py").write_text(
        "def test_mlp(perfguard):\n    pass\n"  # not run: collected only
    )
    done = forkserver.run_pytest(
        tmp_path, "-p", "no:cacheprovider", "--perfguard-variants=team-int8,team-int9",
        "--collect-only", "-q",
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    assert "unknown variant 'team-int9'" in done.stderr and "team-int8" in done.stderr
    listed = forkserver.run_pytest(
        tmp_path, "-p", "no:cacheprovider", "--perfguard-variants=team-int8", "--collect-only", "-q"
    )
    assert listed.returncode == 0 and "test_mlp[team-int8]" in listed.stdout, listed.stdout


@pytest.mark.cuda
@pytest.mark.parametrize("variant", ["fp8", "int4-weight-only", "tensorrt", "amp-fp16+tensorrt"])
def test_the_serving_variants_on_a_gpu_run_or_say_what_the_gpu_lacks(variant: str) -> None:
    """fp8 on an H100/H200-class GPU, int4 weight-only, a TensorRT engine (fp32, and fp16 from
    its amp part): measured with drift within their class, the engine's build as compile
    time; where the GPU or its packages cannot, a skip that names what is missing."""
    from perfguard import MeasureSettings, SamplingSettings
    from perfguard.examples import SmallMLP, example_inputs

    settings = MeasureSettings(
        sampling=SamplingSettings(budget_s=0.1, repeats=2, min_samples_per_repeat=5),
        device="cuda",
    )
    model = SmallMLP().eval()
    r = measure(model, example_inputs(model), variant, settings)
    if r.status == "skipped":
        lacks = ("float8 tensor cores", "needs Torch-TensorRT", "needs the package")
        assert r.error and any(x in r.error for x in lacks), r.error
        pytest.skip(r.error)
    assert r.status == "ok", r.error
    assert r.drift_check is not None and r.drift_check.passed, r.drift_check
    if "tensorrt" in variant:
        assert r.metrics.compile_time_s and r.metrics.compile_time_s > 0
        assert r.details.build.get("tensorrt_via")
    else:
        assert r.drift_check.tolerance_class == "low-precision"
        assert (r.metrics.model_size_bytes or 0) < model_size(model)  # fewer bits a weight


def model_size(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.slow  # two variants measured
def test_the_library_measures_a_variant_added_to_its_registry() -> None:
    """Without pytest: `VARIANTS.add` and `measure_model` (through tests.measuring), a backend
    whose build is timed as its compile, and a transform that changes the inputs."""
    from perfguard import MeasureSettings, SamplingSettings

    least = SamplingSettings(budget_s=0.01, repeats=2, min_samples_per_repeat=3)
    settings = MeasureSettings(sampling=least, memory_calls=1, device="cpu")

    def slow_build(model: nn.Module, inputs: tuple[torch.Tensor, ...], device: object) -> object:
        import time

        time.sleep(0.2)  # an engine's build: timed as the variant's compile
        return model

    def doubled(model: nn.Module, inputs: tuple[torch.Tensor, ...], device: object) -> nn.Module:
        return nn.Sequential(model, nn.Identity())

    model, inputs = _tiny_cnn()
    with VARIANTS.scope():
        VARIANTS.add(Variant("engine", slow_build))
        VARIANTS.add(
            Variant("half-in", doubled, "layout", inputs=lambda xs: tuple(x * 0.5 for x in xs))
        )
        engine = measure(model, inputs, "engine", settings)
        halved = measure(model, inputs, "half-in", settings)
    assert engine.status == "ok" and (engine.metrics.compile_time_s or 0) >= 0.2, engine.error
    assert engine.drift_check is not None and engine.drift_check.passed
    # the inputs it changed reach the timed calls: its outputs drift from eager's, and say so
    assert halved.status == "ok" and halved.drift_check is not None
    assert not halved.drift_check.passed
