"""Baselines on a git branch: pull, push, concurrent pushers; history and pruning."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from perfguard.cli import main
from perfguard.store import BaselineStore
from perfguard.store.history import load_history, noise_floor
from perfguard.store.sync import pull, push
from tests.factories import result, run
from tests.gitrepo import clone, commit, git


def save(repo: Path, sha: str, test: str = "t.py::a") -> Path:
    saved = BaselineStore(repo / "baselines").save(run([result(test, "eager", 1.0)], commit=sha))
    return Path(saved.path)


def test_two_clones_pushing_at_once_both_land(remote: Path, tmp_path: Path) -> None:
    one, two = clone(remote, tmp_path / "one"), clone(remote, tmp_path / "two")
    save(one, commit(one, "A"))
    save(two, commit(two, "B"))
    head_before = git(one, "rev-parse", "HEAD")
    errors: list[BaseException] = []

    def pusher(repo: Path) -> None:
        try:
            push(repo, repo / "baselines")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=pusher, args=(r,)) for r in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    files = git(
        tmp_path, "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "perfguard-baselines"
    ).splitlines()
    # each baseline with its rows of the summary table
    assert sorted(f.endswith(".parquet") for f in files) == [False, False, True, True]
    # the user's checkout is untouched: same HEAD, same branch, clean index
    assert git(one, "rev-parse", "HEAD") == head_before
    assert git(one, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(one, "status", "--porcelain") == ""

    fresh = clone(remote, tmp_path / "fresh")
    pulled = pull(fresh, fresh / "baselines")
    assert len(pulled.added) == 2
    assert len(BaselineStore(fresh / "baselines").list()) == 2
    assert pull(fresh, fresh / "baselines").added == ()  # idempotent, byte for byte


def test_pull_with_no_branch_yet_and_push_of_nothing(remote: Path, tmp_path: Path) -> None:
    repo = clone(remote, tmp_path / "r")
    assert pull(repo, repo / "baselines").added == ()
    assert push(repo, repo / "baselines").added == ()


def test_pull_never_overwrites_a_local_file(remote: Path, tmp_path: Path) -> None:
    one, two = clone(remote, tmp_path / "one"), clone(remote, tmp_path / "two")
    sha = commit(one, "A")
    save(one, sha)
    push(one, one / "baselines")
    mine = save(two, sha, test="t.py::other")
    text = mine.read_bytes()
    result_ = pull(two, two / "baselines")
    assert result_.kept == (mine.relative_to(two / "baselines").as_posix(),)
    assert mine.read_bytes() == text


def test_cli_push_and_pull(
    remote: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    one = clone(remote, tmp_path / "one")
    save(one, commit(one, "A"))
    monkeypatch.chdir(one)
    assert main(["baselines", "push"]) == 0
    assert "pushed 1 baseline(s) to origin/perfguard-baselines" in capsys.readouterr().out
    fresh = clone(remote, tmp_path / "fresh")
    monkeypatch.chdir(fresh)
    assert main(["baselines", "pull"]) == 0
    assert "pulled 1 baseline(s)" in capsys.readouterr().out
    assert main(["baselines", "push", "--remote", "nowhere"]) == 2


@pytest.mark.parametrize("command", ["pull", "push"])
def test_a_remote_url_with_credentials_is_never_echoed_with_them(
    remote: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    one = clone(remote, tmp_path / "one")
    save(one, commit(one, "A"))
    monkeypatch.chdir(one)
    secret = "https://octo:ghp_s3cret@127.0.0.1:9/models.git"  # nothing listens on port 9
    assert main(["baselines", command, "--remote", secret]) == 2
    err = capsys.readouterr().err
    assert "ghp_s3cret" not in err and "https://***@127.0.0.1:9/models.git" in err
    assert len(err.strip().splitlines()) == 1


def test_history_and_noise_floor(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    store = BaselineStore(tmp_path / "baselines")
    shas = []
    for i, center in enumerate([1.0, 1.02, 0.98, 1.01, 1.0, 1.03]):
        sha = commit(repo, f"c{i}")
        shas.append(sha)
        if i != 2:  # a commit without a baseline is skipped
            store.save(run([result("t.py::a", "eager", center, seed=i)], commit=sha))
    history = load_history(store, "cuda-test-gpu", repo, last=4)
    assert list(history["commit"].unique()) == [shas[1], shas[3], shas[4], shas[5]]
    assert sorted(history["position"].unique()) == [0, 1, 2, 3]
    floors = noise_floor(history)
    p50 = floors[("t.py::a", "eager", "latency_p50_ms")]
    assert 0.5 < p50 < 6.0
    assert noise_floor(load_history(store, "cuda-test-gpu", repo, last=2)) == {}


def test_prune_keeps_the_newest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    store = BaselineStore(tmp_path)
    for i in range(5):
        store.save(
            replace(
                run([result("t.py::a", "eager", 1.0)], commit=f"{i:040x}"),
                created=f"2026-11-0{i + 1}T00:00:00+00:00",
            )
        )
    assert main(["baselines", "prune", "--keep", "2", "--dir", str(tmp_path), "--dry-run"]) == 0
    assert len(store.list()) == 5
    assert main(["baselines", "prune", "--keep", "2", "--dir", str(tmp_path)]) == 0
    assert sorted(i.commit for i in store.list()) == [f"{3:040x}", f"{4:040x}"]
    assert "removed 3 baseline(s)" in capsys.readouterr().out


def test_regressions_carry_their_trend_over_the_recent_baselines() -> None:
    from perfguard.stats.verdicts import compare_runs
    from perfguard.store.history import history_frame, with_trends

    history = [
        run([result("t.py::a", "eager", c, seed=i)], commit=f"{i:040x}")
        for i, c in enumerate([1.0, 1.01, 0.99])
    ]
    head = run([result("t.py::a", "eager", 1.6, seed=9)], commit="f" * 40)
    comparisons = with_trends(compare_runs(history[-1], head), history_frame(history))
    p50 = next(c for c in comparisons if c.metric == "latency_p50_ms")
    assert p50.verdict == "regression"
    assert [sha for sha, _ in p50.trend] == [f"{i:040x}" for i in range(3)]
    assert [v for _, v in p50.trend] == [r.results[0].metrics.latency_p50_ms for r in history]
    assert all(not c.trend for c in comparisons if c.verdict != "regression")
