"""Verdicts per operator and kernel: the places of a call, their record, their statistics and
the report's words, against seeded blocks (the profiler itself is exercised once, on a small
model, and end to end in `tests/test_same_job.py`)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from perfguard.measure.clock import FakeClock
from perfguard.measure.op_times import (
    OP_CALLS_LEAST,
    OP_CALLS_MOST,
    _Event,
    _places,
    canonical,
    summary,
)
from perfguard.measure.sampling import SamplingSettings, sample, sample_on_demand
from perfguard.pytest_plugin.ab import protocol
from perfguard.records import Comparison, Details, RecordError, Run, VariantResult
from perfguard.records.op_times import KEEP_MOST, OpChange, OpTimes, kept
from perfguard.report.markdown import render_markdown
from perfguard.stats.op_verdicts import compare_ops, compare_results
from perfguard.stats.thresholds import Thresholds
from perfguard.store.schema import upgrade
from tests.factories import result, run

LAYERS = 20


def blocks(
    seed: int, slowed: float = 0.0, *, n: int = 8, noise: float = 0.03, place: int = 7
) -> OpTimes:
    """Seeded profiled blocks of a 20-layer model: each layer's addmm 50 µs and relu 5 µs,
    layer `place`'s addmm slower by `slowed` (a share), each value with its block's noise."""
    rng = random.Random(seed)
    out, calls = [], []
    for _ in range(n):
        drift = 1 + rng.gauss(0, noise)  # what moves a whole block (both sides' pairs share it)
        block = {}
        for layer in range(1, LAYERS + 1):
            grow = 1 + slowed if layer == place else 1.0
            block[f"aten::addmm #{layer}"] = 50.0 * grow * drift * (1 + rng.gauss(0, noise))
            block[f"aten::relu #{layer}"] = 5.0 * drift * (1 + rng.gauss(0, noise))
        block["aten::tiny #1"] = 0.5 * (1 + 0.4 * (seed % 2)) * drift  # 0.05% of the call
        calls.append(sum(block.values()) * 1.3)
        out.append(block)
    where = {f"aten::addmm #{i}": f"{i - 1}.fc" for i in range(1, LAYERS + 1)}
    return OpTimes(clock="host", calls=3, call_us=tuple(calls), blocks=tuple(out), where=where)


def with_ops(seed: int, ops: OpTimes, center: float = 1.0) -> VariantResult:
    r = result("t.py::test_m", "eager", center, seed=seed)
    return replace(r, details=replace(r.details, op_times=ops))


def test_a_slowed_layer_is_called_where_it_is_and_nothing_else_is() -> None:
    base = with_ops(1, blocks(1))
    head = with_ops(2, blocks(2, slowed=0.20))
    found = compare_ops([(base, head)], Thresholds(), paired=True)
    called = [c for c in found if c.called]
    assert [(c.place, c.where, c.verdict) for c in called] == [
        ("aten::addmm #7", "6.fc", "regression")
    ]
    op = called[0]
    assert 15 < op.change_pct < 25 and 3 < op.share_pct < 5
    assert op.adjusted_p is not None and op.adjusted_p < 0.05
    assert not op.gating  # reported unless the run or the test asks
    assert op.label() == "`aten::addmm` in `6.fc`"


def test_identical_code_calls_no_place_over_many_seeds() -> None:
    called = 0
    for seed in range(40):
        base = with_ops(seed, blocks(2 * seed))
        head = with_ops(seed + 1, blocks(2 * seed + 1))
        called += sum(c.called for c in compare_ops([(base, head)], Thresholds(), paired=True))
    assert called == 0


def test_a_change_under_the_bar_is_not_called_and_the_bar_can_be_set_per_test() -> None:
    base = with_ops(1, blocks(1, noise=0.005))
    head = with_ops(2, blocks(2, slowed=0.06, noise=0.005))
    assert not any(c.called for c in compare_ops([(base, head)], Thresholds(), paired=True))
    low = Thresholds(per_test={"t.py::test_m": {"op_min_change_pct": 3.0}})
    called = [c.place for c in compare_ops([(base, head)], low, paired=True) if c.called]
    assert called == ["aten::addmm #7"]


def test_a_small_share_is_reported_as_minor_never_called() -> None:
    base, head = blocks(1, noise=0.001), blocks(3, noise=0.001)
    grown = tuple({**b, "aten::tiny #1": b["aten::tiny #1"] * 1.5} for b in head.blocks)
    head = replace(head, blocks=grown)
    found = compare_ops([(with_ops(1, base), with_ops(2, head))], Thresholds(), paired=True)
    tiny = [c for c in found if c.place == "aten::tiny #1"]
    assert [c.verdict for c in tiny] == ["minor"] and tiny[0].share_pct < 1


def test_the_correction_is_run_wide_over_every_place_of_every_item() -> None:
    # one place a little past significance alone: among many items' places it is not called
    base = with_ops(1, blocks(1, n=6, noise=0.05))
    head = with_ops(2, blocks(2, slowed=0.12, n=6, noise=0.05))
    alone = compare_ops([(base, head)], Thresholds(), paired=True)
    alone_p = [c.adjusted_p for c in alone if c.place == "aten::addmm #7"]
    others = [
        (with_ops(10 + i, blocks(10 + i, n=6)), with_ops(50 + i, blocks(50 + i, n=6)))
        for i in range(20)
    ]
    pairs = [(b, replace(h, test=f"t.py::test_{i}")) for i, (b, h) in enumerate(others)]
    pairs = [(replace(b, test=h.test), h) for b, h in pairs]
    together = compare_ops([(base, head), *pairs], Thresholds(), paired=True)
    together_p = [
        c.adjusted_p for c in together if c.place == "aten::addmm #7" and c.test == head.test
    ]
    assert alone_p and alone_p[0] is not None
    assert not together_p or (together_p[0] is not None and together_p[0] > alone_p[0])


def test_small_places_are_a_family_of_their_own() -> None:
    """Places that can only be reported (under 1% of the call) never raise the bar of those
    that may be called: forty more tiny places leave the matmul's adjusted p as it was."""
    base, head = blocks(1, n=6, noise=0.05), blocks(2, slowed=0.12, n=6, noise=0.05)

    def with_tiny(ops: OpTimes, seed: int) -> OpTimes:
        rng = random.Random(seed)
        grown = tuple(
            {**b, **{f"aten::tiny #{i}": 0.5 * (1 + rng.gauss(0, 0.05)) for i in range(2, 42)}}
            for b in ops.blocks
        )
        return replace(ops, blocks=grown)

    def p_of(b: OpTimes, h: OpTimes) -> float | None:
        found = compare_ops([(with_ops(1, b), with_ops(2, h))], Thresholds(), paired=True)
        return next(c.adjusted_p for c in found if c.place == "aten::addmm #7")

    assert p_of(with_tiny(base, 3), with_tiny(head, 4)) == pytest.approx(p_of(base, head))


