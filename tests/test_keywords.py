"""Keyword inputs: `perfguard.run(model, args, kwargs={...})` reaches every variant."""

from __future__ import annotations

import inspect
import json

import pytest
import torch
from torch import nn

from perfguard import MeasureSettings, SamplingSettings
from perfguard.measure.drift import compute_reference
from perfguard.measure.fingerprint import fingerprint
from tests.measuring import measure


class Masked(nn.Module):
    """Needs its keyword input: without it, the call fails."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * mask


FAST = MeasureSettings(sampling=SamplingSettings(budget_s=0.02, repeats=2), device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant",
    ["eager", "compile-default", "int8-dynamic", "prune-l1-unstructured", "onnxruntime"],
)
def test_keyword_inputs_reach_every_variant(variant: str) -> None:
    torch.manual_seed(0)
    x, mask = torch.randn(4, 16), (torch.rand(4, 16) > 0.5).float()
    result = measure(Masked().eval(), (x,), variant, FAST, kwargs={"mask": mask})
    assert result.status == "ok", result.error
    assert result.drift_check is not None and result.drift_check.passed


def test_the_reference_and_its_cache_key_see_the_keyword_inputs() -> None:
    torch.manual_seed(0)
    model, x = Masked().eval(), torch.randn(4, 16)
    ones, zeros = torch.ones(4, 16), torch.zeros(4, 16)
    cpu = torch.device("cpu")
    assert compute_reference(model, (x,), cpu, {"mask": zeros}).fp32.max() == 0
    assert compute_reference(model, (x,), cpu, {"mask": ones}).fp32.max() > 0
    assert fingerprint(model, (x,), {"mask": ones}) != fingerprint(model, (x,), {"mask": zeros})


def test_kwargs_must_be_a_mapping() -> None:
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        measure(Masked(), (torch.randn(1, 16),), "eager", FAST, kwargs=[1])


def bert() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A BERT from its config and its keyword inputs, with padding (the mask changes the
    outputs)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    model: nn.Module = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    return model, {"input_ids": ids, "attention_mask": mask}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["int8-dynamic", "onnxruntime"])
def test_a_hugging_face_bert_from_a_config_takes_keyword_inputs_in_each_variant(
    variant: str,
) -> None:
    """Quantized and exported to ONNX with its keyword inputs (compiled with them: the test
    above; a BERT compiled: test_cuda_training's step, on a GPU)."""
    model, named = bert()
    result = measure(model, (), variant, FAST, kwargs=named)
    assert result.status == "ok", result.error
    assert result.drift_check is not None and result.drift_check.passed


BERT = """
import pytest, torch
from tests_bert import bert

@pytest.mark.perfguard(variants=["eager"])
def test_bert(perfguard):
    model, named = bert()
    perfguard.run(model, (), kwargs=named)
"""


@pytest.mark.slow
def test_the_plugin_hands_keyword_inputs_to_the_model(pytester: pytest.Pytester) -> None:
    """Through the fixture, as a user writes it (the variants' handling of keyword inputs
    is the test above's, in this process)."""
    pytest.importorskip("transformers")
    pytester.makepyfile(
        tests_bert=f"import pytest, torch\nfrom torch import nn\n{inspect.getsource(bert)}",
        test_bert=BERT,
    )
    done = pytester.runpytest_subprocess(
        "--perfguard",
        "--perfguard-budget=0.05",
        "--perfguard-repeats=2",
        "--perfguard-compare=none",
        "--perfguard-device=cpu",
        "--perfguard-json=out.json",
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::DeprecationWarning",
        "-W",
        "ignore::FutureWarning",
    )
    assert done.ret == 0, done.stdout.str()
    done.assert_outcomes(passed=1)
    (result,) = json.loads((pytester.path / "out.json").read_text())["results"]
    assert result["status"] == "ok" and result["drift_check"]["passed"]
