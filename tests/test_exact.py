"""Exact counters: recorded per variant, compared without statistics, shown first."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from perfguard.records import SCHEMA_VERSION, Comparison, Counters, Run, VariantResult, reason
from perfguard.report import format as fmt
from perfguard.report.markdown import render_markdown
from perfguard.stats.exact import exact_comparisons
from perfguard.stats.verdicts import compare_runs
from perfguard.store.run_file import BaselineError, read_run_file
from tests.factories import result, run
from tests.measuring import measure
from tests.test_measure import FAST

REASON = "Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: ..."
BASE = Counters(
    graphs=1,
    graph_breaks=0,
    recompiles=0,
    ops=(("aten::addmm", 2), ("aten::relu", 1)),
    flops=1000,
    param_bytes=400,
    buffer_bytes=0,
)


def test_a_new_graph_break_is_a_gating_regression_naming_its_reason() -> None:
    head = replace(BASE, graphs=2, graph_breaks=1, break_reasons=((REASON, 1),))
    found = {
        c.metric: c for c in exact_comparisons("t", "compile-default", BASE, head, gate_ops=False)
    }
    breaks = found["graph_breaks"]
    assert (breaks.verdict, breaks.gating, breaks.p_value) == ("regression", True, None)
    assert breaks.reasons == (
        reason(
            "new_graph_breaks",
            breaks="Unsupported Tensor.item() call with capture_scalar_outputs=False",
        ),
    )
    assert found["graphs"].verdict == "regression"
    assert found["recompiles"].verdict == "unchanged"
    assert found["aten_ops"].verdict == "unchanged" and found["flops"].verdict == "unchanged"


def test_an_added_operator_is_named_and_gates_only_when_asked() -> None:
    head = replace(BASE, ops=(("aten::addmm", 2), ("aten::relu", 1), ("aten::add", 1)))
    [ops] = [
        c
        for c in exact_comparisons("t", "eager", BASE, head, gate_ops=False)
        if c.metric == "aten_ops"
    ]
    assert (ops.verdict, ops.gating, ops.baseline, ops.current) == ("regression", False, 3, 4)
    assert ops.reasons == (reason("op_changes", changes="added aten::add (x1)"),)
    [gated] = [
        c
        for c in exact_comparisons("t", "eager", BASE, head, gate_ops=True)
        if c.metric == "aten_ops"
    ]
    assert gated.gating
    swapped = replace(BASE, ops=(("aten::addmm", 2), ("aten::gelu", 1)))
    [c] = [
        c
        for c in exact_comparisons("t", "eager", BASE, swapped, gate_ops=False)
        if c.metric == "aten_ops"
    ]
    assert c.verdict == "regression"  # same total, another operator: more of something
    assert c.reasons == (
        reason("op_changes", changes="added aten::gelu (x1); gone aten::relu (x1)"),
    )
    fewer = replace(BASE, ops=(("aten::addmm", 1), ("aten::relu", 1)))
    [c] = [
        c
        for c in exact_comparisons("t", "eager", BASE, fewer, gate_ops=False)
        if c.metric == "aten_ops"
    ]
    assert (c.verdict, c.reasons) == (
        "improvement",
        (reason("op_changes", changes="aten::addmm 2 -> 1"),),
    )


def test_nothing_is_compared_where_a_side_has_no_counters() -> None:
    assert list(exact_comparisons("t", "eager", None, BASE, gate_ops=False)) == []
    eager = Counters(ops=(("aten::mm", 1),))
    metrics = [c.metric for c in exact_comparisons("t", "eager", eager, eager, gate_ops=False)]
    assert metrics == ["aten_ops"]  # no graph counters for an eager variant


def test_counters_round_trip_and_a_pre_release_file_is_refused(tmp_path: Path) -> None:
    r = replace(
        result("t.py::test_m", "eager", 1.0), counters=replace(BASE, break_reasons=((REASON, 1),))
    )
    doc = run([r]).to_json()
    assert doc["schema_version"] == SCHEMA_VERSION == 15
    assert doc["results"][0]["counters"]["ops"] == {"aten::addmm": 2, "aten::relu": 1}
    assert Run.from_json(json.loads(json.dumps(doc))).results[0].counters == r.counters
    old = json.loads(json.dumps(doc))
    old["schema_version"] = 1
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.raises(BaselineError, match=r"pre-release perfguard .* measure that commit again"):
        read_run_file(path)


def test_counts_are_refused_when_negative_or_not_numbers() -> None:
    from perfguard.records import RecordError

    with pytest.raises(RecordError):
        Counters(graph_breaks=-1)
    with pytest.raises(RecordError):
        Counters.from_json({"ops": {"aten::mm": -2}})
    with pytest.raises(RecordError):
        Counters.from_json({"flops": "many"})


def test_the_report_shows_exact_signals_first() -> None:
    base_r = replace(result("t.py::test_m", "compile-default", 1.0, seed=1), counters=BASE)
    head_counters = replace(BASE, graphs=2, graph_breaks=1, break_reasons=((REASON, 1),))
    head_r = replace(result("t.py::test_m", "compile-default", 1.0, seed=2), counters=head_counters)
    head = run([head_r], commit="b" * 40)
    compared = replace(head, comparisons=compare_runs(run([base_r]), head))
    assert compared.has_regression
    text = render_markdown(compared)
    assert text.index("### Exact signals") < text.index("Latency is compared")
    assert "| graph&#95;breaks |" in text or "| graph_breaks |" in text
    assert "new graph break: Unsupported Tensor.item() call" in text


class Branchy(nn.Module):
    def __init__(self, item: bool) -> None:
        super().__init__()
        self.item = item
        self.linear = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if self.item and y.sum().item() > -1e9:  # a Python branch on a tensor's value
            y = y + 1
        return torch.relu(y)


@pytest.mark.slow
def test_measuring_counts_graph_breaks_with_reasons_and_operators() -> None:
    """A break, its reason and the two graphs it leaves (a graph without breaks is counted
    as one in test_measure's and test_training's compiled variants: a cold compile each)."""
    settings = replace(FAST, warm_compile=False)
    x = torch.randn(4, 32)
    r = measure(Branchy(True), (x,), "compile-default", settings)
    assert r.status == "ok", r.error
    c = r.counters
    assert c is not None
    assert c.graph_breaks == 1 == r.metrics.graph_breaks
    assert r.metrics.recompiles == 0
    assert c.graphs == 2
    assert c.break_reasons and "item()" in c.break_reasons[0][0]
    assert c.param_bytes == (32 * 32 + 32) * 4 and c.buffer_bytes == 0
    assert c.flops == 2 * 4 * 32 * 32
    eager = measure(Branchy(True), (x,), "eager", settings).counters
    assert eager is not None and eager.graphs is None
    assert dict(eager.ops)["aten::addmm"] == 1
    assert "aten::item" in dict(eager.ops)


# --- the why of a regression, and the traces ----------------------------------------------


def test_a_regression_shows_the_operators_whose_self_time_grew() -> None:
    from perfguard.stats.why import explain, with_why

    base = {"aten::addmm": 100.0, "aten::relu": 10.0, "aten::copy_": 5.0}
    head = {"aten::addmm": 400.0, "aten::relu": 11.0, "aten::mul": 30.0}
    rows = explain(base, head)
    assert rows[0] == ("aten::addmm", 100.0, 400.0)
    assert ("aten::mul", None, 30.0) in rows and ("aten::copy_", 5.0, None) in rows

    def with_profile(r: VariantResult, times: dict[str, float]) -> VariantResult:
        return replace(r, details=replace(r.details, profile={"calls": 3, "self_us": times}))

    b = with_profile(result("t.py::test_m", "eager", 1.0, seed=1), base)
    h = with_profile(result("t.py::test_m", "eager", 3.0, seed=2), head)
    head_run = run([h], commit="b" * 40)
    compared = compare_runs(run([b]), head_run)
    explained = with_why(compared, [b], [h])
    [p50] = [c for c in explained if c.metric == "latency_p50_ms"]
    assert p50.verdict == "regression" and p50.why[0][0] == "aten::addmm"
    assert Comparison.from_json(json.loads(json.dumps(p50.to_json()))).why == p50.why
    unchanged = [c for c in explained if c.verdict != "regression"]
    assert all(not c.why for c in unchanged)
    text = render_markdown(replace(head_run, comparisons=explained))
    assert "<summary>Where the time went: the operators whose time changed most</summary>" in text
    assert "| aten::addmm | 100.0" in text.replace("&#95;", "_") or "aten::addmm" in text


def test_the_second_clock_sums_the_device_events_by_kernel_per_call() -> None:
    from types import SimpleNamespace

    from torch._C._autograd import DeviceType

    from perfguard.measure.counters import device_work

    def event(name: str, where: DeviceType, us: float) -> SimpleNamespace:
        return SimpleNamespace(name=name, device_type=where, device_time_total=us)

    events = [
        event("aten::mm", DeviceType.CPU, 900.0),  # the host's: not device time
        event("ampere_sgemm_128x64", DeviceType.CUDA, 40.0),
        event("ampere_sgemm_128x64", DeviceType.CUDA, 44.0),
        event("vectorized_elementwise_kernel", DeviceType.CUDA, 6.0),
        event("Memset (Device)", DeviceType.CUDA, 0.0),
    ]
    total, kernels = device_work(events, calls=2)
    assert total == 45.0
    assert kernels == {"ampere_sgemm_128x64": 42.0, "vectorized_elementwise_kernel": 3.0}


def test_on_cuda_the_why_leads_with_the_kernels_device_time_and_names_kernels() -> None:
    """A host-overhead regression: latency tripled, every kernel kept its device time. The
    report says so, and the results table gains the device time column."""
    from perfguard.stats.why import ALL_KERNELS, with_why

    def on_cuda(r: VariantResult, launch_us: float) -> VariantResult:
        profile = {
            "calls": 3,
            "self_us": {"aten::addmm": launch_us, "cudaLaunchKernel": launch_us / 2},
            "kernels_us": {"sm90_gemm": 100.0, "elementwise": 10.0},
            "device_us": 110.0,
        }
        metrics = replace(r.metrics, device_time_ms=0.11)
        return replace(r, metrics=metrics, details=replace(r.details, profile=profile))

    b = on_cuda(result("t.py::test_m", "eager", 1.0, seed=1), 20.0)
    h = on_cuda(result("t.py::test_m", "eager", 3.0, seed=2), 300.0)
    head_run = run([h], commit="b" * 40)
    explained = with_why(compare_runs(run([b]), head_run), [b], [h])
    [p50] = [c for c in explained if c.metric == "latency_p50_ms"]
    assert p50.why[0] == (ALL_KERNELS, 110.0, 110.0)
    assert p50.why[1] == ("aten::addmm", 20.0, 300.0)
    assert ("kernel: sm90_gemm", 100.0, 100.0) in p50.why
    assert Comparison.from_json(json.loads(json.dumps(p50.to_json()))).why == p50.why
    text = render_markdown(replace(head_run, comparisons=explained))
    assert "where all kernels kept their device time, the time went to the host" in text
    table = render_markdown(run([h]))
    assert "| throughput (items/s) | device time |" in table and f"| {fmt.ms(0.11)} |" in table
    assert Run.from_json(json.loads(json.dumps(head_run.to_json()))).results[0].metrics == (
        h.metrics
    )


@pytest.mark.slow
def test_on_the_cpu_there_is_no_device_clock() -> None:
    r = measure(Branchy(False), (torch.randn(4, 32),), "eager", replace(FAST, warm_compile=False))
    assert r.metrics.device_time_ms is None
    profile = r.details.profile
    assert profile is not None and "device_us" not in profile and "kernels_us" not in profile
    assert "| device time |" not in render_markdown(run([r]))


@pytest.mark.slow
def test_a_variants_profiled_calls_are_written_as_a_chrome_trace(tmp_path: Path) -> None:
    settings = replace(FAST, warm_compile=False, trace_dir=tmp_path)
    r = measure(Branchy(False), (torch.randn(4, 32),), "eager", settings, test="t.py::test_b")
    profile = r.details.profile
    assert profile is not None
    assert profile["trace"] == "t.py-test_b[eager].head.trace.json"
    trace = json.loads((tmp_path / profile["trace"]).read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "aten::addmm" in names
    assert profile["self_us"]["aten::addmm"] > 0


def test_a_counter_that_fails_leaves_the_measurement_standing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from perfguard.measure import counters

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("profiler unavailable here")

    monkeypatch.setattr(counters, "count", broken)
    r = measure(Branchy(False), (torch.randn(4, 32),), "eager", replace(FAST, warm_compile=False))
    assert r.status == "ok" and r.counters is None
    assert "exact counters not counted: profiler unavailable here" in r.details.notes


# --- memory that must not grow ------------------------------------------------------------


class Leaky(nn.Module):
    """The classic leak: every call's output kept in a list."""

    def __init__(self, leak: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(32, 64)
        self.leak = leak
        self.kept: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.lin(x).relu()
        if self.leak:
            self.kept.append(y)
        return y


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["eager", "compile-default"])
def test_a_model_that_keeps_its_outputs_is_caught_with_its_bytes_per_call(variant: str) -> None:
    settings = replace(FAST, warm_compile=False)
    leaky = measure(Leaky(True), (torch.randn(8, 32),), variant, settings)
    clean = measure(Leaky(False), (torch.randn(8, 32),), variant, settings)
    assert leaky.counters is not None and clean.counters is not None
    assert leaky.counters.memory_growth_bytes_per_call == 8 * 64 * 4  # one output a call
    assert clean.counters.memory_growth_bytes_per_call == 0
    assert "each warm call leaves 2,048 bytes allocated: a leak" in leaky.details.notes
    assert not any("a leak" in n for n in clean.details.notes)
    [growth] = [
        c
        for c in exact_comparisons("t", variant, clean.counters, leaky.counters, gate_ops=False)
        if c.metric == "memory_growth_bytes_per_call"
    ]
    assert (growth.verdict, growth.gating, growth.current) == ("regression", True, 2048)
    assert growth.reasons == (reason("leak", bytes=2048),)
    assert growth.note.startswith("each warm call leaves 2,048 bytes allocated: a leak")  # words


