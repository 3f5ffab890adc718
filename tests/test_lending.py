"""The user's model measured in place and given back as it was; the fp64 reference computed
one module at a time, without a second copy; the untimed work cut to the budget."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from perfguard import MeasureSettings, SamplingSettings, compute_reference
from perfguard.measure import drift
from perfguard.measure.sampling import fixed_work
from perfguard.variants.lending import NotLendable, in_fp64, lent
from tests.measuring import measure

CPU = torch.device("cpu")
FAST = MeasureSettings(
    sampling=SamplingSettings(budget_s=0.02, repeats=2, min_samples_per_repeat=3),
    memory_calls=1,
    device="cpu",
)


class NoCopies(nn.Module):
    """An MLP that refuses to be deep-copied: only a measurement in place can run it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> NoCopies:
        raise AssertionError("perfguard copied the model")


def state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.slow  # two variants measured, with the reference in fp64
def test_a_variant_that_leaves_the_weights_alone_measures_the_model_itself() -> None:
    torch.manual_seed(0)
    model = NoCopies().train()
    model.net[1].eval()  # a mode of its own, given back as it was
    before, pointers = state(model), [p.data_ptr() for p in model.parameters()]
    x = torch.randn(4, 16)
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    reference = compute_reference(model, (x,), CPU)
    for variant in ("eager", "amp-bf16"):
        result = measure(model, (x,), variant, FAST, reference=reference)
        assert result.status == "ok", result.error
    assert reference.fp64 is not None  # in fp64, piece by piece: no copy for that either
    assert torch.equal(torch.rand(3), expected_draw)  # the caller's generator left as it was
    assert model.training and not model.net[1].training and model.net[0].training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert [p.data_ptr() for p in model.parameters()] == pointers
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_a_variant_that_rewrites_the_weights_works_on_a_copy_and_says_so_when_it_cannot() -> None:
    model = NoCopies().eval()
    result = measure(model, (torch.randn(4, 16),), "prune-l1-unstructured", FAST)
    assert result.status == "error" and "copied the model" in (result.error or "")


def test_the_fp64_reference_piece_by_piece_equals_a_whole_fp64_copy() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.Tanh(), nn.Linear(64, 8))
    model.register_buffer("scale", torch.full((8,), 0.5))
    x = torch.randn(5, 32)
    whole = copy.deepcopy(model).double().eval()
    with torch.inference_mode():
        expected = whole(x.double()).reshape(-1).numpy()
    before = state(model)
    reference = compute_reference(model, (x,), CPU)
    assert reference.fp64 is not None and np.array_equal(reference.fp64, expected)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(t.dtype == torch.float32 for t in [*model.parameters(), *model.buffers()])


@pytest.mark.slow  # a second or more
def test_tied_weights_run_in_fp64_and_come_back_tied() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=1,
        n_embd=32,
        n_head=2,
        vocab_size=50,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 50, (2, 6))
    whole = copy.deepcopy(model).double()
    with torch.inference_mode():
        expected = whole(ids).logits.reshape(-1).numpy()
    reference = compute_reference(model, (ids,), CPU)
    assert reference.fp64 is not None
    np.testing.assert_allclose(reference.fp64, expected, rtol=0, atol=1e-12)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.dtype == torch.float32


