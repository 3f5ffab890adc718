"""Training steps (`perfguard.train_step`): real models nobody here wrote, every figure, state
that never leaks between variants, one clear message for each way a step can be wrong, and
the plugin's wiring down to the JSON and the report."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

from perfguard import MeasureSettings, SamplingSettings, TrainStep, VariantResult
from perfguard.examples import SmallCNN, SmallMLP, example_inputs
from perfguard.records import Run
from perfguard.report.markdown import render_markdown
from tests.factories import run as run_of
from tests.measuring import measure

FAST = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.05, repeats=2, min_samples_per_repeat=5),
    memory_calls=1,
    device="cpu",
    warm_compile=False,
)


def adamw(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3)


def bert() -> tuple[nn.Module, dict[str, torch.Tensor], TrainStep]:
    """BERT fine-tuning for sequence classification, from its config (no download)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,  # one layer is a step of fine-tuning; two compile twice as long
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=3,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    ids = torch.randint(0, 100, (4, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 2, 1, 0])
    step = TrainStep(
        lambda out: nn.functional.cross_entropy(out.logits, labels.to(out.logits.device)), adamw
    )
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, step


def classifier(model: nn.Module, classes: int) -> TrainStep:
    targets = torch.arange(8) % classes
    return TrainStep(lambda out: nn.functional.cross_entropy(out, targets.to(out.device)), adamw)


def case(name: str) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any], TrainStep]:
    if name == "bert":
        model, named, step = bert()
        return model, (), named, step
    torch.manual_seed(0)
    if name == "cnn":  # conv, batch norm in training mode (its running stats move), pooling
        cnn = SmallCNN()
        return cnn, example_inputs(cnn), {}, classifier(cnn, 10)
    mlp = SmallMLP(d_out=16)
    return mlp, example_inputs(mlp), {}, classifier(mlp, 16)


_MEASURED: dict[tuple[str, str], VariantResult] = {}


def measured(name: str, variant: str) -> VariantResult:
    """Each model and variant measured once for this module's tests."""
    if (name, variant) not in _MEASURED:
        model, inputs, named, step = case(name)
        _MEASURED[name, variant] = measure(
            model, inputs, variant, FAST, test=name, kwargs=named, work=step
        )
    return _MEASURED[name, variant]


# The MLP trains under every variant here; the CNN eagerly, BERT eagerly and in bf16. Their
# compiled steps (28 and 38 s of cold compiles on a 2-core CPU, busy) take the MLP's path
# through perfguard (keyword inputs are BERT's eager step's, and compiled in test_keywords),
# the CNN's bf16 step (conv in bf16 is slow on a CPU) the MLP's and BERT's; every variant of
# all three trains on a GPU (test_cuda_training.py)
TRAINED = [
    ("mlp", "eager"),
    ("mlp", "compile-default"),
    ("mlp", "amp-bf16"),
    ("cnn", "eager"),
    ("bert", "eager"),
    ("bert", "amp-bf16"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "variant"), TRAINED)
def test_real_models_train_under_each_variant_with_every_figure(name: str, variant: str) -> None:
    r = measured(name, variant)
    assert r.status == "ok", r.error
    assert r.workload == "train"
    m = r.metrics
    assert m.latency_p50_ms and m.latency_p95_ms and m.latency_p99_ms
    batch = 4 if name == "bert" else 8
    assert m.throughput_per_s == pytest.approx(batch / (m.latency_p50_ms / 1000))
    assert m.peak_memory_bytes and m.peak_memory_bytes > 0
    assert (m.compile_time_s is not None) == (variant == "compile-default")
    check = r.drift_check
    assert check is not None and check.passed, check
    assert check.reference == "fp64"
    assert (
        check.tolerance_class
        == {
            "eager": "exact",
            "compile-default": "compiled-fp32",
            "amp-bf16": "reduced-precision",
        }[variant]
    )
    counted = r.counters
    assert counted is not None and counted.op_total and counted.flops
    assert counted.memory_growth_bytes_per_call == 0  # a step keeps nothing beyond its state
    # the backward's operators are in the step: a forward call would have none of these
    assert any("backward" in op for op, _ in counted.ops) or variant == "compile-default"
    if variant == "compile-default":
        assert counted.graphs and counted.graphs >= 1
        assert counted.backward_graphs == counted.graphs  # one backward per forward graph
        assert counted.graph_breaks == 0 and counted.recompiles == 0
    profile = r.details.profile
    assert profile is not None and profile["self_us"]


@pytest.mark.parametrize("variant", ["int8-dynamic", "prune-l1-unstructured", "onnxruntime"])
def test_inference_only_variants_skip_with_the_reason(variant: str) -> None:
    r = measured("mlp", variant)
    assert r.status == "skipped" and r.workload == "train"
    assert r.error == (
        f"{variant} is an inference-only variant: a training step is measured under eager, "
        "compile-* and amp-* (and their combinations)"
    )


