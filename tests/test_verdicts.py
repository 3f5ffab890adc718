from __future__ import annotations

from dataclasses import replace

from perfguard.confirm import confirm_targets, confirm_verdicts, settle_targets
from perfguard.records import BESIDE, FRESH, Comparison, Confirmation, VariantResult, reason
from perfguard.stats.verdicts import Thresholds, compare_runs
from tests.factories import kinds, result, run

T = "t.py::test_m"


def verdicts(
    base: list[VariantResult], head: list[VariantResult], th: Thresholds | None = None
) -> dict[tuple[str, str], str]:
    return {(c.variant, c.metric): c.verdict for c in compare_runs(run(base), run(head), th)}


def test_identical_code_is_unchanged() -> None:
    v = verdicts([result(T, "eager", 1.0, seed=1)], [result(T, "eager", 1.0, seed=2)])
    assert v[("eager", "latency_p50_ms")] == "unchanged"
    assert v[("eager", "latency_p95_ms")] == "unchanged"
    assert v[("eager", "peak_memory_bytes")] == "unchanged"


def test_a_large_significant_slowdown_is_a_regression_and_p99_does_not_gate() -> None:
    comps = compare_runs(
        run([result(T, "eager", 1.0, seed=1)]), run([result(T, "eager", 1.5, seed=2)])
    )
    by = {c.metric: c for c in comps}
    assert by["latency_p50_ms"].verdict == "regression"
    assert by["latency_p50_ms"].change_pct is not None and by["latency_p50_ms"].change_pct > 40
    assert by["latency_p50_ms"].p_value is not None and by["latency_p50_ms"].p_value < 1e-6
    assert by["latency_p50_ms"].cohens_d is not None and by["latency_p50_ms"].cohens_d > 1
    assert by["latency_p50_ms"].min_detectable_pct is not None
    assert not by["latency_p99_ms"].gating
    assert run([]).has_regression is False


def test_a_small_significant_change_below_the_minimum_is_unchanged() -> None:
    v = verdicts(
        [result(T, "eager", 1.0, seed=1, spread=0.001)],
        [result(T, "eager", 1.03, seed=2, spread=0.001)],
    )
    assert v[("eager", "latency_p50_ms")] == "unchanged"
    v = verdicts(
        [result(T, "eager", 1.0, seed=1, spread=0.001)],
        [result(T, "eager", 1.03, seed=2, spread=0.001)],
        Thresholds(min_change_pct=2.0),
    )
    assert v[("eager", "latency_p50_ms")] == "regression"


def test_per_test_thresholds_come_from_the_marker() -> None:
    th = Thresholds(per_test={T: {"min_change_pct": 2.0}})
    v = verdicts(
        [result(T, "eager", 1.0, seed=1, spread=0.001)],
        [result(T, "eager", 1.03, seed=2, spread=0.001)],
        th,
    )
    assert v[("eager", "latency_p50_ms")] == "regression"


def test_too_few_repeats_is_inconclusive() -> None:
    v = verdicts([result(T, "eager", 1.0, repeats=2)], [result(T, "eager", 2.0, repeats=2)])
    assert v[("eager", "latency_p50_ms")] == "inconclusive"


def test_new_missing_and_error() -> None:
    err = VariantResult(
        test=T, variant="compile-default", status="error", error="RuntimeError: boom"
    )
    v = verdicts(
        [result(T, "eager", 1.0), result(T, "onnxruntime", 1.0)],
        [result(T, "eager", 1.0), result(T, "int8-dynamic", 1.0), err],
    )
    assert v[("int8-dynamic", "latency_p50_ms")] == "new"
    assert v[("onnxruntime", "latency_p50_ms")] == "missing"
    assert v[("compile-default", "latency_p50_ms")] == "error"
    assert {c.verdict for c in compare_runs(None, run([result(T, "eager", 1.0)]))} == {"new"}