class ReadsAChildsWeight(nn.Module):
    """Uses its child's weight in its own forward: the one case the pieces cannot follow."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.inner.weight.t()


def test_a_model_the_pieces_cannot_follow_is_judged_on_fp32_and_given_back_whole() -> None:
    model = ReadsAChildsWeight()
    before = state(model)
    reference = compute_reference(model, (torch.randn(2, 8),), CPU)
    assert reference.fp64 is None and "judged on fp32" in reference.fp64_note
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.inner.weight.dtype == torch.float32


def test_a_large_piece_is_judged_on_the_models_own_precision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(drift, "FP64_PIECE_FLOOR", 0)  # a small model stands for a big one
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 2))  # the first: 97% of it
    reference = compute_reference(model, (torch.randn(3, 64),), CPU)
    assert reference.fp64 is None
    assert "more than 10% of the model: judged on the model's own precision" in (
        reference.fp64_note
    )
    result = measure(model, (torch.randn(3, 64),), "eager", FAST, reference=reference)
    assert result.drift_check is not None and result.drift_check.reference == "fp32"
    assert any("model's own precision" in n for n in result.details.notes)


def test_a_bf16_model_keeps_its_dtype() -> None:
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).to(torch.bfloat16)
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    reference = compute_reference(model, (x,), CPU)
    result = measure(model, (x,), "eager", FAST, reference=reference)
    assert result.status == "ok" and result.drift_check is not None
    assert result.drift_check.passed and reference.fp64 is not None
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_lending_refuses_weights_on_two_devices_before_touching_anything() -> None:
    model = nn.Linear(2, 2)
    model.weight = nn.Parameter(torch.empty(2, 2, device="meta"))
    with pytest.raises(NotLendable, match="2 devices"), lent(model, CPU):
        pass
    assert model.training


def test_a_generation_s_forward_and_config_are_given_back() -> None:
    model = nn.Linear(2, 2)
    config: dict[str, str | None] = {"cache_implementation": None}
    model.generation_config = config  # type: ignore[assignment]
    with lent(model, CPU) as work:
        work.forward = lambda *a: None
        config["cache_implementation"] = "static"  # as a compiled generation sets it
    assert "forward" not in model.__dict__
    assert model.generation_config == {"cache_implementation": None}


def test_in_fp64_gives_every_piece_back_when_a_call_raises() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 5))  # the second cannot take 4
    with pytest.raises(RuntimeError), in_fp64(model):
        model(torch.randn(1, 4, dtype=torch.float64))
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize(
    ("call_ms", "expected", "note"),
    [
        (1.0, (3, 3, 5), None),  # an ordinary model: the full counts
        (400.0, (2, 2, 2), "peak memory over 2 calls (not 3), the profile over 2 calls"),
        (1500.0, (1, 1, 2), "the leak check over 2 calls (not 5)"),
    ],
)
def test_the_untimed_work_of_a_slow_model_fits_the_budget(
    call_ms: float, expected: tuple[int, int, int], note: str | None
) -> None:
    work = fixed_work(call_ms, 1.0, 3, 3, 5)
    assert (work.memory, work.profile, work.growth) == expected
    if note is None:
        assert work.shortened is None
    else:
        assert work.shortened is not None and note in work.shortened
        assert f"a call takes {call_ms:,.0f} ms" in work.shortened


# --- A/B on one GPU: where the idle side's weights wait ----------------------------------


@pytest.mark.parametrize(
    ("free", "weights", "waits"),
    [
        (60, 6, False),  # an 80 GB device, both 6 GB trees resident: room to spare
        (15, 6, True),  # under a quarter of the device free
        (30, 35, True),  # not this side's weights again
    ],
)
def test_the_idle_side_waits_on_the_host_only_where_both_do_not_fit(
    free: int, weights: int, waits: bool
) -> None:
    from perfguard.measure.residency import waits_on_host

    gb = 10**9
    assert waits_on_host(free * gb, 80 * gb, weights * gb) is waits


def test_a_side_that_waited_on_the_host_says_what_it_cost() -> None:
    from perfguard.measure.residency import Residency

    model = nn.Linear(4, 4)
    result = measure(model, (torch.randn(2, 4),), "eager", FAST)
    stays = Residency(model, CPU)
    with stays.turn():
        pass
    assert stays.on_host is False and stays.annotate(result) is result  # the CPU: no moves
    moved = Residency(model, CPU, on_host=True, moves=18, move_s=2.5)
    moved.free_bytes, moved.total_bytes = 12 * 2**30, 80 * 2**30
    notes = moved.annotate(result).details.notes
    assert notes[-1].startswith("same-job A/B: both trees did not fit on the device")
    assert "12.0 of 80.0 GiB free" in notes[-1] and "(18 moves, 2.5 s" in notes[-1]


@pytest.mark.cuda
@pytest.mark.parametrize("variant", ["eager", "compile-default"])
def test_a_model_of_a_third_of_the_gpu_is_measured_within_a_tenth_of_its_own_peak(
    variant: str,
) -> None:
    """A bf16 model of about 35% of the device, built on it, as teams hold one: measured with
    no second copy, its peak memory within 10% of the model's own."""
    device = torch.device("cuda")
    _, total = torch.cuda.mem_get_info(device)
    width, layers = 8192, max(1, int(0.35 * total // (8192 * 8192 * 2)))
    with torch.device(device):
        model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    model = model.to(torch.bfloat16).eval()
    x = torch.randn(16, width, device=device, dtype=torch.bfloat16)
    torch.cuda.reset_peak_memory_stats(device)
    with torch.inference_mode():
        model(x)
    alone = torch.cuda.max_memory_allocated(device)
    settings = MeasureSettings(
        sampling=SamplingSettings(budget_s=0.2, repeats=2, min_samples_per_repeat=3),
        device="cuda",
    )
    reference = compute_reference(model, (x,), device)
    torch.cuda.reset_peak_memory_stats(device)
    result = measure(model, (x,), variant, settings, reference=reference)
    assert result.status == "ok", result.error
    assert torch.cuda.max_memory_allocated(device) <= 1.10 * alone
    assert result.metrics.peak_memory_bytes is not None
    assert result.metrics.peak_memory_bytes <= 1.10 * alone
    assert all(p.dtype == torch.bfloat16 and p.device.type == "cuda" for p in model.parameters())


def test_an_a_b_worker_with_a_residency_times_its_blocks_through_it() -> None:
    from multiprocessing import Pipe

    from perfguard.measure.clock import HostClock
    from perfguard.measure.residency import Residency
    from perfguard.pytest_plugin.ab import protocol
    from perfguard.pytest_plugin.ab.worker import WorkerLink

    here, there = Pipe()
    model = nn.Linear(4, 4)
    residency = Residency(model, CPU)
    try:
        for message in (protocol.Block(), protocol.Block(), protocol.Finish()):
            there.send(message.wire())
        sampler = WorkerLink(here, "head", []).sampler(residency)
        settings = SamplingSettings(budget_s=0.01, repeats=2, min_samples_per_repeat=2)
        outcome = sampler(lambda: model(torch.randn(1, 4)), HostClock(), settings, lambda _: None)
        sent = [there.recv()["kind"] for _ in range(3)]
    finally:
        here.close()
        there.close()
    assert len(outcome.blocks_ms) == 2 and sent == ["ready", "times", "times"]
    assert residency.on_host is False and residency.moves == 0  # decided: the CPU stays put


class OwnTrain(nn.Module):
    """A model whose train() keeps its norm frozen, as fine-tuning code does."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.calls: list[bool] = []

    def train(self, mode: bool = True) -> OwnTrain:
        self.calls.append(mode)
        super().train(mode)
        self.norm.eval()  # always frozen
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(self.body(x))
        return out


@pytest.mark.slow  # a compile
def test_the_model_comes_back_through_its_own_train_with_nothing_of_perfguards_on_it() -> None:
    model = OwnTrain().train()
    before = {name: set(m.__dict__) for name, m in model.named_modules()}
    measure(model, (torch.randn(2, 8),), "compile-default", FAST)
    assert model.calls[-1] is True  # given back through its own train(), not the flags
    assert model.training and model.body.training and not model.norm.training
    assert {name: set(m.__dict__) for name, m in model.named_modules()} == before
    assert not hasattr(model, "_is_torch_compile")


def test_a_model_on_the_meta_device_is_one_line_saying_what_to_do() -> None:
    from perfguard.measure.job import Job

    with torch.device("meta"):
        model = nn.Linear(8, 8)
    with pytest.raises(TypeError, match=r"meta device .* materialize them first"):
        Job.of(model, (torch.randn(2, 8),))
