"""The typed outcome of a confirmation: its words, its JSON, its checks."""

from __future__ import annotations

import pytest

from perfguard.records import BESIDE, FRESH, Comparison, Confirmation, RecordError


@pytest.mark.parametrize(
    ("found", "words"),
    [
        (
            Confirmation(kind="shown", where=(BESIDE, FRESH), changes=(12.04, 9.96)),
            "shown again in a fresh process and beside the base commit (+12.0%, +10.0%)",
        ),
        (
            Confirmation(kind="not_shown", where=(FRESH,), changes=(3.0,), bar_pct=10.0, paired=()),
            "not shown again in a fresh process (+3.0%; bar 10.0%)",
        ),
        (
            Confirmation(kind="not_shown", where=(BESIDE,), changes=(0.4,), paired=("unchanged",)),
            "not shown again beside the base commit (+0.4%; A/B: unchanged)",
        ),
        (
            Confirmation(kind="unconfirmed", changes=(None,), reason="not re-measured"),
            "unconfirmed (not re-measured)",
        ),
        (
            Confirmation(kind="settled", where=(BESIDE,), changes=(21.0,)),
            "shown beside the base commit (+21.0%)",
        ),
        (
            Confirmation(
                kind="unsettled", where=(BESIDE,), changes=(1.0, -2.0), paired=("unchanged",) * 2
            ),
            "beside the base commit: unchanged (+1.0%, -2.0%)",
        ),
        (
            Confirmation(kind="not_settled", reason="re-measure disturbed: x"),
            "not settled (re-measure disturbed: x)",
        ),
    ],
)
def test_the_report_words_come_from_the_fields(found: Confirmation, words: str) -> None:
    assert found.text() == words
    assert Confirmation.from_json(found.to_json()) == found


def test_a_comparison_keeps_its_confirmation_and_the_changes_it_saw() -> None:
    found = Confirmation(kind="shown", where=(FRESH,), changes=(11.0,))
    c = Comparison(
        test="t",
        variant="eager",
        metric="latency_p50_ms",
        baseline=1.0,
        current=1.1,
        change_pct=10.0,
        p_value=0.01,
        cohens_d=2.0,
        verdict="regression",
        confirmation=found,
    )
    assert c.confirm_change_pct == (11.0,)  # the public JSON field, from the record
    doc = c.to_json()
    assert doc["confirm_change_pct"] == [11.0] and doc["confirmation"]["kind"] == "shown"
    assert Comparison.from_json(doc) == c


def test_a_confirmation_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(RecordError):
        Confirmation(kind="maybe")  # type: ignore[arg-type]
    with pytest.raises(RecordError):
        Confirmation.from_json({"where": []})
