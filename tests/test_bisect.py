"""`perfguard bisect`: the search with a deterministic measure, and once end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfguard.cli import main
from perfguard.history.bisect import (
    FASTER,
    SAME,
    SLOWER,
    UNCLEAR,
    ItemChange,
    Step,
    classify,
    search,
)
from tests import forkserver
from tests.gitrepo import git
from tests.test_same_job import FAST, MODELS
from tests.timing import SCRIPTED_CLOCK

COMMITS = [f"{i:040x}" for i in range(17)]  # good, then 16 commits of main


def fake_measure(
    culprit: int, unclear: dict[tuple[int, int], int] | None = None, change: str = SLOWER
) -> object:
    """`change` (slower or faster) exactly when the culprit lies in (base, head]; some pairs
    unclear at first."""
    pending = dict(unclear or {})
    calls: list[tuple[int, int]] = []

    def measure(base: str, head: str) -> Step:
        pair = (COMMITS.index(base), COMMITS.index(head))
        calls.append(pair)
        if pending.get(pair, 0) > 0:
            pending[pair] -= 1
            return Step(base, head, UNCLEAR, ())
        changed = pair[0] < culprit <= pair[1]
        verdict = "regression" if change == SLOWER else "improvement"
        item = ItemChange(
            "t.py::test_m",
            "eager",
            verdict if changed else "unchanged",
            (20.0 if change == SLOWER else -70.0) if changed else 0.3,
            0.001,
        )
        return Step(base, head, change if changed else SAME, (item,))

    measure.calls = calls  # type: ignore[attr-defined]
    return measure


@pytest.mark.parametrize("culprit", range(1, 17))
def test_the_culprit_is_found_wherever_it_is_in_at_most_six_measurements(culprit: int) -> None:
    measure = fake_measure(culprit)
    found = search(COMMITS, measure, log=lambda _: None)  # type: ignore[arg-type]
    assert found.culprit == COMMITS[culprit]
    assert len(found.steps) <= 6  # GOOD..BAD, four halvings, the culprit beside its parent
    last = found.steps[-1] if found.steps[-1].head == found.culprit else None
    assert any(s.base == COMMITS[culprit - 1] and s.head == found.culprit for s in found.steps)
    assert last is None or last.outcome == SLOWER


def test_an_unclear_step_is_measured_again_then_against_the_bad_side() -> None:
    # 0 vs 8 is unclear twice (both rounds): then 8 is measured against 16, which is slower
    # (the culprit, 12, is after 8), so 8 is good
    measure = fake_measure(12, unclear={(0, 8): 2})
    found = search(COMMITS, measure, rounds=2, log=lambda _: None)  # type: ignore[arg-type]
    assert found.culprit == COMMITS[12]
    assert measure.calls[:4] == [(0, 16), (0, 8), (0, 8), (8, 16)]  # type: ignore[attr-defined]


def test_a_step_that_stays_unclear_names_the_range_and_no_culprit() -> None:
    measure = fake_measure(12, unclear={(0, 8): 9, (8, 16): 9})
    found = search(COMMITS, measure, rounds=2, log=lambda _: None)  # type: ignore[arg-type]
    assert found.culprit is None
    assert f"{COMMITS[0][:10]}..{COMMITS[16][:10]}" in found.reason


def test_no_slowdown_between_good_and_bad_is_nothing_to_bisect() -> None:
    found = search(COMMITS, fake_measure(99), log=lambda _: None)  # type: ignore[arg-type]
    assert found.culprit is None and len(found.steps) == 1
    assert found.reason.startswith("nothing to bisect: BAD beside GOOD shows no measurable")


@pytest.mark.parametrize("culprit", [1, 5, 16])
def test_an_improvement_s_commit_is_found_when_asked_or_as_the_range_shows(culprit: int) -> None:
    for direction in ("auto", FASTER):
        measure = fake_measure(culprit, change=FASTER)
        found = search(COMMITS, measure, log=lambda _: None, direction=direction)  # type: ignore[arg-type]
        assert found.culprit == COMMITS[culprit] and found.direction == FASTER
        assert "is the first commit faster than its parent" in found.reason
    faster = fake_measure(culprit, change=FASTER)
    only_slower = search(COMMITS, faster, log=lambda _: None, direction=SLOWER)  # type: ignore[arg-type]
    assert only_slower.culprit is None
    assert only_slower.reason == "nothing to bisect: BAD beside GOOD shows faster, not slower"


def test_steps_are_classified_from_the_paired_p50_verdicts() -> None:
    def c(verdict: str, metric: str = "latency_p50_ms") -> dict[str, object]:
        return {"test": "t", "variant": "eager", "metric": metric, "verdict": verdict}

    assert classify([c("unchanged"), c("regression")])[0] == SLOWER
    assert (
        classify([c("unchanged"), c("improvement"), c("regression", "peak_memory_bytes")])[0]
        == FASTER
    )
    assert classify([c("unchanged"), c("unchanged")])[0] == SAME
    assert classify([c("unchanged"), c("inconclusive")])[0] == UNCLEAR
    assert classify([c("error")])[0] == UNCLEAR
    assert classify([])[0] == UNCLEAR


TESTS = """
import pytest
from mymodels import mlp

