"""Fixtures shared by several test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gitrepo import commit, git


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare remote with one commit on main, like a fresh project."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    # as GitHub does: a fetch may leave file contents out (`--filter=blob:none`)
    git(bare, "config", "uploadpack.allowFilter", "true")
    git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(bare), str(seed))
    (seed / ".gitignore").write_text("baselines/\n")
    git(seed, "add", ".gitignore")
    commit(seed, "init")
    git(seed, "push", "-q", "origin", "HEAD:main")
    return bare