@pytest.mark.slow
def test_the_step_costs_more_than_the_forward_and_counts_the_backward() -> None:
    """The training step of the MLP against its forward call: more FLOPs (the backward takes
    about twice the forward's), more time, and the weights' gradients and AdamW's two
    moments in its memory."""
    # one thread each: with a pool thread, a call waits for it behind another process's work
    # on the other core (a hogged 2-core run read every forward call at 40 ms)
    one = replace(FAST, threads=1)
    forward = measure(SmallMLP(d_out=16).eval(), example_inputs(SmallMLP(d_out=16)), "eager", one)
    model, inputs, named, train = case("mlp")
    step = measure(model, inputs, "eager", one, kwargs=named, work=train)
    assert forward.counters and step.counters and forward.counters.flops
    assert step.counters.flops and step.counters.flops > 2 * forward.counters.flops
    assert forward.workload == "forward"
    # the fastest sample of each: the one that ran undisturbed on a busy machine
    assert step.samples_ms and forward.samples_ms
    assert min(step.samples_ms) > min(forward.samples_ms)


@pytest.mark.slow
def test_each_variant_starts_from_the_same_state_and_the_callers_model_is_untouched() -> None:
    """Dropout draws the same masks in every variant (compiled ones too), so the first step's
    gradients agree with eager's to the last bits of a reordered sum; the caller's weights,
    its random generator and its training flag stay as they were."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 4)).eval()
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    step = TrainStep(lambda out: nn.functional.cross_entropy(out, y), adamw)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    eager = measure(model, (x,), "eager", FAST, work=step)
    again = measure(model, (x,), "eager", FAST, work=step)
    compiled = measure(model, (x,), "compile-default", FAST, work=step)
    assert eager.status == again.status == compiled.status == "ok", compiled.error
    assert eager.metrics.drift_max_abs == again.metrics.drift_max_abs == 0.0
    assert compiled.metrics.drift_max_rel is not None and compiled.metrics.drift_max_rel < 1e-5
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng) and not model.training


class Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("shape mismatch in block 3")


def _mean(out: torch.Tensor) -> torch.Tensor:
    return out.mean()


def _target_elsewhere(out: torch.Tensor) -> torch.Tensor:
    """What cross_entropy says on CUDA of targets left on the CPU (seen on an H200)."""
    raise RuntimeError(
        "Expected all tensors to be on the same device, but got target is on cpu, "
        "different from other tensors on cuda:0"
    )


def _broken_optimizer(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=-1.0)  # AdamW refuses a negative rate


@pytest.mark.parametrize(
    ("model", "loss_fn", "optimizer", "message"),
    [
        (Raises(), _mean, adamw, "train_step: RuntimeError: shape mismatch in block 3"),
        (
            nn.Linear(4, 4),
            lambda out: out,
            adamw,
            "train_step: loss_fn must return a scalar floating tensor; it returned shape "
            "(8, 4) of torch.float32 (reduce it, e.g. loss.mean())",
        ),
        (
            nn.Linear(4, 4),
            lambda out: 1.0,
            adamw,
            "train_step: loss_fn must return a scalar tensor; it returned a float",
        ),
        (
            nn.Linear(4, 4),
            _mean,
            _broken_optimizer,
            "train_step: the optimizer factory raised ValueError: Invalid learning rate: -1.0 "
            "(it is called with the list of trainable parameters, e.g. "
            "lambda params: torch.optim.AdamW(params))",
        ),
        (
            nn.Linear(4, 4),
            _mean,
            lambda params: "not an optimizer",
            "train_step: the optimizer factory returned a str, not a torch.optim.Optimizer "
            "(pass a factory: lambda params: torch.optim.AdamW(params))",
        ),
        (
            nn.Linear(4, 4).requires_grad_(False),
            _mean,
            adamw,
            "train_step: the model has no trainable parameters (requires_grad is False on "
            "every one): there is nothing to train; measure it with perfguard.run instead",
        ),
        (
            nn.Linear(4, 4),
            _target_elsewhere,
            adamw,
            "train_step: RuntimeError: Expected all tensors to be on the same device, but got "
            "target is on cpu, different from other tensors on cuda:0 (perfguard moves the "
            "model and its inputs to the run's device; tensors that loss_fn holds, its "
            "targets, stay where they are: `target.to(out.device)`)",
        ),
    ],
    ids=[
        "raises",
        "non-scalar",
        "not-a-tensor",
        "factory-raises",
        "not-an-optimizer",
        "frozen",
        "target-elsewhere",
    ],
)
def test_a_wrong_step_is_one_clear_error(
    model: nn.Module,
    loss_fn: Callable[[Any], Any],
    optimizer: Callable[[list[nn.Parameter]], Any],
    message: str,
) -> None:
    r = measure(model, (torch.randn(8, 4),), "eager", FAST, work=TrainStep(loss_fn, optimizer))
    assert (r.status, r.error, r.workload) == ("error", message, "train")


def test_the_workload_and_throughput_round_trip_and_old_results_read_as_forward() -> None:
    r = measured("mlp", "eager")
    doc = json.loads(json.dumps(run_of([r]).to_json()))
    assert doc["results"][0]["workload"] == "train"
    assert doc["results"][0]["metrics"]["throughput_per_s"] > 0
    back = Run.from_json(doc).results[0]
    assert back.workload == "train" and back.metrics == r.metrics
    del doc["results"][0]["workload"]
    assert Run.from_json(doc).results[0].workload == "forward"


def test_the_report_says_which_results_are_training_steps() -> None:
    step = measured("mlp", "eager")
    forward = replace(step, test="fwd", workload="forward")
    text = render_markdown(run_of([step, forward]))
    assert "| mlp | eager · training step |" in text
    assert "| fwd | eager |" in text
    assert "items/s" in text
    from perfguard.report.terminal import summary_lines

    lines = summary_lines(run_of([step, forward]))
    assert any(line.startswith("  eager (training step) ") for line in lines), lines


PLUGIN_TEST = """
import pytest
import torch
from torch import nn

