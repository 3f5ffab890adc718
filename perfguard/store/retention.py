"""Retention: the baselines branch keeps the newest records and the whole summary table.

`perfguard baselines retain --keep N` rewrites the branch to one commit holding the records of
the N newest commits of each machine along main's first-parent history, and the whole summary
table, so that its size stays bounded by what it holds (docs/ci.md, "Retention"). Once a
machine has `months.COMPACT_AT` parts of commits without a record, they are folded into its
month files (`perfguard.store.months`): a push's history then reads a file a month, not a
part a commit.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.store import gitcache
from perfguard.store.gitcache import SyncError
from perfguard.store.months import fold, to_fold
from perfguard.store.sync import DEFAULT_BRANCH, DEFAULT_REMOTE, by_key, summary_key


@dataclass(frozen=True)
class Retained:
    """What `retain` kept and removed of the branch (paths relative to its root)."""

    kept: tuple[str, ...]  # records
    removed: tuple[str, ...]  # records of older commits (their summary parts stay)
    parts: int  # summary parts on the branch, all kept (folded ones in their month files)
    pushed: bool  # False on a dry run, or a branch that does not exist yet
    attempts: int = 1
    folded: int = 0  # parts folded into month files
    months: tuple[str, ...] = ()  # the month files written


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
        kept, removed, folding = _plan(files, keep, position)
        parts = sum(summary_key(p) is not None for p in files)
        found = Retained(kept, removed, parts, pushed=False, attempts=attempt, folded=len(folding))
        if dry_run:
            return found
        folded, months = _fold(cache, files, folding)
        text = (
            f"perfguard: the records of the {keep} newest commits of each machine "
            f"({len(kept)} kept, {len(removed)} removed) and the whole summary"
            + (f" ({len(folded)} parts folded into {len(months)} month files)" if folded else "")
        )
        identity = gitcache.identity(root)
        gone = [*removed, *folded]
        commit = gitcache.commit_tree(
            cache, tip, months, text, identity, remove=gone, root_commit=True
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
            return Retained(
                found.kept,
                found.removed,
                parts,
                pushed=True,
                attempts=attempt,
                folded=len(folded),
                months=tuple(sorted(months)),
            )
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


def _plan(
    files: Mapping[str, str], keep: int, position: Mapping[str, int]
) -> tuple[tuple[str, ...], tuple[str, ...], list[str]]:
    """The records kept and removed (the `keep` newest of each machine along main's line;
    one not on it is kept), and the parts then to fold into month files."""
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
    recorded = {key for key, paths in records.items() if set(paths) - set(removed)}
    return tuple(kept), tuple(sorted(removed)), to_fold(files, recorded)


def _fold(
    cache: gitcache.Cache, files: Mapping[str, str], folding: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """Fold the parts `folding` into their month files: the paths folded and the month
    files' new blobs."""
    content = gitcache.blobs(cache, [files[p] for p in folding])

    def existing(paths: list[str]) -> dict[str, bytes]:
        there = [p for p in paths if p in files]
        found = gitcache.blobs(cache, [files[p] for p in there]) if there else {}
        return {p: found[files[p]] for p in there}

    folded, written = fold({p: content[files[p]] for p in folding}, existing)
    return folded, {path: _store(cache, data) for path, data in written.items()}


def _store(cache: gitcache.Cache, content: bytes) -> str:
    """A blob of `content` in the cache; its id."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "blob"
        path.write_bytes(content)
        return gitcache.store_blob(cache, path)
