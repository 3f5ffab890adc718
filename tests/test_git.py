"""Baseline lookup (the documented `auto` order) in scratch git repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.git import (
    SHALLOW_HINT,
    GitError,
    explicit_baseline,
    find_baseline,
    git_state,
    resolve_commit,
)
from tests.gitrepo import commit, git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def test_linear_history_on_main_compares_with_the_parent(repo: Path) -> None:
    a = commit(repo, "A")
    commit(repo, "B")
    choice = find_baseline(repo, {a}.__contains__)
    assert choice.commit == a
    assert "first parent of HEAD, which is on main" in choice.reason


def test_branch_uses_the_merge_base(repo: Path) -> None:
    a = commit(repo, "A")
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "F1")
    commit(repo, "F2")
    choice = find_baseline(repo, {a}.__contains__)
    assert choice.commit == a and "merge-base of HEAD with main" in choice.reason


def test_branch_off_an_older_main_uses_its_fork_point_not_main_tip(repo: Path) -> None:
    a = commit(repo, "A")
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "F1")
    git(repo, "checkout", "-q", "main")
    b = commit(repo, "B")
    git(repo, "checkout", "-q", "feature")
    choice = find_baseline(repo, {a, b}.__contains__)
    assert choice.commit == a


def test_pr_merge_commit_uses_its_first_parent(repo: Path) -> None:
    commit(repo, "A")
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "F1")
    git(repo, "checkout", "-q", "main")
    b = commit(repo, "B")
    # what GitHub checks out for a pull request: a merge of the PR into the base tip
    git(repo, "checkout", "-q", "--detach", b)
    git(repo, "merge", "-q", "--no-ff", "feature", "-m", "Merge PR")
    choice = find_baseline(repo, {b}.__contains__)
    assert choice.commit == b
    assert "first parent of the pull-request merge commit" in choice.reason


def test_commits_without_baselines_walk_first_parents(repo: Path) -> None:
    a = commit(repo, "A")
    commit(repo, "B")
    commit(repo, "C")
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "F")
    choice = find_baseline(repo, {a}.__contains__)
    assert choice.commit == a
    assert "2 first-parent step(s) back" in choice.reason
    none = find_baseline(repo, {a}.__contains__, depth=1)
    assert none.commit is None and "perfguard_baseline_depth=1" in none.reason


def test_no_baseline_anywhere_is_not_an_error(repo: Path) -> None:
    commit(repo, "A")
    commit(repo, "B")
    choice = find_baseline(repo, lambda sha: False)
    assert choice.commit is None and choice.reason.startswith("no baseline in")


def test_shallow_clone_is_explained(repo: Path, tmp_path: Path) -> None:
    a = commit(repo, "A")
    commit(repo, "B")
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "F")
    clone = tmp_path / "shallow"
    git(
        tmp_path, "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{repo}", str(clone)
    )
    state = git_state(clone)
    assert state is not None and state.shallow
    choice = find_baseline(clone, {a}.__contains__)
    assert choice.commit is None
    assert "fetch-depth: 0" in choice.reason and SHALLOW_HINT in choice.reason


def test_outside_git_measuring_still_works(tmp_path: Path) -> None:
    assert git_state(tmp_path) is None
    choice = find_baseline(tmp_path, lambda sha: True)
    assert choice.commit is None and "not inside a git repository" in choice.reason


def test_state_reports_branch_and_dirtiness(repo: Path) -> None:
    (repo / "f.txt").write_text("1")
    git(repo, "add", "f.txt")
    sha = commit(repo, "A")
    state = git_state(repo)
    assert state is not None
    assert (state.head, state.branch, state.dirty) == (sha, "main", False)
    (repo / "untracked.txt").write_text("x")
    assert not git_state(repo).dirty  # type: ignore[union-attr]
    (repo / "f.txt").write_text("2")
    assert git_state(repo).dirty  # type: ignore[union-attr]


def test_explicit_ref(repo: Path) -> None:
    a = commit(repo, "A")
    commit(repo, "B")
    assert explicit_baseline(repo, "HEAD~1", {a}.__contains__).commit == a
    missing = explicit_baseline(repo, "HEAD", {a}.__contains__)
    assert missing.commit is None and "no stored baseline" in missing.reason


def test_resolve_knows_only_commits_this_clone_holds(repo: Path) -> None:
    a = commit(repo, "A")
    assert resolve_commit(repo, a[:8]) == a and resolve_commit(repo, "HEAD") == a
    # a full sha parses without being here (a shallow clone lacks the base commit)
    with pytest.raises(GitError, match="is not a revision of this repository"):
        resolve_commit(repo, "0" * 40)
    with pytest.raises(GitError):
        resolve_commit(repo, "no-such-branch")
