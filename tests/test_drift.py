from __future__ import annotations

import numpy as np
import pytest
import torch

from perfguard.measure import drift


def ref(values: list[float], high: list[float] | None = None) -> drift.Reference:
    fp32 = np.array(values, dtype=np.float64)
    return drift.Reference(fp32, None if high is None else np.array(high, dtype=np.float64))


def test_figures_against_the_fp32_reference() -> None:
    f = drift.figures(np.array([1.0, 2.0, 4.5]), np.array([1.0, 2.0, 4.0]))
    assert f.max_abs == 0.5
    assert f.max_rel == pytest.approx(0.5 / 4.0)
    assert 0.99 < f.cosine < 1.0
    same = drift.figures(np.array([1.0, -2.0]), np.array([1.0, -2.0]))
    assert (same.max_abs, same.max_rel, same.cosine) == (0.0, 0.0, 1.0)


def test_exact_class_passes_only_eager_itself() -> None:
    r = ref([1.0, 2.0, 3.0], high=[1.0 + 1e-7, 2.0, 3.0])
    assert drift.judge(r.fp32, r, "exact").passed
    assert not drift.judge(r.fp32 + 1e-5, r, "exact").passed


def test_classes_loosen_in_order() -> None:
    r = ref([1.0, 2.0, 3.0, 4.0], high=[1.0, 2.0, 3.0, 4.0])
    off = r.fp32 * 1.01  # 1% off everywhere
    assert not drift.judge(off, r, "compiled-fp32").passed
    assert drift.judge(off, r, "reduced-precision").passed
    assert drift.judge(off, r, "int8").passed
    check = drift.judge(off, r, "compiled-fp32")
    assert check.reference == "fp64" and check.error > check.allowed


def test_where_tf32_is_allowed_a_compiled_fp32_variant_gets_tf32s_error() -> None:
    """As an H200 gave it: a compiled CNN whose convolutions ran in TF32 (1.9e-4 of the RMS
    off fp64) where eager's were fp32 (1.4e-7): not drift the user did not allow."""
    r = ref([1.0, -2.0, 3.0, -4.0], high=[1.0, -2.0, 3.0, -4.0])
    off = r.fp32 * (1 + 2e-4)
    assert not drift.judge(off, r, "compiled-fp32").passed
    assert drift.judge(off, r, "compiled-fp32", tf32=True).passed
    assert not drift.judge(r.fp32 * (1 + 5e-3), r, "compiled-fp32", tf32=True).passed
    assert not drift.judge(off, r, "exact", tf32=True).passed  # eager's own class: untouched


def test_tf32_is_allowed_for_convolutions_by_default_and_for_matmuls_by_choice() -> None:
    from torch import nn

    cnn, mlp = nn.Sequential(nn.Conv2d(3, 4, 3)), nn.Sequential(nn.Linear(4, 4))
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    matmul = torch.backends.cuda.matmul
    kept = (torch.backends.cudnn.allow_tf32, matmul.allow_tf32)
    try:
        torch.backends.cudnn.allow_tf32, matmul.allow_tf32 = True, False
        assert drift.tf32_allowed(cnn, cuda) and not drift.tf32_allowed(mlp, cuda)
        assert not drift.tf32_allowed(cnn, cpu)
        torch.backends.cudnn.allow_tf32 = False
        assert not drift.tf32_allowed(cnn, cuda)
        matmul.allow_tf32 = True
        assert drift.tf32_allowed(mlp, cuda)
    finally:
        torch.backends.cudnn.allow_tf32, matmul.allow_tf32 = kept


def test_user_override_per_class_or_for_all() -> None:
    r = ref([1.0, 2.0], high=[1.0, 2.0])
    off = r.fp32 * 1.2
    assert not drift.judge(off, r, "int8").passed
    assert drift.judge(off, r, "int8", 0.5).passed
    assert drift.judge(off, r, "int8", {"int8": 0.5}).passed
    assert not drift.judge(off, r, "int8", {"pruned": 0.5}).passed