def test_memory_gates_on_cuda_and_is_reported_only_on_cpu() -> None:
    v = verdicts([result(T, "eager", 1.0, memory=100e6)], [result(T, "eager", 1.0, memory=110e6)])
    assert v[("eager", "peak_memory_bytes")] == "regression"
    comps = compare_runs(
        run([result(T, "eager", 1.0, memory=100e6, memory_method="process VmHWM")]),
        run([result(T, "eager", 1.0, memory=110e6, memory_method="process VmHWM")]),
    )
    mem = next(c for c in comps if c.metric == "peak_memory_bytes")
    assert mem.verdict == "regression" and not mem.gating
    assert not run([]).has_regression


def test_compile_time_uses_a_generous_ratio() -> None:
    v = verdicts(
        [result(T, "compile-default", 1.0, compile_s=10.0)],
        [result(T, "compile-default", 1.0, compile_s=14.0)],
    )
    assert v[("compile-default", "compile_time_s")] == "unchanged"
    v = verdicts(
        [result(T, "compile-default", 1.0, compile_s=10.0)],
        [result(T, "compile-default", 1.0, compile_s=16.0)],
    )
    assert v[("compile-default", "compile_time_s")] == "regression"


def test_drift_against_its_class_and_against_the_baseline() -> None:
    base = result(T, "int8-dynamic", 1.0, drift=0.01)
    v = verdicts([base], [result(T, "int8-dynamic", 1.0, drift=0.012)])
    assert v[("int8-dynamic", "drift_max_rel")] == "unchanged"
    v = verdicts([base], [result(T, "int8-dynamic", 1.0, drift=0.05)])
    assert v[("int8-dynamic", "drift_max_rel")] == "regression"
    v = verdicts([base], [result(T, "int8-dynamic", 1.0, drift=0.01, drift_ok=False)])
    assert v[("int8-dynamic", "drift_max_rel")] == "regression"
    fresh = verdicts([], [result(T, "int8-dynamic", 1.0, drift=0.5, drift_ok=False)])
    assert fresh[("int8-dynamic", "drift_max_rel")] == "regression"


def test_correction_over_the_run_adjusts_p_values() -> None:
    base = [result(f"t.py::test_{i}", "eager", 1.0, seed=i) for i in range(20)]
    head = [
        replace(r)
        for r in (result(f"t.py::test_{i}", "eager", 1.0, seed=100 + i) for i in range(20))
    ]
    comps = compare_runs(run(base), run(head))
    assert not any(c.verdict == "regression" for c in comps)
    assert any("adjusted" in kinds(c) for c in comps)


def test_the_noise_floor_from_history_raises_the_bar() -> None:
    base, head = run([result(T, "eager", 1.0, seed=1)]), run([result(T, "eager", 1.15, seed=2)])
    plain = {c.metric: c for c in compare_runs(base, head)}
    assert plain["latency_p50_ms"].verdict == "regression"
    floor = {(T, "eager", "latency_p50_ms"): 20.0}
    noisy = {c.metric: c for c in compare_runs(base, head, noise=floor)}
    assert noisy["latency_p50_ms"].verdict == "unchanged"
    assert noisy["latency_p50_ms"].min_detectable_pct == 20.0  # what could have been flagged
    assert reason("noise_floor", pct=20.0) in noisy["latency_p50_ms"].reasons


def test_latency_comparisons_carry_bootstrap_intervals() -> None:
    c = next(
        c
        for c in compare_runs(
            run([result(T, "eager", 1.0, seed=1)]), run([result(T, "eager", 1.5, seed=2)])
        )
        if c.metric == "latency_p50_ms"
    )
    assert c.baseline_ci is not None and c.current_ci is not None
    assert c.baseline_ci[0] <= c.baseline_ci[1] < c.current_ci[0] <= c.current_ci[1]
    again = type(c).from_json(c.to_json())
    assert again == c


