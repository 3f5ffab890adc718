"""A detached git worktree of the base revision, removed however the session ends.

A session killed with SIGKILL cannot clean up: its worktree stays in `git worktree list`
with its folder. Each folder carries the pid of the session that made it, and the next
session in the repository removes those whose session is gone (`prune_stale`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from perfguard.git import GitError, _repo

PREFIX = "perfguard-ab-"
OWNER = "owner.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _stale(tree: Path) -> bool:
    """A perfguard worktree whose session is gone (or that never recorded one)."""
    if tree.name != "tree" or not tree.parent.name.startswith(PREFIX):
        return False
    try:
        pid = int((tree.parent / OWNER).read_text().strip())
    except (OSError, ValueError):
        return True  # no owner recorded: nobody can be using it
    return not _alive(pid)


def _listed(repo: Any) -> list[Path]:
    out = str(repo.git.worktree("list", "--porcelain"))
    return [
        Path(line[len("worktree ") :]) for line in out.splitlines() if line.startswith("worktree ")
    ]


def prune_stale(root: Path) -> list[Path]:
    """Remove the worktrees of perfguard sessions that were killed; what went."""
    repo = _repo(root)
    gone = []
    with contextlib.suppress(Exception):
        for tree in _listed(repo):
            if _stale(tree):
                with contextlib.suppress(Exception):
                    repo.git.worktree("remove", "--force", str(tree))
                shutil.rmtree(tree.parent, ignore_errors=True)
                gone.append(tree)
        repo.git.worktree("prune")
    return gone


class Worktree:
    """`git worktree add --detach` of one commit in a temporary folder."""

    def __init__(self, root: Path, commit: str) -> None:
        self.repo = _repo(root)
        top = Path(self.repo.working_tree_dir or root).resolve()
        self.commit = commit
        prune_stale(root)
        self._folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        (self._folder / OWNER).write_text(f"{os.getpid()}\n")
        self.path = self._folder / "tree"
        try:
            self.repo.git.worktree("add", "--detach", str(self.path), commit)
        except Exception as exc:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise GitError(f"could not check out {commit[:10]} as a worktree: {exc}") from None
        # the pytest rootdir may sit below the top of the repository
        self.rootdir = self.path / Path(root).resolve().relative_to(top)

    def remove(self) -> None:
        # already gone is fine: the folder is removed and git's bookkeeping pruned anyway
        with contextlib.suppress(Exception):
            self.repo.git.worktree("remove", "--force", str(self.path))
        shutil.rmtree(self._folder, ignore_errors=True)
        with contextlib.suppress(Exception):
            self.repo.git.worktree("prune")
