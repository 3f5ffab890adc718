"""Typed reasons: a kind and its figures, the words from one table; a version-8 file's notes
read back once into them, keeping the words of any part no kind renders again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from perfguard.records import Comparison, Reason, RecordError, Run, reason
from perfguard.records.reasons import KINDS, parse_note, render
from perfguard.stats.verdicts import compare_runs
from perfguard.store.schema import upgrade
from tests.factories import kinds, result, run

SAMPLE: dict[str, dict[str, Any]] = {
    "paired": {"pairs": 6},
    "paired_sequential": {"pairs": 8, "level": 0.0141},
    "noise_floor": {"pct": 2.3},
    "too_few_repeats": {"base": 2, "head": 3, "need": 4},
    "within_noise": {},
    "adjusted": {"p": 5.71e-05},
    "hardware_change": {"changes": "device A -> B, cpu_count 2 -> 4"},
    "runner_health": {"warnings": "GPU throttled during the run"},
    "stored_context": {"commit": "0123456789", "change": -3.2, "verdict": "unchanged"},
    "new_recompiles": {"reasons": "x.size()[0] != 4"},
    "beyond_accepted": {"bound": "+200 MiB"},
    "no_baseline": {},
    "baseline_status": {"status": "error"},
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
# words that could be anything, told apart by where they stand (or the record they come from)
BY_PLACE = {"confirmation", "failed", "op_changes", "text"}


def test_every_kind_has_a_sample_renders_and_round_trips_through_json() -> None:
    assert set(SAMPLE) | {"confirmation"} == set(KINDS)
    for kind, figures in SAMPLE.items():
        r = reason(kind, **figures)
        assert r.text() and "{" not in r.text()
        assert Reason.from_json(json.loads(json.dumps(r.to_json()))) == r


@pytest.mark.parametrize("kind", sorted(set(SAMPLE) - BY_PLACE))
def test_a_note_is_read_back_into_the_reasons_that_wrote_it(kind: str) -> None:
    """Where the words hold the figures whole (no more digits than they show, no "; " inside
    a figure); where not, the words are still kept exactly (below)."""
    r = reason(kind, **SAMPLE[kind])
    others = (reason("within_noise"), reason("adjusted", p=0.0031))
    for reasons in ((r,), (r, *others), (others[0], r, others[1])):
        assert parse_note(render(reasons)) == reasons


@pytest.mark.parametrize(
    "note",
    [
        "",
        "free words; more free words",
        "paired tests (mean, trimmed mean) over 6 A/B block pairs; something else",
        "noise floor 2.34%",  # not what the kind writes (one decimal): kept as words
        ";;; ; ",
        "runner health: GPU throttled; 40% of the CPU taken by others",
        "stored baseline 0123456789: -3.2% (unchanged; context); adjusted (BH) 0.5",
    ],
)
def test_words_no_kind_renders_again_are_kept_as_they_were(note: str) -> None:
    assert render(parse_note(note)) == note


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


def _v8_comparison(**given: Any) -> dict[str, Any]:
    return {
        "test": "t.py::a",
        "variant": "eager",
        "metric": "latency_p50_ms",
        "baseline": 1.0,
        "current": 1.2,
        "change_pct": 20.0,
        "p_value": 0.001,
        "cohens_d": 2.0,
        "verdict": "regression",
        "gating": True,
        **given,
    }


def test_a_version_8_file_has_its_notes_read_back_once_and_says_the_same() -> None:
    shown = {"kind": "shown", "where": ["beside the base commit"], "changes": [19.5]}
    rows = [
        _v8_comparison(
            note="paired tests (mean, trimmed mean) over 6 A/B block pairs, sequential (level "
            "0.0141 at that look); p adjusted (BH) 0.00294; shown again beside the base commit "
            "(+19.5%)",
            confirmation=shown,
        ),
        _v8_comparison(
            test="t.py::b",
            verdict="error",
            baseline=1.0,
            current=None,
            change_pct=None,
            p_value=None,
            cohens_d=None,
            note="RuntimeError: shapes (2, 3); (4, 5)",
        ),
        _v8_comparison(
            test="t.py::c",
            verdict="missing",
            current=None,
            change_pct=None,
            p_value=None,
            cohens_d=None,
            note="skipped here: needs CUDA",
        ),
        _v8_comparison(metric="graph_breaks", p_value=None, note="a note of a future kind"),
        _v8_comparison(
            metric="aten_ops",
            p_value=None,
            note="added aten::gelu (x1); gone aten::relu (x1); no verdict across a hardware "
            "change (device A -> B)",
        ),
        _v8_comparison(metric="graph_breaks", p_value=None, note="new graph break: a; b (x2)"),
    ]
    old = {
        "schema_version": 8,
        "commit": "a" * 40,
        "machine": "m",
        "environment": {},
        "baseline": {"commit": None, "reason": "r"},
        "results": [],
        "comparisons": rows,
    }
    up = upgrade(json.loads(json.dumps(old)))
    assert up["schema_version"] == 11 and up["incomplete"] == []
    loaded = Run.from_json(up)
    paired, failed, skipped, future, ops, breaks = loaded.comparisons
    assert kinds(paired) == ["paired_sequential", "adjusted", "confirmation"]
    assert paired.reasons[1] == reason("adjusted", p=0.00294)
    assert (failed.scope, failed.reasons) == (
        "item",
        (reason("failed", error="RuntimeError: shapes (2, 3); (4, 5)"),),
    )
    assert (skipped.scope, skipped.reasons) == (
        "item",
        (reason("skipped_here", error="needs CUDA"),),
    )
    assert (future.scope, future.reasons) == (
        "metric",
        (reason("text", text="a note of a future kind"),),
    )
    # an operator list and a list of graph breaks hold "; " themselves: read by their row
    assert ops.reasons == (
        reason("op_changes", changes="added aten::gelu (x1); gone aten::relu (x1)"),
        reason("hardware_change", changes="device A -> B"),
    )
    assert breaks.reasons == (reason("new_graph_breaks", breaks="a; b (x2)"),)
    for c, row in zip(loaded.comparisons, rows, strict=True):
        assert c.note == row["note"]  # the same words as the file said
    again = Run.from_json(json.loads(json.dumps(loaded.to_json())))
    assert again == loaded  # a version-9 file keeps the reasons, not the words, as the truth


def test_every_results_file_kept_in_the_repository_loads_and_says_the_same() -> None:
    """The studies' results files (schema 7 and 8, some without their samples) are read by
    today's reader, and each comparison's note reads as the file wrote it."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
    seen = 0
    for path in sorted(root.rglob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or "schema_version" not in doc or "comparisons" not in doc:
            continue
        words = [c.get("note") or "" for c in doc["comparisons"]]
        loaded = Run.from_json(upgrade(doc))
        assert [c.note for c in loaded.comparisons] == words, path.name
        seen += 1
    assert seen >= 15
