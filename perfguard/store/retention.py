"""Retention: the baselines branch keeps the newest records and the whole summary table.

`perfguard baselines retain --keep N` rewrites the branch to one commit holding the records of
the N newest commits of each machine along main's first-parent history, and every summary
part, so that its size stays bounded by what it holds (docs/ci.md, "Retention").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.store import gitcache
from perfguard.store.gitcache import SyncError
from perfguard.store.sync import DEFAULT_BRANCH, DEFAULT_REMOTE, by_key, summary_key


@dataclass(frozen=True)
class Retained:
    """What `retain` kept and removed of the branch (paths relative to its root)."""

    kept: tuple[str, ...]  # records
    removed: tuple[str, ...]  # records of older commits (their summary parts stay)
    parts: int  # summary parts on the branch, all kept
    pushed: bool  # False on a dry run, or a branch that does not exist yet
    attempts: int = 1


def retain(
    root: Path,
    *,
    keep: int,
    line: Sequence[str],
    remote: str = DEFAULT_REMOTE,
    branch: str = DEFAULT_BRANCH,
    dry_run: bool = False,
    attempts: int = 8,
) -> Retained:
    """Keep on the branch the records of the `keep` newest commits of each machine along
    main's first-parent `line` (oldest first, as `history.series.main_line` gives it), every
    summary part, and none of the branch's
    history: the branch becomes one commit with that tree, so its size is bounded by what it
    holds now. A record of a commit not on `line` is kept (it cannot be placed: a save
    newer than this checkout's main, say).

    No baseline is lost to a concurrent push: the rewrite is pushed with a lease on the tip
    it was made from, so if another push landed first, this one fails and is made again on
    top of it; and a push that comes after finds the branch rewritten, so it fetches the new
    tip and lands on it (as for any push that lost a race).
    """
    if keep < 1:
        raise SyncError(f"--keep must be at least 1, got {keep}")
    position = {sha: i for i, sha in enumerate(line)}
    cache = gitcache.open_cache(root, remote)
    for attempt in range(1, attempts + 1):
        tip = gitcache.fetch_tip(cache, branch)
        if tip is None:
            return Retained((), (), 0, pushed=False, attempts=attempt)
        files = gitcache.tree_files(cache.git_dir, tip)
        records = by_key(list(files))
        removed: list[str] = []
        for machine in sorted({m for m, _ in records}):
            placed = sorted(
                (sha for m, sha in records if m == machine and sha in position),
                key=position.__getitem__,
                reverse=True,  # newest first
            )
            for sha in placed[keep:]:
                removed.extend(records[(machine, sha)])
        kept = sorted(p for paths in records.values() for p in paths if p not in removed)
        parts = sum(summary_key(p) is not None for p in files)
        found = Retained(tuple(kept), tuple(sorted(removed)), parts, pushed=False, attempts=attempt)
        if dry_run:
            return found
        text = (
            f"perfguard: the records of the {keep} newest commits of each machine "
            f"({len(kept)} kept, {len(removed)} removed) and the whole summary"
        )
        commit = gitcache.commit_tree(
            cache, tip, {}, text, gitcache.identity(root), remove=removed, root_commit=True
        )
        done = gitcache.run_git(
            cache.git_dir,
            "push",
            "--quiet",
            f"--force-with-lease=refs/heads/{branch}:{tip}",
            "origin",
            f"{commit}:refs/heads/{branch}",
            check=False,
            env=gitcache.auth_env(),
        )
        if done.returncode == 0:
            return Retained(found.kept, found.removed, parts, pushed=True, attempts=attempt)
        stderr = (done.stderr or "").lower()
        if "stale info" not in stderr and not gitcache.lost_a_race(stderr):
            raise SyncError(
                f"git push {remote} {branch} was refused: {gitcache.server_reason(stderr)}"
            )
        time.sleep(0.05 * attempt)  # a push landed first: keep its baseline, and retry
    raise SyncError(
        f"perfguard baselines retain: {remote}/{branch} moved under it {attempts} times; "
        "run it again"
    )
