"""The stored-baseline pipeline's confirmation step, with a fake re-measure (no torch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.confirm import ConfirmRound
from perfguard.pipeline import FinishSettings, Measured, Steps, finish_run
from perfguard.records import BESIDE, Comparison
from perfguard.store.baselines import BaselineStore
from tests.factories import kinds, result, run
from tests.gitrepo import commit, git

T = "t.py::test_m"
MACHINE = "cuda-test-gpu"


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, Path, str]:
    """A repository whose main has four baselines of identical code measured in fast and
    slow spells (a noise floor of about 60%), the newest fast, and a head commit on top."""
    repo, store_dir = tmp_path / "repo", tmp_path / "baselines"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    store = BaselineStore(store_dir)
    for i, center in enumerate((1.0, 1.6, 1.0, 1.6, 1.0)):
        sha = commit(repo, f"main {i}")
        store.save(run([result(T, "eager", center, seed=i)], commit=sha, machine=MACHINE))
    return repo, store_dir, commit(repo, "head")


def _finish(
    history: tuple[Path, Path, str], remeasure: object, head_ms: float = 1.5
) -> tuple[str, Comparison, list[str]]:
    repo, store_dir, _ = history
    outcome = finish_run(
        Measured([result(T, "eager", head_ms, seed=9)], run([]).environment),
        FinishSettings(root=repo, baseline_dir=store_dir, machine=MACHINE),
        Steps(remeasure=remeasure),  # type: ignore[arg-type]
    )
    assert outcome.error is None
    p50 = next(c for c in outcome.run.comparisons if c.metric == "latency_p50_ms")
    return p50.verdict, p50, list(outcome.messages)


def test_an_undecided_slowdown_is_settled_beside_the_base_commit(
    history: tuple[Path, Path, str],
) -> None:
    asked: list[tuple[Sequence[tuple[str, str]], str | None, Sequence[tuple[str, str]]]] = []

    def beside(
        keys: Sequence[tuple[str, str]], base: str | None, undecided: Sequence[tuple[str, str]]
    ) -> ConfirmRound:
        asked.append((keys, base, undecided))
        return ConfirmRound((result(T, "eager", 1.5, seed=3),), (result(T, "eager", 1.0, seed=4),))

    verdict, p50, messages = _finish(history, beside)
    newest = git(history[0], "rev-parse", "HEAD~1")
    assert asked == [([], newest, [(T, "eager")])]  # nothing flagged; the p50 moved +50%
    assert verdict == "regression"
    assert "noise_floor" in kinds(p50)  # what held it back against the stored baseline
    assert p50.confirmation is not None and p50.confirmation.kind == "settled"
    assert p50.confirmation.changes[0] is not None and p50.confirmation.changes[0] > 0
    assert any(
        m == "confirmation: 1 undecided item(s) (median moved by the minimum change, no verdict) "
        "measured once beside the base commit: 2 latency verdict(s) shown"
        for m in messages
    )


def test_without_the_base_commit_an_undecided_item_stays_as_it_was(
    history: tuple[Path, Path, str],
) -> None:
    def alone(
        keys: Sequence[tuple[str, str]], base: str | None, undecided: Sequence[tuple[str, str]]
    ) -> ConfirmRound:
        return ConfirmRound(())  # what the plugin's re-measure does without the commit

    verdict, p50, messages = _finish(history, alone)
    assert verdict == "unchanged" and p50.confirmation is None
    assert not any("confirmation:" in m for m in messages)  # nothing was re-measured


@pytest.fixture
def steady(tmp_path: Path) -> tuple[Path, Path, str]:
    """A repository whose main has one baseline at 1 ms, and a head commit on top."""
    repo, store_dir = tmp_path / "repo", tmp_path / "baselines"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    sha = commit(repo, "main")
    BaselineStore(store_dir).save(run([result(T, "eager", 1.0)], commit=sha, machine=MACHINE))
    return repo, store_dir, commit(repo, "head")


def _rounds(*base_ms: float) -> tuple[list[float], object]:
    """A re-measure whose successive rounds read the base commit at `base_ms` (the head at
    3 ms throughout), and the list of rounds it was asked for."""
    asked: list[float] = []

    def remeasure(
        keys: Sequence[tuple[str, str]], base: str | None, undecided: Sequence[tuple[str, str]]
    ) -> ConfirmRound:
        ms = base_ms[len(asked)]
        asked.append(ms)
        return ConfirmRound(
            (result(T, "eager", 3.0, seed=len(asked)),),
            (result(T, "eager", ms, seed=10 + len(asked)),),
        )

    return asked, remeasure


def test_a_round_far_off_the_base_commits_own_figures_is_measured_again(
    steady: tuple[Path, Path, str],
) -> None:
    asked, remeasure = _rounds(40.0, 1.0)  # a burst made the base side read 40x slow
    verdict, p50, messages = _finish(steady, remeasure, head_ms=3.0)
    assert asked == [40.0, 1.0]
    assert verdict == "regression" and p50.confirmation is not None
    assert (p50.confirmation.kind, p50.confirmation.where) == ("shown", (BESIDE,))
    assert any(m.startswith("confirmation: 1 item(s) measured once more") for m in messages)


def test_a_round_that_stays_disturbed_withdraws_nothing(steady: tuple[Path, Path, str]) -> None:
    asked, remeasure = _rounds(40.0, 9.0)
    verdict, p50, _ = _finish(steady, remeasure, head_ms=3.0)
    assert asked == [40.0, 9.0]  # bounded: one more try
    assert verdict == "regression"  # as the stored comparison gave it, with the reason
    assert p50.confirmation is not None and p50.confirmation.kind == "unconfirmed"
    assert p50.confirmation.reason.startswith("re-measure disturbed: the base commit read")


def test_a_base_side_faster_than_its_stored_figure_is_no_disturbance(
    steady: tuple[Path, Path, str],
) -> None:
    # the baseline (1 ms) was stored in a slow spell; this session's head read 3 ms in one;
    # the round, quiet, reads both sides at 0.3 ms: other work never makes code faster, so
    # the round is believed at once, and the false alarm is withdrawn
    asked: list[int] = []

    def quiet(
        keys: Sequence[tuple[str, str]], base: str | None, undecided: Sequence[tuple[str, str]]
    ) -> ConfirmRound:
        asked.append(1)
        return ConfirmRound((result(T, "eager", 0.3, seed=3),), (result(T, "eager", 0.3, seed=4),))

    verdict, p50, messages = _finish(steady, quiet, head_ms=3.0)
    assert asked == [1]  # not measured once more
    assert verdict == "inconclusive" and p50.confirmation is not None
    assert (p50.confirmation.kind, p50.confirmation.paired) == ("not_shown", ("unchanged",))
    assert not any("disturbed" in m for m in messages)


def test_two_tries_that_agree_show_the_stored_figure_is_off(
    steady: tuple[Path, Path, str],
) -> None:
    asked, remeasure = _rounds(6.0, 6.1)  # the baseline was stored in a fast spell
    verdict, p50, messages = _finish(steady, remeasure, head_ms=3.0)
    assert asked == [6.0, 6.1]
    # the pairing stands: beside the base commit the head is faster, not slower
    assert verdict == "inconclusive" and p50.confirmation is not None
    assert p50.confirmation.paired == ("improvement",)
    assert any("far off its stored baseline: that figure is off" in m for m in messages)


def test_same_job_notes_the_stored_baseline_as_context(steady: tuple[Path, Path, str]) -> None:
    from perfguard.pipeline import BaseMeasuredBeside

    repo, store_dir, _ = steady
    base = git(repo, "rev-parse", "HEAD~1")
    outcome = finish_run(
        Measured(
            [result(T, "eager", 1.02, seed=9)],
            run([]).environment,
            same_job=BaseMeasuredBeside(
                base, "same-job A/B", (result(T, "eager", 1.0, seed=5),), {}
            ),
        ),
        FinishSettings(root=repo, baseline_dir=store_dir, machine=MACHINE),
    )
    p50 = next(c for c in outcome.run.comparisons if c.metric == "latency_p50_ms")
    assert outcome.run.baseline.mode == "ab"
    [context] = [r for r in p50.reasons if r.kind == "stored_context"]
    assert context["commit"] == base[:10] and float(context["change"]) > 0
    p95 = next(c for c in outcome.run.comparisons if c.metric == "latency_p95_ms")
    assert "stored_context" not in kinds(p95)


@pytest.mark.parametrize(("again_ms", "verdict"), [(1.5, "regression"), (1.0, "inconclusive")])
def test_same_job_flags_stand_only_when_a_fresh_pair_of_processes_shows_them_again(
    steady: tuple[Path, Path, str], again_ms: float, verdict: str
) -> None:
    """Two processes of identical code now and then differ by more than the bar: a second
    round, other processes, decides whether the first round's verdict stands."""
    from perfguard.pipeline import BaseMeasuredBeside

    repo, store_dir, _ = steady
    base = git(repo, "rev-parse", "HEAD~1")
    asked: list[tuple[object, ...]] = []

    def remeasure(
        keys: Sequence[tuple[str, str]], commit: str | None, undecided: Sequence[tuple[str, str]]
    ) -> ConfirmRound:
        asked.append((tuple(keys), commit, tuple(undecided)))
        return ConfirmRound(
            (result(T, "eager", again_ms, seed=21),), (result(T, "eager", 1.0, seed=22),)
        )

    outcome = finish_run(
        Measured(
            [result(T, "eager", 1.5, seed=9)],
            run([]).environment,
            same_job=BaseMeasuredBeside(
                base, "same-job A/B", (result(T, "eager", 1.0, seed=5),), {}
            ),
        ),
        FinishSettings(root=repo, baseline_dir=store_dir, machine=MACHINE),
        Steps(remeasure=remeasure),
    )
    assert asked == [(((T, "eager"),), base, ())]  # beside the same base commit, once
    p50 = next(c for c in outcome.run.comparisons if c.metric == "latency_p50_ms")
    assert outcome.run.baseline.mode == "ab" and p50.verdict == verdict
    assert p50.confirmation is not None and p50.confirmation.where == (BESIDE,)
    assert outcome.run.settings["confirm"] == 1 and len(outcome.run.confirm_results) == 1
    said = "confirmation: 1 flagged item(s) re-measured"
    assert any(m.startswith(said) for m in outcome.messages)