def _flagged(head_ms: float, min_change_pct: float = 10.0) -> tuple[Comparison, ...]:
    th = Thresholds(min_change_pct=min_change_pct)
    return compare_runs(
        run([result(T, "eager", 1.0, seed=1, memory=1e6)]),
        run([result(T, "eager", head_ms, seed=2, memory=2e6)]),
        th,
    )


def _p50(comparisons: tuple[Comparison, ...]) -> Comparison:
    return next(c for c in comparisons if c.metric == "latency_p50_ms")


def test_confirm_targets_are_the_items_with_a_latency_verdict() -> None:
    slow = _flagged(1.5)
    assert confirm_targets(slow) == [(T, "eager")]
    # memory alone regressed (2x): nothing to re-measure, latency is what processes skew
    same = _flagged(1.0)
    assert {c.metric: c.verdict for c in same}["peak_memory_bytes"] == "regression"
    assert confirm_targets(same) == []


def test_a_regression_that_shows_again_stands_with_the_change_seen_again() -> None:
    first = _flagged(1.5)
    again = result(T, "eager", 1.4, seed=3)
    out = confirm_verdicts(first, [[again]])
    c = _p50(out)
    base_p50, again_p50 = _p50(first).baseline, again.metrics.latency_p50_ms
    assert base_p50 is not None and again_p50 is not None
    expected = 100.0 * (again_p50 - base_p50) / base_p50
    assert c.verdict == "regression"
    assert c.confirm_change_pct == (expected,)
    assert c.confirmation == Confirmation(kind="shown", where=(FRESH,), changes=(expected,))
    assert c.note.endswith(c.confirmation.text())  # the report's words come from it
    assert type(c).from_json(c.to_json()) == c
    # what is not latency keeps its verdict and gets no note
    memory = {x.metric: x for x in out}["peak_memory_bytes"]
    assert memory == {x.metric: x for x in first}["peak_memory_bytes"]


def test_a_regression_the_fresh_process_does_not_show_becomes_inconclusive() -> None:
    first = _flagged(1.5)
    out = confirm_verdicts(first, [[result(T, "eager", 1.05, seed=3)]])
    c = _p50(out)
    assert c.verdict == "inconclusive"
    assert c.confirmation is not None
    assert (c.confirmation.kind, c.confirmation.where) == ("not_shown", (FRESH,))
    assert c.confirmation.bar_pct == 10.0
    assert not any(x.verdict == "regression" and x.metric.startswith("latency") for x in out)
    # every re-measure must show it: one of two falling short withdraws it
    two = confirm_verdicts(first, [[result(T, "eager", 1.5, seed=3)], [result(T, "eager", 1.0)]])
    assert _p50(two).verdict == "inconclusive" and len(_p50(two).confirm_change_pct) == 2


def test_the_confirmation_bar_is_the_verdicts_own() -> None:
    first = _flagged(1.3, min_change_pct=25.0)
    assert _p50(first).verdict == "regression"
    again = [[result(T, "eager", 1.2, seed=3)]]  # +20%: enough for the default 10% ...
    assert _p50(confirm_verdicts(first, again)).verdict == "regression"
    lifted = confirm_verdicts(first, again, Thresholds(min_change_pct=25.0))  # ... not for 25%
    assert _p50(lifted).verdict == "inconclusive"
    floor = {(T, "eager", "latency_p50_ms"): 30.0}  # a noise floor raises it the same way
    assert _p50(confirm_verdicts(first, again, noise=floor)).verdict == "inconclusive"


def test_an_improvement_must_show_again_in_its_own_direction() -> None:
    first = _flagged(0.6)
    assert _p50(first).verdict == "improvement"
    assert _p50(confirm_verdicts(first, [[result(T, "eager", 0.65, seed=3)]])).verdict == (
        "improvement"
    )
    assert _p50(confirm_verdicts(first, [[result(T, "eager", 1.2, seed=3)]])).verdict == (
        "inconclusive"
    )