def test_growth_within_the_slack_or_no_worse_than_the_base_is_not_a_leak() -> None:
    from perfguard.stats.exact import GROWTH_ALLOWED

    def verdict(base: int, head: int) -> str:
        b = replace(BASE, memory_growth_bytes_per_call=base)
        h = replace(BASE, memory_growth_bytes_per_call=head)
        [c] = [
            c
            for c in exact_comparisons("t", "eager", b, h, gate_ops=False)
            if c.metric == "memory_growth_bytes_per_call"
        ]
        return c.verdict

    assert verdict(0, GROWTH_ALLOWED) == "unchanged"
    assert verdict(0, GROWTH_ALLOWED + 1) == "regression"
    assert verdict(4096, 4096) == "unchanged"
    assert verdict(4096, 0) == "improvement"


COUNTS_WITHOUT_THE_COMPILER = """
import sys
import torch
from torch.utils import flop_counter
from perfguard.measure.counters import count, flops_of

model = torch.nn.Linear(8, 8)
x = torch.randn(2, 8)
counted, profile = count(lambda: model(x), model, lambda: model(x), torch.device("cpu"))
assert "torch._dynamo" not in sys.modules, "measuring an eager call imported the compiler"
mode = getattr(flop_counter, "_FlopCounterMode", flop_counter.FlopCounterMode)
raw = getattr(mode.__dict__["__torch_dispatch__"], "__wrapped__", None)
assert raw is None or not hasattr(raw, "__dynamo_disable")  # torch's guard is left to torch
import torch._dynamo
assert flops_of(lambda: model(x)) == counted.flops == 2 * 2 * 8 * 8
assert dict(counted.ops)["aten::addmm"] == 1 and profile["self_us"]
print("ok")
"""


@pytest.mark.slow
def test_counting_an_eager_call_leaves_the_compiler_unimported_and_counts_alike() -> None:
    """The exact counters of a variant that compiles nothing do not import torch's compiler
    (about 2 s of CPU in every measuring process), and count the FLOPs the FLOP counter
    counts once the compiler is there."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", COUNTS_WITHOUT_THE_COMPILER], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
