"""A detached git worktree of the base revision, removed however the session ends.

A session killed with SIGKILL cannot clean up: its worktree stays in `git worktree list`
with its folder. Each folder carries the pid of the session that made it (`scratch`), and the
next session in the repository removes those whose session is gone (`prune_stale`), with
whatever else killed A/B sessions left in the temporary directory.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from perfguard import git, scratch
from perfguard.git import GitError


def _stale(tree: Path) -> bool:
    """A perfguard worktree whose session is gone (or that never recorded one: it is
    listed by git only once its owner is written)."""
    if tree.name != "tree" or not tree.parent.name.startswith(scratch.PREFIX):
        return False
    pid = scratch.owner(tree.parent)
    return pid is None or not scratch.alive(pid)


def prune_stale(root: Path) -> list[Path]:
    """Remove the worktrees of perfguard sessions that were killed; what went."""
    gone = []
    with contextlib.suppress(Exception):
        for tree in git.worktrees(root):
            if _stale(tree):
                git.remove_worktree(root, tree)
                shutil.rmtree(tree.parent, ignore_errors=True)
                gone.append(tree)
        scratch.prune()  # logs and sockets, and other repositories' worktree folders
        git.prune_worktrees(root)
    return gone


class Worktree:
    """`git worktree add --detach` of one commit in a temporary folder."""

    def __init__(self, root: Path, commit: str) -> None:
        self.root = root
        self.commit = commit
        prune_stale(root)
        self._folder = scratch.make()
        self.path = self._folder / "tree"
        try:
            top = git.add_worktree(root, self.path, commit)
        except GitError:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        # the pytest rootdir may sit below the top of the repository
        self.rootdir = self.path / Path(root).resolve().relative_to(top)

    def remove(self) -> None:
        # already gone is fine: the folder is removed and git's bookkeeping pruned anyway
        git.remove_worktree(self.root, self.path)
        shutil.rmtree(self._folder, ignore_errors=True)
        git.prune_worktrees(self.root)