def test_a_re_measure_that_could_not_be_made_leaves_the_verdict_and_says_why() -> None:
    first = _flagged(1.5)
    broken = VariantResult(
        test=T, variant="eager", status="error", error="the re-measure process ran past 60s"
    )
    c = _p50(confirm_verdicts(first, [[broken]]))
    assert c.verdict == "regression"
    assert c.confirmation == Confirmation(
        kind="unconfirmed",
        changes=(None,),
        reason="re-measure error: the re-measure process ran past 60s",
    )
    assert c.confirm_change_pct == (None,)
    lost = _p50(confirm_verdicts(first, [[]])).confirmation
    assert lost is not None and (lost.kind, lost.reason) == ("unconfirmed", "not re-measured")
    assert confirm_verdicts(first, []) == first  # no re-measure asked for: nothing changes


def test_an_ab_round_confirms_by_the_paired_verdict_of_base_and_head_measured_together() -> None:
    first = _flagged(1.5)  # +50% against the stored baseline
    # the base commit, measured beside the head, is just as slow: the host was, not the code
    spell = confirm_verdicts(
        first, [[result(T, "eager", 1.5, seed=3)]], bases=[[result(T, "eager", 1.5, seed=4)]]
    )
    c = _p50(spell)
    assert c.verdict == "inconclusive"
    assert c.confirmation is not None
    assert (c.confirmation.kind, c.confirmation.where) == ("not_shown", (BESIDE,))
    assert c.confirmation.paired == ("unchanged",) and c.confirmation.bar_pct is None
    assert c.confirm_change_pct[0] is not None and abs(c.confirm_change_pct[0]) < 5.0
    # the head is slower than the base beside it: the regression stands, with the A/B change
    shown = _p50(
        confirm_verdicts(
            first, [[result(T, "eager", 1.5, seed=3)]], bases=[[result(T, "eager", 1.0, seed=4)]]
        )
    )
    assert shown.verdict == "regression"
    assert shown.confirm_change_pct[0] is not None and 45.0 < shown.confirm_change_pct[0] < 55.0
    assert shown.confirmation is not None
    assert (shown.confirmation.kind, shown.confirmation.where) == ("shown", (BESIDE,))


def test_an_ab_round_without_the_base_side_leaves_the_verdict_unconfirmed() -> None:
    first = _flagged(1.5)
    failed = VariantResult(
        test=T, variant="eager", status="error", error="ImportError: no module named model"
    )
    c = _p50(confirm_verdicts(first, [[result(T, "eager", 1.5, seed=3)]], bases=[[failed]]))
    assert c.verdict == "regression" and c.confirm_change_pct == (None,)
    assert c.confirmation is not None and c.confirmation.kind == "unconfirmed"
    assert c.confirmation.reason == (
        "re-measure error: the base commit's side: new (the baseline could not measure it: "
        "ImportError: no module named model)"
    )
    # a fresh-process round beside an A/B round: each judged its own way, both must show it
    mixed = confirm_verdicts(
        first,
        [[result(T, "eager", 1.5, seed=3)], [result(T, "eager", 1.45, seed=5)]],
        bases=[[], [result(T, "eager", 1.0, seed=4)]],
    )
    assert _p50(mixed).verdict == "regression"
    both = _p50(mixed).confirmation
    assert both is not None and both.kind == "shown" and set(both.where) == {FRESH, BESIDE}