def test_a_disturbed_same_job_round_names_the_figure_it_was_checked_against(
    steady: tuple[Path, Path, str],
) -> None:
    """In same-job A/B the base commit's figure is the base side this job measured first
    (1.0 ms), not the stored baseline (which the check does not read there)."""
    from perfguard.pipeline import BaseMeasuredBeside

    repo, store_dir, _ = steady
    base = git(repo, "rev-parse", "HEAD~1")
    asked, remeasure = _rounds(40.0, 9.0)
    outcome = finish_run(
        Measured(
            [result(T, "eager", 3.0, seed=9)],
            run([]).environment,
            same_job=BaseMeasuredBeside(
                base, "same-job A/B", (result(T, "eager", 1.0, seed=5),), {}
            ),
        ),
        FinishSettings(root=repo, baseline_dir=store_dir, machine=MACHINE),
        Steps(remeasure=remeasure),  # type: ignore[arg-type]
    )
    assert asked == [40.0, 9.0]
    p50 = next(c for c in outcome.run.comparisons if c.metric == "latency_p50_ms")
    assert p50.verdict == "regression" and p50.confirmation is not None
    assert p50.confirmation.kind == "unconfirmed"
    assert "x slower than its first measure in this job (0.99" in p50.confirmation.reason
    assert "stored" not in p50.confirmation.reason


