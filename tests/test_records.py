from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfguard.records import (
    SCHEMA_VERSION,
    BaselineRef,
    Comparison,
    Metrics,
    RecordError,
    Run,
    VariantResult,
)
from tests.factories import run as run_of


def result(variant: str = "eager", **metrics: Any) -> VariantResult:
    return VariantResult(
        test="t.py::test_a",
        variant=variant,
        status="ok",
        metrics=Metrics(**metrics),
        samples_ms=(1.0, 2.0),
        repeats_ms=(1.5,),
    )


def test_run_round_trips_through_json() -> None:
    run = Run(
        commit="a" * 40,
        machine="cpu-x-2c",
        environment={"torch": "2.13.0"},
        results=(
            result(latency_p50_ms=1.0, latency_p95_ms=2.0, latency_p99_ms=3.0),
            VariantResult(
                test="t.py::test_a", variant="compile-default", status="error", error="boom"
            ),
        ),
        baseline=BaselineRef(commit="b" * 40, reason="merge-base with main"),
        comparisons=(
            Comparison(
                test="t.py::test_a",
                variant="eager",
                metric="latency_p50_ms",
                baseline=1.0,
                current=1.1,
                change_pct=10.0,
                p_value=0.01,
                cohens_d=1.2,
                verdict="regression",
            ),
        ),
    )
    doc = json.loads(json.dumps(run.to_json()))
    assert doc["schema_version"] == SCHEMA_VERSION == 15
    assert set(doc["results"][0]) >= {"test", "variant", "status", "error", "metrics", "samples_ms"}
    assert set(doc["comparisons"][0]) >= {
        "test",
        "variant",
        "metric",
        "baseline",
        "current",
        "change_pct",
        "p_value",
        "cohens_d",
        "verdict",
    }
    assert Run.from_json(doc) == run
    assert run.has_regression


def test_results_validate_on_construction() -> None:
    with pytest.raises(RecordError, match="out of order"):
        Metrics(latency_p50_ms=3.0, latency_p95_ms=2.0, latency_p99_ms=4.0)
    with pytest.raises(RecordError, match="finite"):
        Metrics(latency_p50_ms=float("nan"))
    with pytest.raises(RecordError, match="needs an error message"):
        VariantResult(test="t", variant="eager", status="error")
    with pytest.raises(RecordError, match="status"):
        VariantResult(test="t", variant="eager", status="fine")  # type: ignore[arg-type]
    with pytest.raises(RecordError, match="duplicate"):
        Run(commit=None, machine="m", environment={}, results=(result(), result()))


def test_results_are_immutable() -> None:
    r = result()
    with pytest.raises(AttributeError):
        r.status = "error"  # type: ignore[misc]
    assert isinstance(r.samples_ms, tuple)


def test_wrong_documents_are_record_errors() -> None:
    with pytest.raises(RecordError, match="schema_version"):
        Run.from_json({"schema_version": 99})
    with pytest.raises(RecordError, match="machine"):
        Run.from_json({"schema_version": SCHEMA_VERSION, "results": []})
    with pytest.raises(RecordError, match="not a JSON object"):
        Run.from_json([1, 2])


def test_confirmation_rounds_round_trip_with_their_base_sides() -> None:
    again = result(latency_p50_ms=1.1)
    base = replace(result(latency_p50_ms=1.0), repeats_ms=(1.4,))
    run = Run(
        commit="a" * 40,
        machine="cpu-x-2c",
        environment={},
        results=(result(latency_p50_ms=1.2),),
        confirm_results=((again,), (again,)),
        confirm_base_results=((base,), ()),  # round 1 beside the base commit, round 2 alone
    )
    doc = json.loads(json.dumps(run.to_json()))
    assert [len(r) for r in doc["confirm_base_results"]] == [1, 0]
    assert Run.from_json(doc) == run
    alone = replace(run, confirm_base_results=((), ()))
    assert "confirm_base_results" not in alone.to_json()  # no A/B round: no key


