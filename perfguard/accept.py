"""The pipeline's accept step: the regressions a pull request's accept file accepts.

The rules are `perfguard.stats.accepts`; this step reads the file as committed, at HEAD and at
the base commit, through git, so that only the entries this change introduced apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from perfguard.git import GitError, file_at, last_author
from perfguard.records import Run
from perfguard.stats import accepts


def with_accepts(run: Run, root: Path, messages: list[str], collected: Iterable[str] = ()) -> Run:
    """The regressions that the accept file's entries introduced since the base commit
    accept (stats.accepts). The file is read as committed, at HEAD and at the base.
    `collected`: every perf test of the tree (a shard's run holds only its own, and an
    entry must not accept all of the suite because a shard held one test)."""
    if run.commit is None or run.baseline.commit is None or not run.comparisons:
        return run
    path = root / accepts.ACCEPT_FILE
    try:
        text = file_at(root, run.commit, path)
        if text is None:
            return run
        head = accepts.parse(text)
        before = file_at(root, run.baseline.commit, path)
        # a base whose file does not read as a whole still had the entries that do: a change
        # that mends the file makes only what it adds new, not every entry again
        base = accepts.parse_each(before) if before else []
    except (accepts.AcceptError, GitError) as exc:
        messages.append(f"nothing accepted: {exc}")
        return replace(run, accept_error=str(exc))
    new = accepts.introduced(head, base)
    if not new:
        return run
    tests = [
        *(r.test for r in run.results),
        *(c.test for c in run.comparisons),
        *(u.test for u in (run.selection.unaffected if run.selection is not None else ())),
        *collected,
    ]
    wide = accepts.too_wide(new, tests)
    if wide is not None:  # the ids this run has, not made-up ones
        messages.append(f"nothing accepted: {wide}")
        return replace(run, accept_error=wide)
    by = last_author(root, run.baseline.commit, run.commit, path)
    applied = accepts.apply(run.comparisons, [replace(a, by=by) for a in new])
    count = sum(c.verdict == "accepted" for c in applied)
    messages.append(
        f"{accepts.ACCEPT_FILE}: {len(new)} entr{'y' if len(new) == 1 else 'ies'} of this "
        f"change, {count} regression(s) accepted"
    )
    return replace(run, comparisons=tuple(applied))