@pytest.mark.perfguard(variants=["eager"])
def test_mlp(perfguard):
    model, inputs = mlp()
    perfguard.run(model, inputs)
"""


@pytest.mark.slow
def test_bisect_finds_the_commit_that_made_a_test_slower_and_leaves_the_checkout_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end, through the paired sessions of each step, timed by the scripted clock
    (each commit's calls read its `latency_ms.txt`): commit 3 is three times slower."""
    repo = pytester.path
    pytester.makepyfile(mymodels=MODELS.format(depth=2), test_models=TESTS)
    pytester.makeconftest(SCRIPTED_CLOCK)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "good")
    shas = [git(repo, "rev-parse", "HEAD")]
    for i in range(1, 5):
        if i == 3:
            (repo / "latency_ms.txt").write_text("3.0")
        (repo / "notes.txt").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    (repo / "notes.txt").write_text("uncommitted work\n")
    status = git(repo, "status", "--porcelain")
    monkeypatch.chdir(repo)
    monkeypatch.setattr("perfguard.history.bisect.subprocess", forkserver.Sessions())
    # (the scripted clock needs no confirming round, a step's verdict being the paired one,
    # and no long sampling: its 1% noise is clear of a tripling in a few hundred calls)
    args = [*FAST, "--perfguard-confirm=0", "--perfguard-budget=0.05", "--perfguard-repeats=3"]
    code = main(["bisect", shas[0], "main", "--json", "bisect.json", "--", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"culprit: {shas[3]}" in out.out
    doc = json.loads((repo / "bisect.json").read_text())
    assert doc["culprit"] == shas[3] and doc["good"] == shas[0] and doc["bad"] == shas[4]
    assert 3 <= doc["measurements"] <= 6
    culprit_step = [s for s in doc["steps"] if (s["base"], s["head"]) == (shas[2], shas[3])]
    assert culprit_step and 150 < culprit_step[-1]["items"][0]["change_pct"] < 250
    # the user's checkout is as it was: branch, HEAD, index, working tree, no worktree left
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "rev-parse", "HEAD") == shas[4]
    assert git(repo, "status", "--porcelain") == status + "\n?? bisect.json"
    assert (repo / "notes.txt").read_text() == "uncommitted work\n"
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_bisect_refuses_a_good_commit_after_the_bad_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    for i in range(2):
        git(tmp_path, "commit", "-q", "--allow-empty", "-m", f"c{i}")
    monkeypatch.chdir(tmp_path)
    assert main(["bisect", "HEAD", "HEAD~1"]) == 2
    assert "not an ancestor" in capsys.readouterr().err
    assert main(["bisect", "HEAD", "HEAD"]) == 2
    assert main(["bisect", "nonsense", "HEAD"]) == 2
