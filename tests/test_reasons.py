"""Typed reasons: a kind and its figures, the words from one table, never read back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from perfguard.records import Comparison, Reason, RecordError, Run, reason
from perfguard.records.reasons import KINDS
from perfguard.stats.verdicts import compare_runs
from perfguard.store.schema import RELEASED, upgrade
from tests.factories import kinds, result, run

SAMPLE: dict[str, dict[str, Any]] = {
    "paired": {"pairs": 6},
    "paired_sequential": {"pairs": 8, "level": 0.0141},
    "noise_floor": {"pct": 2.3},
    "too_few_repeats": {"base": 2, "head": 3, "need": 4},
    "within_noise": {},
    "adjusted": {"p": 5.71e-05},
    "hardware_change": {"changes": "device A -> B, cpu_count 2 -> 4"},
    "packages_ran": {"changes": "torch 2.13.0 -> 2.14.0"},
    "compile_not_beside": {},
    "environment_step": {"changes": "CUDA 12.8 -> 13.0"},
    "runner_health": {"warnings": "GPU throttled during the run"},
    "stored_context": {"commit": "0123456789", "change": -3.2, "verdict": "unchanged"},
    "new_recompiles": {"reasons": "x.size()[0] != 4"},
    "beyond_accepted": {"bound": "+200 MiB"},
    "no_baseline": {},
    "baseline_status": {"status": "error"},
    "baseline_error": {"error": "RuntimeError: boom"},
    "in_base_only": {},
    "skipped_here": {"error": "needs CUDA"},
    "failed": {"error": "RuntimeError: boom; then more"},
    "memory_tolerance": {"pct": 5.0},
    "process_rss": {},
    "compile_ratio": {"ratio": 1.5},
    "drift_within": {"tolerance_class": "compiled-fp32"},
    "drift_outside": {
        "tolerance_class": "int8",
        "error": 0.0123,
        "allowed": 0.00456,
        "reference": "fp64",
    },
    "drift_grew": {"growth": 2.0},
    "nondeterministic": {"spread": 0.4},
    "exact_count": {},
    "new_graph_breaks": {"breaks": "Tensor.item() call (x2)"},
    "op_changes": {"changes": "added aten::gelu (x1); gone aten::relu (x1)"},
    "same_operators": {},
    "flops": {},
    "flops_change": {"change": 12.5},
    "instructions": {"region": "one warm call", "change": 2.25, "tolerance": 1.5},
    "leak": {"bytes": 2048},
    "no_leak": {},
    "text": {"text": "anything at all"},
}


def test_every_kind_has_a_sample_renders_and_round_trips_through_json() -> None:
    assert set(SAMPLE) | {"confirmation"} == set(KINDS)
    for kind, figures in SAMPLE.items():
        r = reason(kind, **figures)
        assert r.text() and "{" not in r.text()
        assert Reason.from_json(json.loads(json.dumps(r.to_json()))) == r


def test_a_reason_is_refused_with_an_unknown_kind_or_the_wrong_figures() -> None:
    with pytest.raises(RecordError, match="reason kind must be one of"):
        reason("gremlins")
    with pytest.raises(RecordError, match=r"figures \['pct'\], got \[\]"):
        reason("noise_floor")
    with pytest.raises(RecordError, match="pairs is a int"):
        reason("paired", pairs="six")
    with pytest.raises(RecordError, match="an object with a kind"):
        Reason.from_json(["paired", 6])


def test_item_rows_have_their_own_scope_and_round_trip() -> None:
    base = run([result("t.py::gone", "eager", 1.0, seed=1), result("t.py::a", "eager", 1.0)])
    head = run(
        [
            result("t.py::a", "eager", 1.0, seed=2),
            result("t.py::b", "eager", 1.0, seed=3),
        ]
    )
    comparisons = compare_runs(base, head)
    items = {c.test: c for c in comparisons if c.scope == "item"}
    assert {t: (c.verdict, kinds(c)) for t, c in items.items()} == {
        "t.py::gone": ("missing", ["in_base_only"]),
        "t.py::b": ("new", ["no_baseline"]),
    }
    assert all(c.scope == "metric" for c in comparisons if c.test == "t.py::a")
    for c in comparisons:
        assert Comparison.from_json(json.loads(json.dumps(c.to_json()))) == c
    with pytest.raises(RecordError, match="scope must be one of"):
        Comparison.from_json({**comparisons[0].to_json(), "scope": "suite"})


def test_every_results_file_kept_in_the_repository_loads_and_says_the_same() -> None:
    """The studies' results files (rewritten to the released format once, some without
    their samples) are read by today's reader, and each comparison's note is the words of
    its reasons, as the file wrote it."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
    seen = 0
    for path in sorted(root.rglob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or "schema_version" not in doc or "comparisons" not in doc:
            continue
        words = [c.get("note") or "" for c in doc["comparisons"]]
        loaded = Run.from_json(upgrade(doc))
        assert doc["schema_version"] == RELEASED, path.name
        assert [c.note for c in loaded.comparisons] == words, path.name
        seen += 1
    assert seen >= 15