def test_a_comparison_is_of_a_known_metric() -> None:
    from perfguard.records import METRICS
    from perfguard.stats.exact import EXACT_METRICS
    from perfguard.stats.thresholds import PHASE_METRICS
    from perfguard.stats.verdicts import LATENCY_METRICS

    made = {*LATENCY_METRICS, *PHASE_METRICS, *EXACT_METRICS, "peak_memory_bytes", "compile_time_s"}
    assert made | {"drift_max_rel"} == set(METRICS)
    with pytest.raises(RecordError, match="metric must be one of"):
        Comparison(
            test="t",
            variant="eager",
            metric="latency_p42_ms",  # type: ignore[arg-type]
            baseline=None,
            current=None,
            change_pct=None,
            p_value=None,
            cohens_d=None,
            verdict="new",
        )


def test_a_runs_cost_round_trips_and_shards_sum() -> None:
    from perfguard.records import RunCost
    from perfguard.records.merge import merge_runs
    from tests.factories import result as measured
    from tests.factories import run

    cost = RunCost(seconds=90.0, measure_s=80.0, confirm_s=10.0, items=2)
    one = replace(run([measured("t.py::a", "eager", 1.0)], commit="a" * 40), cost=cost)
    assert Run.from_json(one.to_json()).cost == cost
    two = replace(run([measured("t.py::b", "eager", 1.0)], commit="a" * 40), cost=cost)
    merged = merge_runs([(Path("1.json"), one), (Path("2.json"), two)])
    assert merged.cost == RunCost(seconds=180.0, measure_s=160.0, confirm_s=20.0, items=4, shards=2)
    assert (
        merge_runs([(Path("1.json"), one), (Path("2.json"), replace(two, cost=None))]).cost is None
    )
    with pytest.raises(RecordError, match=r"cost\.seconds must be 0 or more"):
        RunCost.from_json({**cost.to_json(), "seconds": -1})


def test_a_setting_and_a_rule_read_from_a_file_are_checked_alike() -> None:
    """The run's settings and the thresholds of a file are checked by their rows of the
    settings table: a whole number may be written 3.0 (as a tool that rewrote the JSON may),
    not 2.5; a bound is said as the range it is."""
    from perfguard.stats.thresholds import Thresholds

    doc = run_of([]).to_json()
    doc["settings"] = {**doc["settings"], "repeats": 3.0}
    assert Run.from_json(doc).settings["repeats"] == 3.0
    for value, said in [
        (2.5, "settings.repeats: must be a whole number, got 2.5"),
        (0, "settings.repeats: must be a whole number between 1 and 1000, got 0"),
        ("3", "settings.repeats: must be a whole number, got '3'"),
        (True, "settings.repeats: must be a whole number, got True"),
    ]:
        doc["settings"] = {**doc["settings"], "repeats": value}
        with pytest.raises(RecordError, match=re.escape(said)):
            Run.from_json(doc)
    with pytest.raises(RecordError, match=re.escape("alpha: must be above 0 and below 1, got 2")):
        Thresholds.from_json({"alpha": 2})
    assert Thresholds.from_json({"gate_p99": True}).gate_p99 is True


@pytest.mark.parametrize(
    ("guarded", "said"),
    [
        ({"run": {"repeats": "fast"}}, "settings.guarded.run.repeats"),
        ({"run": {"fail_on": 12345}}, "settings.guarded.run.fail_on"),
        ({"run": {}, "tests": {"t::x": {"budget_s": float("nan")}}}, "guarded.tests.t::x"),
        ({"tests": {}}, "settings.guarded must be an object with a run object"),
    ],
)
def test_a_guarded_setting_of_the_wrong_type_is_a_wrong_file(
    guarded: dict[str, Any], said: str
) -> None:
    """The base's guarded settings decide a later change's verdict: one that does not read is
    refused, naming it, never left out in silence."""
    doc = run_of([]).to_json()
    doc["settings"] = {**doc.get("settings", {}), "guarded": guarded}
    with pytest.raises(RecordError, match=re.escape(said)):
        Run.from_json(doc)
    doc["settings"]["guarded"] = {"run": {"repeats": 5, "fail_on": "regression"}}
    Run.from_json(doc)
