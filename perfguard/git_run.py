"""A git command by its arguments, for what GitPython's objects do not cover (the baselines
branch's private repository, rev-list, merge-base): run through GitPython's own command runner,
so that the project reaches git one way."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.git import GitError


@dataclass(frozen=True)
class Done:
    """What a git command did: its exit status and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


def run_git(
    root: Path, *args: str, env: Mapping[str, str] | None = None, stdin: str | None = None
) -> Done:
    """`git ARGS` in `root`, through GitPython's command runner (the project's one way to
    git): git's own failure is its exit status, not an exception; `env` adds to the
    environment, `stdin` is written to git's input."""
    try:
        import git
    except ImportError as exc:  # gitpython needs the git executable
        raise GitError(f"git is not usable here: {exc}") from None
    # (GitPython hands git a file as its input: made only for a command that is given one)
    with tempfile.TemporaryFile() if stdin is not None else contextlib.nullcontext() as given:
        if given is not None:
            given.write(str(stdin).encode())
            given.seek(0)
        status, out, err = git.Git(str(root)).execute(
            ["git", *args],
            istream=given,
            env=dict(env or {}),
            with_extended_output=True,
            with_exceptions=False,
            strip_newline_in_stdout=False,
        )
    return Done(int(status or 0), str(out), str(err))


def read_objects(root: Path, ids: Sequence[str]) -> dict[str, bytes]:
    """The content of git objects by id, read by one `git cat-file` process (GitPython's);
    GitError names an object the repository lacks."""
    import git

    reader = git.Git(str(root))
    out = {}
    try:
        for oid in dict.fromkeys(ids):
            out[oid] = reader.get_object_data(oid)[3]
    except ValueError as exc:  # as GitPython says an object is missing
        raise GitError(f"git cat-file: {exc}") from None
    finally:
        reader.clear_cache()  # ends its cat-file process
    return out
