"""Main's record from pairs: each commit's change beside its parent is its step; the search
over the series decides only where a commit has no pair, and says what it could not see."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

import pytest

from perfguard.history.analysis import analyze, render_markdown, render_terminal, to_json
from perfguard.history.changepoints import Detection, reach
from perfguard.history.columns import build_series
from perfguard.history.series import order_runs
from perfguard.records import BaselineRef, Comparison, Run
from perfguard.store.summary import paired_changes, part_bytes, read_part, summary_of_runs
from tests.factories import result, run

TEST = "test_models.py::test_mlp"
MACHINE = "cpu-test"


def sha(i: int) -> str:
    return hashlib.sha1(str(i).encode()).hexdigest()


def main_run(
    i: int,
    level_ms: float,
    *,
    change: float | None = None,
    verdict: str = "unchanged",
    base: str | None = None,
) -> Run:
    """Commit i of main at `level_ms`; with `change`, saved by main's paired run beside
    `base` (default: its parent, commit i - 1)."""
    r = replace(run([result(TEST, "eager", level_ms, seed=i)], commit=sha(i)), machine=MACHINE)
    if change is None:
        return r
    compared = Comparison(
        test=TEST,
        variant="eager",
        metric="latency_p50_ms",
        baseline=level_ms / (1 + change / 100),
        current=level_ms,
        change_pct=change,
        p_value=1e-4 if verdict != "unchanged" else 0.4,
        cohens_d=None,
        verdict=verdict,  # type: ignore[arg-type]
        change_ci=(change - 2.0, change + 2.0),
    )
    ref = BaselineRef(commit=base or sha(i - 1), reason="HEAD's first parent", mode="ab")
    return replace(r, baseline=ref, comparisons=(compared,))


def history(runs: list[Run], commits: int, settings: Detection | None = None):  # type: ignore[no-untyped-def]
    line = [sha(i) for i in range(commits)]
    ordered = order_runs(summary_of_runs(runs), line, "main")
    # the runs pair p50 alone: the other series would be searched, and said so
    return analyze(ordered, build_series(ordered), settings, metrics=("latency_p50_ms",))


def p50_points(h) -> list[tuple[int, float, str]]:  # type: ignore[no-untyped-def]
    index = {sha(i): i for i in range(200)}
    return [
        (index[c.commit], round(c.change_pct, 1), c.source)
        for c in h.change_points
        if c.metric == "latency_p50_ms"
    ]


def test_a_step_at_commit_5_of_30_is_found_by_its_pair() -> None:
    """The case the search missed: 4 commits before a -75% step cannot reach max_p."""
    runs = [main_run(0, 4.0)]
    for i in range(1, 30):
        level = 4.0 if i < 5 else 1.0
        runs.append(
            main_run(i, level, change=-75.0, verdict="improvement")
            if i == 5
            else main_run(i, level, change=0.5)
        )
    h = history(runs, 30)
    assert p50_points(h) == [(5, -75.0, "pair")]
    (step,) = h.change_points
    assert step.previous == sha(4) and step.commit == sha(5) and step.kind == "improvement"
    assert (step.low, step.high) == (-77.0, -73.0)
    assert step.before == pytest.approx(4.0, rel=0.05)
    assert h.notes == ()  # every commit paired: the search was not needed
    # the search alone could not have seen it
    assert reach([4.0] * 5 + [1.0] * 25).first == 6


def test_host_drift_between_saves_is_not_a_step_when_the_pairs_say_unchanged() -> None:
    """The stored figures jump by a third at commit 15 (the host, not the code), every pair
    says unchanged: no change point, and so no alert."""
    runs = [main_run(0, 2.0)]
    runs += [main_run(i, 2.0 if i < 15 else 2.7, change=0.3) for i in range(1, 40)]
    h = history(runs, 40)
    assert p50_points(h) == []
    assert h.regressions(newest=40) == []
    # without the pairs, the same figures step
    alone = [main_run(i, 2.0 if i < 15 else 2.7) for i in range(40)]
    ((at, change, source),) = p50_points(history(alone, 40))
    assert (at, source) == (15, "search") and change == pytest.approx(35.0, abs=3)


def test_a_pair_that_does_not_stand_is_no_step_and_one_within_min_change_neither() -> None:
    runs = [main_run(0, 1.0)]
    for i in range(1, 12):
        if i == 4:
            runs.append(main_run(i, 1.0, change=30.0, verdict="inconclusive"))
        elif i == 8:
            runs.append(main_run(i, 1.0, change=0.5, verdict="regression"))
        else:
            runs.append(main_run(i, 1.0, change=0.0))
    assert p50_points(history(runs, 12, Detection(min_change_pct=1.0))) == []


def test_the_first_commits_step_is_found_from_its_pair() -> None:
    runs = [main_run(1, 3.0, change=50.0, verdict="regression", base=sha(0))]
    runs += [main_run(i, 3.0, change=0.1) for i in range(2, 8)]
    h = history(runs, 8)  # commit 0 (the parent) has no baseline at all
    assert p50_points(h) == [(1, 50.0, "pair")]
    assert h.change_points[0].previous == sha(0)


def test_a_pair_beside_another_commit_than_the_parent_is_not_that_commits_step() -> None:
    runs = [main_run(i, 1.0, change=0.0) for i in range(1, 10)]
    runs[4] = main_run(5, 1.0, change=40.0, verdict="regression", base=sha(1))
    h = history([main_run(0, 1.0), *runs], 10)
    assert p50_points(h) == []
    assert "1 of 10 commit(s) have no change measured beside their parent" in h.notes[0]


def test_commits_without_a_pair_fall_back_to_the_search_and_it_says_so() -> None:
    """The first half measured alone (before paired runs): its step comes from the search;
    the paired half's drift does not."""
    runs = [main_run(i, 1.0 if i < 12 else 1.5) for i in range(20)]
    runs += [main_run(i, 1.5 if i < 30 else 2.2, change=0.2) for i in range(20, 40)]
    h = history(runs, 40)
    ((at, change, source),) = p50_points(h)
    assert (at, source) == (12, "search") and change == pytest.approx(50.0, abs=4)
    assert h.notes[0].startswith("19 of 40 commit(s) have no change measured")
    assert "of 40 commits the search finds a step only with at least 5 commits" in h.notes[1]
    assert "before it and 5 after it" in h.notes[1]
    text = render_terminal(h)
    assert "note: 19 of 40" in text and "search over the series" in text
    assert "> 19 of 40" in render_markdown(h)
    doc = to_json(h)
    assert doc["format"] == 3 and doc["notes"] == list(h.notes)
    assert doc["change_points"][0]["source"] == "search"  # type: ignore[index]