def test_a_block_keeps_medians_so_one_preempted_call_moves_nothing() -> None:
    calls = [{"aten::addmm #1": 50.0, "aten::relu #1": 5.0} for _ in range(9)]
    calls[4] = {"aten::addmm #1": 4050.0, "aten::relu #1": 5.0}  # a 4-ms time slice lost
    calls[6] = {"aten::addmm #1": 50.0}  # a place one call did not run counts 0 there
    call, kept_places = summary([100.0] * 8 + [4100.0], calls)
    assert call == 100.0 and kept_places == {"aten::addmm #1": 50.0, "aten::relu #1": 5.0}


def sized(monkeypatch: pytest.MonkeyPatch, call_s: float, **options: Any) -> int:
    """Calls per block of a profiler whose sizing call reads `call_s` on its clock (a fake
    one: a busy host cannot move it)."""
    torch = pytest.importorskip("torch")
    from perfguard.measure import op_times

    ticks = iter([0.0, call_s])
    monkeypatch.setattr(op_times, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    return op_times.OpProfiler(lambda: None, torch.device("cpu"), **options)._sized()


def test_a_block_is_sized_to_its_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sized(monkeypatch, 0.00001) == OP_CALLS_MOST
    assert sized(monkeypatch, 0.05) == OP_CALLS_LEAST
    assert sized(monkeypatch, 0.05, calls=5) == 5
    assert sized(monkeypatch, 0.002) == 16  # by default, the default budget's 31 ms blocks


@pytest.mark.parametrize(("budget_s", "calls"), [(2.0, 16), (0.05, OP_CALLS_LEAST), (10.0, 64)])
def test_the_blocks_take_a_share_of_the_sampling_budget(
    monkeypatch: pytest.MonkeyPatch, budget_s: float, calls: int
) -> None:
    """A 2 ms call: the default budget's 31 ms blocks hold 16 calls; a test's 0.05 s budget
    the fewest; a long budget the most."""
    from perfguard.measure.op_times import op_block_ms

    assert op_block_ms(2.0, 8) == pytest.approx(31.25)
    assert sized(monkeypatch, 0.002, block_ms=op_block_ms(budget_s, 8)) == calls


def test_against_a_stored_baseline_the_blocks_are_not_paired() -> None:
    base = with_ops(1, blocks(1))
    head = with_ops(2, blocks(2, slowed=0.25))
    found = compare_results([base], [head], Thresholds(), paired=False)
    called = [c for c in found if c.called]
    assert [c.place for c in called] == ["aten::addmm #7"] and not called[0].paired


def test_gate_kernels_lets_a_called_place_gate_the_run() -> None:
    base = with_ops(1, blocks(1))
    head = with_ops(2, blocks(2, slowed=0.3))
    found = compare_ops([(base, head)], Thresholds(gate_kernels=True), paired=True)
    assert [c.place for c in found if c.gating] == ["aten::addmm #7"]
    assert replace(run([head]), op_comparisons=found).has_regression
    assert not replace(
        run([head]), op_comparisons=tuple(replace(c, gating=False) for c in found)
    ).has_regression


def test_results_without_op_times_or_on_other_clocks_are_not_compared() -> None:
    plain = result("t.py::test_m", "eager", 1.0)
    device = replace(blocks(2, slowed=0.3), clock="device")
    assert compare_ops([(plain, with_ops(2, blocks(2)))], Thresholds(), paired=True) == ()
    assert (
        compare_ops([(with_ops(1, blocks(1)), with_ops(2, device))], Thresholds(), paired=True)
        == ()
    )


def test_op_times_and_changes_round_trip_and_refuse_bad_input() -> None:
    ops = blocks(3)
    assert OpTimes.from_json(ops.to_json()).blocks[0]["aten::addmm #1"] == pytest.approx(
        ops.blocks[0]["aten::addmm #1"], abs=1e-3
    )
    details = Details(op_times=ops)
    assert Details.from_json(details.to_json()).op_times is not None
    with pytest.raises(RecordError, match="op_times lacks the key 'clock'"):
        OpTimes.from_json({"calls": 1, "call_us": [], "blocks": []})
    with pytest.raises(RecordError, match="must be a number of microseconds"):
        OpTimes.from_json({"clock": "host", "calls": 1, "call_us": [1.0], "blocks": [{"x": -1}]})
    base = with_ops(1, blocks(1))
    head = with_ops(2, blocks(2, slowed=0.2))
    found = compare_ops([(base, head)], Thresholds(), paired=True)
    doc = replace(run([head]), op_comparisons=found).to_json()
    again = Run.from_json(doc)
    assert again.op_comparisons == tuple(OpChange.from_json(c.to_json()) for c in found)
    with pytest.raises(RecordError, match="op verdict must be one of"):
        OpChange.from_json({**found[0].to_json(), "verdict": "worse"})


def test_a_block_keeps_a_bounded_number_of_places() -> None:
    places = {f"aten::op #{i}": 1.0 + i for i in range(500)}
    assert len(kept(places, 500.0)) == KEEP_MOST
    assert kept({"a #1": 0.1, "b #1": 10.0}, 1000.0) == {"b #1": 10.0}  # under 0.2% of the call


def test_a_version_14_file_reads_without_op_times() -> None:
    doc = run([result("t.py::test_m", "eager", 1.0)]).to_json()
    doc["schema_version"] = 14
    upgraded = upgrade(doc)
    assert upgraded["schema_version"] == 15
    assert Run.from_json(upgraded).op_comparisons == ()


def test_generated_names_lose_their_hashes_and_kernel_names_keep_their_shapes() -> None:
    assert canonical("## Call CompiledFxGraph fqkx3vmb2aflq7bsm5anl7lnkfhpq4xwqy ##") == (
        "## Call CompiledFxGraph <hash> ##"
    )
    assert canonical("triton_poi_fused_add_0_5f2a9c3e1b7d4a60") == "triton_poi_fused_add_0_<hash>"
    kernel = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_warpgroupsize1x1x1"
    assert canonical(kernel) == kernel
    assert canonical("aten::addmm") == "aten::addmm"


def _event(
    name: str, start: int, end: int, *, device: bool = False, corr: int = 0, linked: int = 0
) -> _Event:
    return _Event(name, start, end, 1, device, corr, linked)


def test_places_are_self_times_numbered_by_occurrence_within_each_call() -> None:
    events = [
        _event("perfguard: op call", 0, 100),
        _event("aten::linear", 10, 40),
        _event("aten::addmm", 15, 35),  # inside linear: linear's self time is 10
        _event("aten::linear", 50, 90),
        _event("aten::addmm", 55, 85),
        _event("perfguard: op call", 200, 300),
        _event("aten::linear", 210, 250),
        _event("aten::addmm", 212, 248),
        _event("aten::linear", 260, 290),
        _event("aten::addmm", 262, 288),
    ]
    call_us, times, _ = _places(events, on_device=False)
    assert call_us == [0.1, 0.1]
    assert times[0] == {
        "aten::linear #1": 0.01,
        "aten::addmm #1": 0.02,
        "aten::linear #2": 0.01,
        "aten::addmm #2": 0.03,
    }
    assert times[1]["aten::addmm #1"] == pytest.approx(0.036)


def test_kernels_belong_to_the_call_that_launched_them() -> None:
    events = [
        _event("perfguard: op call", 0, 100),
        _event("cudaLaunchKernel", 10, 12, corr=1),
        _event("cudaLaunchKernel", 20, 22, corr=2),
        _event("perfguard: op call", 200, 300),
        _event("cudaLaunchKernel", 210, 212, corr=3),
        _event("gemm", 400, 450, device=True, corr=11, linked=1),
        _event("gemm", 460, 500, device=True, corr=12, linked=2),
        _event("gemm", 600, 660, device=True, corr=13, linked=3),
    ]
    _, times, _ = _places(events, on_device=True)
    assert times == [{"gemm #1": 0.05, "gemm #2": 0.04}, {"gemm #1": 0.06}]


def test_sampling_takes_its_op_blocks_after_the_timed_ones() -> None:
    order: list[str] = []

    def ops() -> tuple[float, dict[str, float]]:
        order.append("ops")
        return 10.0, {"a #1": 1.0}

    settings = SamplingSettings(repeats=2, op_blocks=3, min_warmup=1, max_warmup=3)
    out = sample(lambda: order.append("call"), FakeClock(itertools.repeat(1.0)), settings, ops=ops)
    assert len(out.op_blocks) == 3 and order[-1] == "ops"
    assert "ops" not in order[: -3 * (settings.rewarm_calls + 1)]
    commands = iter(["block", "ops", "ops", "finish"])
    said: list[object] = []
    out = sample_on_demand(
        lambda: None,
        FakeClock(itertools.repeat(1.0)),
        settings,
        lambda _: None,
        ready=lambda *_: None,
        next_command=lambda: next(commands),
        hand_over=lambda _: None,
        ops=ops,
        hand_over_ops=said.append,
    )
    assert len(out.blocks_ms) == 1 and len(out.op_blocks) == 2 and len(said) == 2


def test_the_protocol_carries_the_op_blocks() -> None:
    assert protocol.command(protocol.Ops().wire()) == protocol.Ops()
    assert protocol.report(protocol.OpsTaken(12).wire()) == protocol.OpsTaken(12)
    ready = protocol.report(protocol.Ready(repeats=5, warmup_calls=3, op_blocks=8).wire())
    assert isinstance(ready, protocol.Ready) and ready.op_blocks == 8
    with pytest.raises(protocol.ProtocolError):
        protocol.command(protocol.OpsTaken(1).wire())


def test_the_report_locates_a_change_the_model_could_not_call() -> None:
    base = with_ops(1, blocks(1))
    head = with_ops(2, blocks(2, slowed=0.25))
    found = compare_ops([(base, head)], Thresholds(), paired=True)
    p50 = Comparison(
        test="t.py::test_m",
        variant="eager",
        metric="latency_p50_ms",
        baseline=1.0,
        current=1.011,
        change_pct=1.1,
        p_value=0.2,
        cohens_d=0.3,
        verdict="unchanged",
    )
    doc = replace(run([head]), comparisons=(p50,), op_comparisons=found)
    text = render_markdown(doc)
    assert "### Operators and kernels" in text
    assert "a +1.1% slowdown of the model (unchanged by its own verdict), located in " in text
    assert "`aten::addmm` in `6.fc`: +2" in text
    assert "(reported only)" in text
    gated = replace(doc, op_comparisons=tuple(replace(c, gating=c.called) for c in found))
    assert "0 regression(s) and 1 in operators or kernels" in render_markdown(gated)


def test_the_profiler_names_each_layer_of_a_module_it_runs() -> None:
    torch = pytest.importorskip("torch")
    from perfguard.measure.op_times import OpProfiler

    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(3)]).eval()
    x = torch.randn(4, 32)
    with torch.inference_mode():
        profiler = OpProfiler(lambda: model(x), torch.device("cpu"), model)
        taken = profiler.times([profiler.block() for _ in range(2)])
    assert taken is not None and taken.clock == "host" and len(taken.blocks) == 2
    addmms = sorted(p for p in taken.places if p.startswith("aten::addmm"))
    assert addmms == ["aten::addmm #1", "aten::addmm #2", "aten::addmm #3"]
    assert [taken.where[p] for p in addmms] == ["0", "1", "2"]
    unnamed = OpProfiler(lambda: model(x), torch.device("cpu"), None)
    with torch.inference_mode():
        plain = unnamed.times([unnamed.block(), unnamed.block()])
    assert plain is not None and plain.where == {}


