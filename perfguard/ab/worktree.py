"""A detached git worktree of the base revision, removed however the session ends."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from perfguard.git import GitError, _repo


class Worktree:
    """`git worktree add --detach` of one commit in a temporary folder."""

    def __init__(self, root: Path, commit: str) -> None:
        self.repo = _repo(root)
        top = Path(self.repo.working_tree_dir or root).resolve()
        self.commit = commit
        self._folder = Path(tempfile.mkdtemp(prefix="perfguard-ab-"))
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