def test_without_fp64_the_judgement_uses_fp32_and_says_so() -> None:
    r = ref([1.0, 2.0])
    check = drift.judge(r.fp32, r, "compiled-fp32")
    assert check.passed and check.reference == "fp32" and check.eager_error == 0.0


def test_flatten_accepts_nested_tensors_and_arrays() -> None:
    out = drift.flatten_outputs(
        {
            "a": torch.ones(2),
            "b": (torch.zeros(1, dtype=torch.bfloat16), np.full(2, 3.0)),
            "ids": torch.tensor([1, 2]),
        }
    )
    assert out.tolist() == [1.0, 1.0, 0.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="no floating-point"):
        drift.flatten_outputs(torch.tensor([1, 2]))


def test_reference_falls_back_when_the_model_refuses_fp64() -> None:
    class Fp32Only(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.dtype != torch.float32:
                raise TypeError("this model only takes float32")
            return x * 2

    r = drift.compute_reference(Fp32Only(), (torch.ones(3),), torch.device("cpu"))
    assert r.fp64 is None and "fp64" in r.fp64_note
    assert r.fp32.tolist() == [2.0, 2.0, 2.0]


def test_exact_allows_what_eager_itself_changes_between_identical_calls() -> None:
    rng = np.random.default_rng(0)
    high = rng.normal(size=1000)
    first, second, variant = (rng.normal(scale=s, size=1000) for s in (1e-4, 1e-4, 1.3e-4))
    spread = float(np.sqrt(np.mean((second - first) ** 2)))
    steady = drift.Reference(fp32=high + first, fp64=high)
    jumpy = drift.Reference(fp32=high + first, fp64=high, fp32_spread=spread)
    assert not drift.judge(high + variant, steady, "exact").passed  # as judged before
    assert drift.judge(high + variant, jumpy, "exact").passed  # eager is not bit-stable itself


@pytest.mark.slow
def test_fp16_is_held_to_fp16s_own_error_not_bf16s() -> None:
    from perfguard import MeasureSettings, SamplingSettings
    from tests.measuring import measure

    settings = MeasureSettings(sampling=SamplingSettings(budget_s=0.02, repeats=2), device="cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 32)
    ).eval()
    x = torch.randn(16, 64)
    checks = {}
    for variant in ("amp-fp16", "amp-bf16"):
        result = measure(model, (x,), variant, settings)
        assert result.status == "ok", result.error
        assert result.drift_check is not None and result.drift_check.passed
        checks[variant] = result.drift_check
    # bf16 keeps 8 bits of mantissa, fp16 11: its bound is several times tighter
    assert checks["amp-fp16"].allowed * 3 < checks["amp-bf16"].allowed


class DropsLayers(torch.nn.Module):
    """A model random in eval mode, as a real zoo's CaiT is: each call drops a layer at
    random."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if torch.rand(()) > 0.5:
                x = x + layer(x)
        return x


@pytest.mark.slow  # three eager calls and a compiled variant's
def test_a_model_random_in_eval_mode_is_not_judged_and_never_a_regression() -> None:
    from perfguard.records import VariantResult
    from perfguard.stats.rules import drift as drift_rule
    from perfguard.stats.thresholds import Thresholds
    from tests.measuring import measure
    from tests.test_lending import FAST

    torch.manual_seed(0)
    model = DropsLayers().eval()
    results = [measure(model, (torch.randn(4, 16),), "eager", FAST) for _ in range(5)]
    for r in results:
        check = r.drift_check
        assert check is not None and check.passed and not check.judged
        assert check.nondeterministic is not None and check.nondeterministic > 1e-3
        row = drift_rule(results[0], r, Thresholds())
        assert row is not None and row.verdict == "unchanged"
        assert "the model is not deterministic" in row.note and "torch.manual_seed" in row.note
        again = VariantResult.from_json(r.to_json())
        assert again.drift_check == check
    # a deterministic model is judged as before
    steady = measure(torch.nn.Linear(16, 16).eval(), (torch.randn(4, 16),), "eager", FAST)
    assert steady.drift_check is not None and steady.drift_check.judged