def test_a_series_too_short_for_the_search_says_so() -> None:
    h = history([main_run(i, 1.0 if i < 4 else 2.0) for i in range(8)], 8)
    assert p50_points(h) == []
    assert any("too short for that search (8 commit(s) at most)" in n for n in h.notes)
    assert reach([1.0] * 8).first is None


def test_the_paired_change_is_a_column_of_the_summary_part() -> None:
    r = main_run(3, 2.0, change=12.5, verdict="regression")
    assert paired_changes(r)[(TEST, "eager", "latency_p50_ms")][:3] == (sha(2), "regression", 12.5)
    table = read_part(part_bytes(r, "blob"), "part")
    row = table[table["metric"] == "latency_p50_ms"].iloc[0]
    assert (row["pair"], row["pair_verdict"], row["pair_change"]) == (sha(2), "regression", 12.5)
    assert (row["pair_low"], row["pair_high"]) == (10.5, 14.5)
    other = table[table["metric"] == "peak_memory_bytes"].iloc[0]
    assert other["pair"] == "" and math.isnan(other["pair_change"])
    # a run compared with a stored baseline has no pair
    stored = replace(r, baseline=replace(r.baseline, mode="stored"))
    assert paired_changes(stored) == {}


def test_a_part_of_the_layout_before_pairs_is_made_again_from_its_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A part written before the pair columns reads (as unpaired) and is stale where its
    record is at hand, so the folder's summary makes it again with the pairs."""
    from perfguard.store.baselines import BaselineStore
    from perfguard.store.summary import COLUMNS, PAIR_COLUMNS, current, part_path

    store = BaselineStore(tmp_path)
    r = main_run(3, 2.0, change=12.5, verdict="regression")
    store.save(r)
    path = part_path(tmp_path, MACHINE, sha(3))
    table = read_part(path.read_bytes(), str(path))
    old = table.drop(columns=[*PAIR_COLUMNS, "environment"])  # before both
    import fastparquet

    fastparquet.write(str(path), old, write_index=False)
    again = read_part(path.read_bytes(), str(path))
    assert list(again.columns) == list(COLUMNS) and not current(again, str(again["record"][0]))
    summary = store.summary()
    assert summary.rebuilt == 1
    assert set(summary.table["pair_verdict"]) == {"regression", ""}
