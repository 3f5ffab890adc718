"""The session's plan (`perfguard.plan`): made once from plain values, it holds the settings,
the machine key, the baseline, the floors and the selection; the plugin's sessions read it
and nothing resolves the baseline again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfguard.pipeline import FinishSettings
from perfguard.plan import Asked, BaseSaid, PerfItem, Sources, make_plan
from perfguard.records import Run
from perfguard.settings import ItemSettings, MarkerSettings
from perfguard.stats.thresholds import Thresholds
from perfguard.store.baselines import BaselineStore
from tests.factories import result, run
from tests.gitrepo import git

ENV = {"python": "3.11", "torch": "2.13.0", "device": "cpu", "cpu": "test-cpu"}


def _asked(root: Path, **more: object) -> Asked:
    settings = FinishSettings(root=root, baseline_dir=root / "baselines", machine="m")
    given = {
        "settings": settings,
        "guarded_run": {"budget_s": 2.0},
        "from_command_line": frozenset(),
    }
    return Asked(**{**given, "rules": {}, **more})  # type: ignore[arg-type]


def _item(test: str, **marker: object) -> ItemSettings:
    return ItemSettings(
        test=test, variants=("eager",), marker=MarkerSettings(None, marker), timeout_s=60.0
    )


def _repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_a.py").write_text("def test_a(perfguard):\n    pass\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo, git(repo, "rev-parse", "HEAD")


def _stored(repo: Path, sha: str, guarded: dict[str, object]) -> BaselineStore:
    store = BaselineStore(repo / "baselines")
    base = run([result("test_a.py::test_a", "eager", 1.0)], commit=sha, machine="m")
    doc = base.to_json()
    doc["environment"] = ENV
    doc["settings"] = {**doc.get("settings", {}), "guarded": guarded}
    store.save(Run.from_json(json.loads(json.dumps(doc))))
    return store


def test_a_plan_that_compares_with_nothing_reads_no_store_and_selects_nothing(
    tmp_path: Path,
) -> None:
    settings = FinishSettings(root=tmp_path, baseline_dir=tmp_path, machine="", compare="none")
    asked = Asked(settings, {}, frozenset(), {})
    plan = make_plan(asked, ENV, {}, (), Sources(None, None))
    assert plan.baseline is None and plan.selection is None and plan.keep is None
    assert plan.machine  # derived from the environment when the option gave none
    assert plan.thresholds == Thresholds()


def test_against_a_stored_baseline_a_loosened_budget_is_put_back_once(tmp_path: Path) -> None:
    repo, sha = _repo(tmp_path)
    store = _stored(repo, sha, {"run": {"budget_s": 2.0}, "tests": {}})
    git(repo, "commit", "-q", "--allow-empty", "-m", "head")
    items = {"test_a.py::test_a": _item("test_a.py::test_a", budget_s=0.5)}
    perf = (
        PerfItem(
            "test_a.py::test_a[eager]",
            "test_a.py::test_a",
            "test_a.py::test_a",
            "eager",
            repo / "test_a.py",
        ),
    )
    from perfguard.git import git_state

    plan = make_plan(_asked(repo), ENV, items, perf, Sources(git_state(repo), store))
    assert plan.baseline is not None and plan.baseline.commit == sha
    assert plan.floor("test_a.py::test_a") == {"budget_s": 2.0}
    assert [(f.rule, f.head, f.base) for f in plan.loosened] == [("budget_s", 0.5, 2.0)]
    assert plan.guarded({"budget_s": 2.0}) == {
        "run": {"budget_s": 2.0},
        "tests": {"test_a.py::test_a": {"budget_s": 0.5}},
    }


def test_in_ab_the_base_trees_word_sets_the_floors_and_the_designs_rules(tmp_path: Path) -> None:
    repo, sha = _repo(tmp_path)
    items = {"test_a.py::test_a": _item("test_a.py::test_a", ab_min_change_pct=50.0, repeats=2)}
    perf = (
        PerfItem(
            "test_a.py::test_a[eager]",
            "test_a.py::test_a",
            "test_a.py::test_a",
            "eager",
            repo / "test_a.py",
        ),
    )
    said = BaseSaid(
        sha,
        "same-job A/B",
        thresholds=Thresholds(),
        settings={"run": {"repeats": 5}, "tests": {}},
        tests=frozenset({"test_a.py::test_a"}),
    )
    asked = _asked(repo, why_full="--perfguard-full: every perf item measured")
    plan = make_plan(asked, ENV, items, perf, Sources(None, None), beside=said)
    assert plan.floor("test_a.py::test_a") == {"repeats": 5}
    assert plan.rules_for("test_a.py::test_a").ab_min_change_pct < 50.0  # the base's bar
    assert plan.thresholds.for_test("test_a.py::test_a").ab_min_change_pct == 50.0
    assert plan.selection is not None and not plan.selection.partial


def test_a_session_resolves_its_baseline_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan resolves it after collection; the finish reads the plan's and never resolves
    again (it used to, where the machine read at the end differed)."""
    import perfguard.pipeline.baseline as baseline_module
    import perfguard.plan as plan_module

    calls: list[str] = []
    original = baseline_module.resolve_baseline

    def counted(*args: object, **kwargs: object) -> object:
        calls.append("resolve")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(plan_module, "resolve_baseline", counted)
    monkeypatch.setattr(baseline_module, "resolve_baseline", counted)
    import perfguard.pipeline.finish as finish_module

    monkeypatch.setattr(finish_module, "resolve_baseline", counted)
    pytester.makepyfile(
        test_m="""
        import torch
        def test_m(perfguard):
            perfguard.run(torch.nn.Linear(4, 4), (torch.randn(2, 4),), budget_s=0.05, repeats=2)
        """
    )
    pytester.runpytest_inprocess(
        "--perfguard",
        "--perfguard-confirm=0",
        "--perfguard-variants=eager",
        "-p",
        "no:cacheprovider",
    ).assert_outcomes(passed=1)
    assert calls == ["resolve"]