@pytest.mark.perfguard(variants=["eager", "int8-dynamic"])
def test_step(perfguard):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    perfguard.train_step(
        model,
        (x,),
        loss_fn=lambda out: nn.functional.cross_entropy(out, y),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        batch=8,
    )

@pytest.mark.perfguard(variants=["eager"])
def test_bad_loss(perfguard):
    perfguard.train_step(
        nn.Linear(4, 4), (torch.randn(2, 4),), loss_fn=lambda out: out, optimizer=torch.optim.SGD
    )

@pytest.mark.perfguard(variants=["eager"])
def test_forward(perfguard):
    perfguard.run(nn.Linear(4, 4).eval(), (torch.randn(2, 4),))
"""


@pytest.mark.slow
def test_the_plugin_measures_a_training_step_and_the_session_goes_on(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_train=PLUGIN_TEST)
    result = pytester.runpytest_subprocess(
        "--perfguard",
        "--perfguard-budget=0.05",
        "--perfguard-repeats=2",
        "--perfguard-device=cpu",
        "--perfguard-compare=none",
        "--perfguard-json=out.json",
        "-p",
        "no:cacheprovider",
        "-rs",
    )
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*test_bad_loss[[]eager[]]*",
            "eager: train_step: loss_fn must return a scalar floating tensor; it returned "
            "shape (2, 4) of torch.float32 (reduce it, e.g. loss.mean())",
            "*int8-dynamic is an inference-only variant*",
        ]
    )
    doc = json.loads((pytester.path / "out.json").read_text())
    by = {(r["test"], r["variant"]): r for r in doc["results"]}
    step = by["test_train.py::test_step", "eager"]
    assert step["workload"] == "train" and step["status"] == "ok"
    assert step["metrics"]["throughput_per_s"] == pytest.approx(
        8 / (step["metrics"]["latency_p50_ms"] / 1000)
    )
    assert by["test_train.py::test_forward", "eager"]["workload"] == "forward"
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "eager · training step" in report


AB_MODELS = """
import torch
from torch import nn

WIDTH = {width}

def mlp(width):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))

def step(perfguard, width):
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    perfguard.train_step(
        mlp(width),
        (x,),
        loss_fn=lambda out: nn.functional.cross_entropy(out, y),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4),
    )
"""

AB_TESTS = """
import pytest
from mymodels import WIDTH, step

@pytest.mark.perfguard(variants=["eager"], ab_min_change_pct=30)
def test_widened(perfguard):
    step(perfguard, WIDTH)

@pytest.mark.perfguard(variants=["eager"], ab_min_change_pct=30)
def test_same(perfguard):
    step(perfguard, 256)
"""


@pytest.mark.slow
@pytest.mark.realtime
def test_a_doubled_hidden_width_is_flagged_on_the_step_by_same_job_ab(
    pytester: pytest.Pytester,
) -> None:
    """One same-job A/B session: the base commit trains a 256-wide MLP in both tests; the
    head doubles the width in one of them. The widened step is a regression, the other one
    (identical code on both sides) is never flagged: on a busy machine its first reading may
    move, and the confirmation then withdraws it as `inconclusive`, which is the honest answer
    there, not a false alarm."""
    from tests.gitrepo import git
    from tests.timing import ONE_THREAD

    pytester.makepyfile(mymodels=AB_MODELS.format(width=256), test_models=AB_TESTS)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    pytester.makepyfile(mymodels=AB_MODELS.format(width=512))
    git(pytester.path, "commit", "-q", "-am", "head: a hidden layer twice as wide")
    result = pytester.runpytest_subprocess(
        "--perfguard",
        "--perfguard-ab=HEAD~1",
        "--perfguard-device=cpu",
        ONE_THREAD,
        "--perfguard-budget=0.3",
        "--perfguard-repeats=5",
        "--perfguard-json=out.json",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 1, result.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    p50 = {c["test"]: c for c in doc["comparisons"] if c["metric"] == "latency_p50_ms"}
    widened, same = p50["test_models.py::test_widened"], p50["test_models.py::test_same"]
    assert widened["verdict"] == "regression" and widened["change_pct"] > 50, widened
    assert same["verdict"] in ("unchanged", "inconclusive"), same
    assert {r["workload"] for r in (*doc["results"], *doc["baseline_results"])} == {"train"}
    report = (pytester.path / "reports" / "perfguard.md").read_text()
    assert "| test&#95;models.py::test&#95;widened | eager · training step |" in report
