"""The summary table of a baselines branch, read as git objects (no checkout): the history
reads main's series from it in the workflow's history job."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from perfguard.store.gitcache import read_blobs, tree_files
from perfguard.store.months import Window, month_key, month_rows
from perfguard.store.summary import (
    Summary,
    SummaryError,
    concat_parts,
    current,
    frame,
    read_part,
    rows_of,
)
from perfguard.store.sync import baseline_content_problem, records_by_key, summary_key


def load_branch(
    root: Path, ref: str, metrics: Sequence[str] | None = None, window: Window | None = None
) -> Summary:
    """The table of every baseline on git revision `ref` (the rows of `metrics` alone, when
    given), read as git objects: a record's
    part where it is current (matched by blob id from `git ls-tree`, no record read), the
    record itself where its part is missing or stale. A broken record is left out and named
    in `skipped`; a broken part is passed over for its record. The month files hold the
    rows of older commits (`perfguard.store.months`), but a commit's own record or part.
    With a `window`, only its commits' files and the month files that may hold them are
    read."""
    files = tree_files(root, ref)
    records = records_by_key(list(files))
    parts = {key: path for path in files if (key := summary_key(path)) is not None}
    months = {path: key[1] for path in files if (key := month_key(path)) is not None}
    if window is not None:
        records = {key: path for key, path in records.items() if window.holds(key[1])}
        parts = {key: path for key, path in parts.items() if window.holds(key[1])}
        months = {path: m for path, m in months.items() if window.may_hold(m)}
    blobs = read_blobs(root, [files[p] for p in (*parts.values(), *months)])
    tables, used, rebuilt, missing = [], 0, 0, []
    for key, path in sorted(records.items()):
        part = None
        if key in parts:
            try:
                part = read_part(blobs[files[parts[key]]], f"{ref}:{parts[key]}")
            except SummaryError:
                part = None
        if part is not None and current(part, files[path]):
            tables.append(part)
            used += 1
        else:
            missing.append((key, path))
    for key in sorted(set(parts) - set(records)):  # records that retention removed
        with contextlib.suppress(SummaryError):
            tables.append(read_part(blobs[files[parts[key]]], f"{ref}:{parts[key]}"))
            used += 1
    own = set(records) | set(parts)
    found, skipped = month_rows(
        ((f"{ref}:{path}", blobs[files[path]]) for path in sorted(months)), metrics, own, window
    )
    tables += found
    used += len(found)
    content = read_blobs(root, [files[path] for _, path in missing])
    for _key, path in missing:
        run, problem = baseline_content_problem(path, content[files[path]])
        if run is None:  # left out, as `baselines pull` leaves it
            skipped.append(f"{ref}:{path}: {problem}")
            continue
        tables.append(frame(rows_of(run, files[path])))
        rebuilt += 1
    return Summary(concat_parts(tables, metrics), used, rebuilt, tuple(skipped))
