"""Scratch git repositories for tests and benchmarks: the one `git` helper, with an identity
of its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@e",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@e",
}


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd`; its standard output, stripped (a failure raises, with git's words)."""
    done = subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def commit(cwd: Path, message: str) -> str:
    """An empty commit on the current branch; its sha."""
    git(cwd, "commit", "-q", "--allow-empty", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


def clone(remote: Path, where: Path) -> Path:
    """A clone of `remote` at `where`; `where`."""
    git(where.parent, "clone", "-q", str(remote), str(where))
    return where