def _held() -> tuple[Comparison, ...]:
    """+50% against a stored baseline taken in a slow spell: within a 60% noise floor."""
    floor = {(T, "eager", m): 60.0 for m in ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")}
    return compare_runs(
        run([result(T, "eager", 1.0, seed=1)]), run([result(T, "eager", 1.5, seed=2)]), None, floor
    )


def test_settle_targets_are_items_whose_median_moved_without_a_verdict() -> None:
    held = _held()
    assert _p50(held).verdict == "unchanged"
    assert reason("noise_floor", pct=60.0) in _p50(held).reasons
    assert settle_targets(held) == [(T, "eager")]
    assert settle_targets(held, Thresholds(min_change_pct=60.0)) == []  # moved less than that
    assert settle_targets(_flagged(1.5)) == []  # flagged: a confirmation target already
    p99 = {(T, "eager", m): 60.0 for m in ("latency_p50_ms", "latency_p95_ms")}
    flagged = compare_runs(
        run([result(T, "eager", 1.0, seed=1)]), run([result(T, "eager", 1.5, seed=2)]), None, p99
    )
    assert confirm_targets(flagged) == [(T, "eager")] and settle_targets(flagged) == []
    # ... re-measured for its p99, its undecided p50 is settled by the same A/B round
    beside = confirm_verdicts(
        flagged, [[result(T, "eager", 1.5, seed=3)]], bases=[[result(T, "eager", 1.0, seed=4)]]
    )
    assert {c.metric: c.verdict for c in beside}["latency_p50_ms"] == "regression"
    assert settle_targets(_flagged(1.05)) == []  # +5%: below the minimum change
    few = compare_runs(run([result(T, "eager", 1.0, repeats=2)]), run([result(T, "eager", 1.5)]))
    assert _p50(few).verdict == "inconclusive" and settle_targets(few) == []  # never tested


def test_an_undecided_item_takes_the_verdict_shown_beside_the_base_commit() -> None:
    held = _held()
    head, base = [[result(T, "eager", 1.5, seed=3)]], [[result(T, "eager", 1.0, seed=4)]]
    out = confirm_verdicts(held, head, bases=base)
    c = _p50(out)
    assert c.verdict == "regression"
    assert c.confirm_change_pct[0] is not None and 45.0 < c.confirm_change_pct[0] < 55.0
    assert c.confirmation is not None
    assert (c.confirmation.kind, c.confirmation.where) == ("settled", (BESIDE,))
    assert {x.metric: x.verdict for x in out}["latency_p95_ms"] == "regression"
    assert {x.metric: x.verdict for x in out}["latency_p99_ms"] == "unchanged"  # not gating
    # the base commit beside it is as slow: the host is slow now, not the code
    same = _p50(confirm_verdicts(held, head, bases=[[result(T, "eager", 1.5, seed=4)]]))
    assert same.verdict == "unchanged"
    assert same.confirmation is not None
    assert (same.confirmation.kind, same.confirmation.paired) == ("unsettled", ("unchanged",))
    # every round must show it, the way the stored comparison moved
    two = confirm_verdicts(held, head * 2, bases=[base[0], [result(T, "eager", 1.5, seed=5)]])
    assert _p50(two).verdict == "unchanged" and len(_p50(two).confirm_change_pct) == 2
    faster = confirm_verdicts(held, [[result(T, "eager", 0.5, seed=3)]], bases=base)
    assert _p50(faster).verdict == "inconclusive"  # A/B says improvement: not the stored way
    opposite = _p50(faster).confirmation
    assert opposite is not None and opposite.paired == ("improvement",)


def test_only_a_round_beside_the_base_commit_settles_an_undecided_item() -> None:
    held = _held()
    fresh = confirm_verdicts(held, [[result(T, "eager", 1.5, seed=3)]])
    assert fresh == held  # a fresh process compares with the same baseline: it cannot
    failed = VariantResult(
        test=T, variant="eager", status="error", error="ImportError: no module named model"
    )
    gone = _p50(confirm_verdicts(held, [[result(T, "eager", 1.5, seed=3)]], bases=[[failed]]))
    assert gone.verdict == "unchanged"
    assert gone.confirmation == Confirmation(
        kind="not_settled",
        changes=(gone.confirm_change_pct[0],),
        reason="the base commit's side: new (the baseline could not measure it: ImportError: "
        "no module named model)",
    )