def test_the_messages_name_the_options_as_the_caller_spells_them(
    history: tuple[Path, Path, str],
) -> None:
    """`perfguard merge` passes --compare and --save; the plugin --perfguard-compare and
    --perfguard-save. A reason or refusal names the option the user typed."""
    from perfguard.git import git_state
    from perfguard.pipeline import PipelineError, check_can_save, choose_baseline

    repo, store_dir, _ = history
    store = BaselineStore(store_dir)
    merge = FinishSettings(root=repo, baseline_dir=store_dir, machine=MACHINE, option_prefix="--")
    head = FinishSettings(root=repo, baseline_dir=store_dir, machine=MACHINE, compare="HEAD")
    state = git_state(repo)
    assert choose_baseline(replace(merge, compare="none"), state, store).reason == (
        "comparison disabled (--compare=none)"
    )
    missing = choose_baseline(replace(merge, compare="HEAD"), state, store).reason
    assert missing.startswith("--compare=HEAD (") and "no stored baseline" in missing
    assert choose_baseline(head, state, store).reason.startswith("--perfguard-compare=HEAD (")
    with pytest.raises(PipelineError, match=r"^--compare: "):
        choose_baseline(replace(merge, compare="no-such-ref"), state, store)
    (repo / "dirty.txt").write_text("x")
    git(repo, "add", "dirty.txt")
    dirty = check_can_save(git_state(repo), allow_dirty=False, prefix="--")
    assert dirty is not None and dirty.startswith("--save refuses") and "--allow-dirty" in dirty


def test_a_compile_time_from_mains_artifacts_is_reported_and_does_not_gate() -> None:
    """Identical trees read +114% where the base side compiled from main's artifacts: its
    cold compile was measured in another job, so the comparison does not gate."""
    from dataclasses import replace

    from perfguard.pipeline import BaseMeasuredBeside
    from perfguard.pipeline.compare import _warm_compiles_not_gating
    from perfguard.records import Comparison
    from tests.factories import result, run

    base = result("t.py::test_m", "compile-default", 1.0, compile_s=3.0)
    base = replace(base, details=replace(base.details, build={"compile_cache": "hit"}))
    compile_row = Comparison(
        test="t.py::test_m", variant="compile-default", metric="compile_time_s",
        baseline=3.0, current=6.4, change_pct=113.3, verdict="regression", p_value=None,
        cohens_d=None,
    )  # fmt: skip
    head = replace(
        run([result("t.py::test_m", "compile-default", 1.0)]), comparisons=(compile_row,)
    )
    beside = BaseMeasuredBeside("a" * 40, "ab", (base,), {})
    (found,) = _warm_compiles_not_gating(head, beside).comparisons
    assert not found.gating and found.reasons[-1].kind == "compile_not_beside"
    cold = BaseMeasuredBeside(
        "a" * 40, "ab", (replace(base, details=replace(base.details, build={})),), {}
    )
    assert _warm_compiles_not_gating(head, cold).comparisons[0].gating
