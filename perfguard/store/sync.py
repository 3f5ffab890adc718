"""Keep the baseline directory on a git branch of a remote (default `perfguard-baselines`).

Everything goes through git plumbing with a private, temporary index, so the user's checked-out
branch, index and working tree are never touched. `push` is safe against a concurrent pusher:
it fetches the branch, merges its own files into the fetched tree, and pushes without force;
if the remote moved in between, it fetches and tries again, so no baseline is lost.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.store.baselines import SHA, write_bytes_atomic

DEFAULT_BRANCH = "perfguard-baselines"
DEFAULT_REMOTE = "origin"
EMPTY_TREE_MESSAGE = "perfguard baselines"


class SyncError(Exception):
    """A git step of pull or push failed; the message says which and what git said."""


@dataclass(frozen=True)
class SyncResult:
    added: tuple[str, ...]  # paths relative to the baseline directory
    kept: tuple[str, ...]  # present on both sides with different content: ours kept
    attempts: int = 1


def _git(
    root: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["git", *args], cwd=root, env={**os.environ, **(env or {})}, capture_output=True, text=True
    )
    if check and done.returncode != 0:
        what = (done.stderr or done.stdout).strip().splitlines()
        raise SyncError(f"git {' '.join(args[:2])} failed: {what[-1] if what else done.returncode}")
    return done


def _fetch(root: Path, remote: str, branch: str) -> str | None:
    """Fetch the branch into a private ref; its commit, or None when the remote has none."""
    ref = f"refs/perfguard/remote-{branch}"
    done = _git(
        root, "fetch", "--quiet", "--no-tags", remote, f"+refs/heads/{branch}:{ref}", check=False
    )
    if done.returncode != 0:
        message = (done.stderr or "").lower()
        if "couldn't find remote ref" in message or "could not find remote ref" in message:
            return None
        raise SyncError(f"git fetch {remote} {branch} failed: {done.stderr.strip()}")
    return _git(root, "rev-parse", ref).stdout.strip()


def _remote_files(root: Path, commit: str | None) -> dict[str, str]:
    """path -> blob sha of every baseline file on the branch."""
    if commit is None:
        return {}
    out = _git(root, "ls-tree", "-r", commit).stdout
    files = {}
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        files[path] = meta.split()[2]
    return files


def _local_files(baseline_dir: Path) -> dict[str, Path]:
    files = {}
    if baseline_dir.is_dir():
        for f in sorted(baseline_dir.glob("*/*.json")):
            if SHA.match(f.stem) and not f.parent.name.startswith("."):
                files[f"{f.parent.name}/{f.name}"] = f
    return files


def _blob_of(root: Path, path: Path) -> str:
    return _git(root, "hash-object", "-w", str(path)).stdout.strip()


def pull(
    root: Path, baseline_dir: Path, *, remote: str = DEFAULT_REMOTE, branch: str = DEFAULT_BRANCH
) -> SyncResult:
    """Bring the branch's baselines that are missing here; never overwrite a local file."""
    commit = _fetch(root, remote, branch)
    remote_files = _remote_files(root, commit)
    local = _local_files(baseline_dir)
    added, kept = [], []
    for path, blob in sorted(remote_files.items()):
        if path in local:
            if _blob_of(root, local[path]) != blob:
                kept.append(path)
            continue
        content = subprocess.run(
            ["git", "cat-file", "blob", blob], cwd=root, capture_output=True, check=True
        ).stdout
        write_bytes_atomic(baseline_dir / path, content)
        added.append(path)
    return SyncResult(tuple(added), tuple(kept))


def push(
    root: Path,
    baseline_dir: Path,
    *,
    remote: str = DEFAULT_REMOTE,
    branch: str = DEFAULT_BRANCH,
    attempts: int = 8,
    message: str | None = None,
) -> SyncResult:
    """Add the local baselines to the branch (ours win on the same path), retrying on races."""
    local = _local_files(baseline_dir)
    if not local:
        return SyncResult((), ())
    for attempt in range(1, attempts + 1):
        parent = _fetch(root, remote, branch)
        remote_files = _remote_files(root, parent)
        blobs = {path: _blob_of(root, f) for path, f in local.items()}
        changed = sorted(p for p, b in blobs.items() if remote_files.get(p) != b)
        if not changed:
            return SyncResult((), (), attempt)
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if parent is not None:
                _git(root, "read-tree", parent, env=env)
            for path in changed:
                _git(
                    root,
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    f"100644,{blobs[path]},{path}",
                    env=env,
                )
            tree = _git(root, "write-tree", env=env).stdout.strip()
        args: Sequence[str] = (
            "commit-tree",
            tree,
            "-m",
            message or f"perfguard: {len(changed)} baseline(s)",
        )
        if parent is not None:
            args = (*args, "-p", parent)
        commit = _git(root, *args, env=_identity(root)).stdout.strip()
        done = _git(root, "push", "--quiet", remote, f"{commit}:refs/heads/{branch}", check=False)
        if done.returncode == 0:
            return SyncResult(tuple(changed), (), attempt)
        text = (done.stderr or "").lower()
        if (
            "rejected" not in text
            and "non-fast-forward" not in text
            and "fetch first" not in text
            and "failed to update ref" not in text
            and "cannot lock ref" not in text
        ):
            raise SyncError(f"git push {remote} {branch} failed: {done.stderr.strip()}")
        time.sleep(0.05 * attempt)  # someone else pushed first: fetch their files and retry
    raise SyncError(
        f"git push {remote} {branch}: still rejected after {attempts} attempts "
        "(many concurrent pushers?); run perfguard baselines push again"
    )


def _identity(root: Path) -> dict[str, str]:
    """commit-tree needs an identity; CI machines often have none. The user's own wins."""
    if _git(root, "var", "GIT_COMMITTER_IDENT", check=False).returncode == 0:
        return {}
    env: dict[str, str] = {}
    for kind in ("AUTHOR", "COMMITTER"):
        env.setdefault(f"GIT_{kind}_NAME", os.environ.get(f"GIT_{kind}_NAME", "perfguard"))
        env.setdefault(
            f"GIT_{kind}_EMAIL", os.environ.get(f"GIT_{kind}_EMAIL", "perfguard@localhost")
        )
    return env
