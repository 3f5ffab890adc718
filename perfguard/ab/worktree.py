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
from typing import Any

from perfguard.ab import scratch
from perfguard.git import GitError, _repo


def _stale(tree: Path) -> bool:
    """A perfguard worktree whose session is gone (or that never recorded one: it is
    listed by git only once its owner is written)."""
    if tree.name != "tree" or not tree.parent.name.startswith(scratch.PREFIX):
        return False
    pid = scratch.owner(tree.parent)
    return pid is None or not scratch.alive(pid)


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
        scratch.prune()  # logs and sockets, and other repositories' worktree folders
        repo.git.worktree("prune")
    return gone


class Worktree:
    """`git worktree add --detach` of one commit in a temporary folder."""

    def __init__(self, root: Path, commit: str) -> None:
        self.repo = _repo(root)
        top = Path(self.repo.working_tree_dir or root).resolve()
        self.commit = commit
        prune_stale(root)
        self._folder = scratch.make()
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