@pytest.mark.cuda
def test_the_profiler_times_each_kernel_of_a_cuda_call_and_names_its_layer() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from perfguard.measure.op_times import OpProfiler

    device = torch.device("cuda")
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(3)]).to(device).eval()
    x = torch.randn(256, 512, device=device)
    with torch.inference_mode():
        model(x)
        torch.cuda.synchronize()
        profiler = OpProfiler(lambda: model(x), device, model)
        taken = profiler.times([profiler.block() for _ in range(3)])
    assert profiler.failed is None
    assert taken is not None and taken.clock == "device" and len(taken.blocks) == 3
    # kernels, not operators: three launches of the same GEMM kernel, one a layer, each timed
    assert not any(p.startswith("aten::") for p in taken.places)
    counts: dict[str, int] = {}
    for place in taken.places:
        name = place.rsplit(" #", 1)[0]
        counts[name] = counts.get(name, 0) + 1
    gemm = max(counts, key=lambda n: counts[n])
    assert counts[gemm] >= 3
    layers = [taken.where.get(f"{gemm} #{i}") for i in (1, 2, 3)]
    assert layers == ["0", "1", "2"]
    assert all(all(block[f"{gemm} #{i}"] > 0 for i in (1, 2, 3)) for block in taken.blocks)
    assert all(call > 0 for call in taken.call_us)
