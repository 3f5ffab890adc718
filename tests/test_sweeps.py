"""Sweeps: a test parametrized over a size, shown as one table and chart, with a note where
throughput stops growing (no torch: deterministic results)."""

from __future__ import annotations

from dataclasses import replace

from perfguard.records import VariantResult
from perfguard.report import format as fmt
from perfguard.report.markdown import render_markdown
from perfguard.report.sweeps import find_sweeps, sweep_chart
from perfguard.stats.verdicts import compare_runs
from tests.factories import result, run

# batch -> p50 (ms): throughput 1000, 4000, 8000 then 8,200 items/s (stops growing at 64)
SWEEP = {1: 1.0, 8: 2.0, 32: 4.0, 64: 64 / 8.2}


def sized(test: str, batch: int, p50: float, seed: int = 0) -> VariantResult:
    r = result(test, "eager", p50, seed=seed, spread=0.0)
    measured = r.metrics.latency_p50_ms
    assert measured is not None
    return replace(r, metrics=replace(r.metrics, throughput_per_s=batch / (measured / 1000)))


def sweep_results(scale: float = 1.0, seed: int = 0) -> list[VariantResult]:
    return [sized(f"t.py::test_bert[{b}]", b, p50 * scale, seed) for b, p50 in SWEEP.items()]


def test_a_size_parametrized_test_is_one_sweep_and_other_ids_are_not() -> None:
    others = [
        sized("t.py::test_encoder[4]", 4, 1.0),  # one size: a parametrized test, no sweep
        sized("t.py::test_seq[cpu-16]", 16, 1.0),
        sized("t.py::test_seq[cuda-64]", 64, 1.0),  # other parameters differ: not one curve
        sized("t.py::test_two[8-16]", 8, 1.0),  # two numbers: which is the size?
    ]
    [sweep] = find_sweeps([*sweep_results(), *others])
    assert (sweep.test, sweep.variant) == ("t.py::test_bert[size]", "eager")
    assert [p.size for p in sweep.points] == [1, 8, 32, 64]
    flat = sweep.flat_at
    assert flat is not None and (flat[0].size, flat[1].size) == (32, 64)
    assert not sweep.has_base


def test_throughput_that_keeps_growing_is_not_noted() -> None:
    growing = [sized(f"t.py::test_mlp[{b}]", b, 1.0 + b / 100) for b in (1, 8, 32)]
    [sweep] = find_sweeps(growing)
    assert sweep.flat_at is None


def test_the_report_shows_the_sweep_with_the_base_beside_it_and_a_chart() -> None:
    base, head = run(sweep_results()), run(sweep_results(scale=1.5, seed=1), commit="b" * 40)
    compared = replace(head, comparisons=compare_runs(base, head))
    [sweep] = find_sweeps(compared.results, compared.comparisons)
    assert sweep.has_base
    first = sweep.points[0]
    assert first.base_throughput is not None and first.throughput is not None
    assert first.base_throughput / first.throughput > 1.4  # the base was 1.5x faster
    text = render_markdown(compared)
    assert "### Sweeps" in text
    assert "| size | p50 | throughput (items/s) | base p50 | base throughput |" in text
    assert f"| 8 | {fmt.ms(sweep.points[1].p50_ms)} |" in text
    assert "Throughput stops growing at size 64" in text and "not a verdict" in text
    chart = sweep_chart(sweep)
    assert chart in text
    lines = chart.splitlines()
    assert lines[:2] == ["```mermaid", "xychart-beta"]
    assert 'x-axis "size" ["1", "8", "32", "64"]' in chart
    assert sum(line.strip().startswith("line [") for line in lines) == 2  # both sides


def test_no_sweep_no_section() -> None:
    assert "### Sweeps" not in render_markdown(run([sized("t.py::test_x", 8, 1.0)]))
