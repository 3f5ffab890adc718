"""Main's older summary rows, one file per machine and month.

Each save writes its own commit's part (`.summary/<machine>/<sha>.parquet`), so a push writes
little. But reading a year of main part by part cost some 7 ms a part (3,000 commits: 25 s
for `perfguard history`), for every push. So `perfguard baselines retain`, once a machine has
`COMPACT_AT` parts of commits whose records it removed, folds those parts into one file per
machine and month of their `created` date (merged with the month's file where there is one):

    .summary/<machine>/<YYYY-MM>.parquet      ("undated" for rows without a date)

Its columns are a part's (`summary.COLUMNS`), its rows sorted by metric, then machine, test,
variant, date and commit, with one row group per metric, so that a reader of a few metrics
(the history reads nine of some thirty) reads their row groups alone. The newest commits,
whose records the branch keeps, stay in parts of their own: a pull request's fetch and the
noise floor read those. A commit that has a record or a part of its own on the branch (saved
again after its month was folded) is read from those, never from its month's rows.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfguard.store.summary import (
    COLUMNS,
    SUMMARY_DIR,
    TEXT_COLUMNS,
    SummaryError,
    _Buffer,
    _fastparquet,
    concat_parts,
    read_part,
)

if TYPE_CHECKING:
    import pandas as pd

COMPACT_AT = 100
"""Parts of commits without a record that a machine gathers before they are folded."""
UNDATED = "undated"
_MONTH = re.compile(r"\d{4}-\d{2}")
_NAME = re.compile(rf"(?:{_MONTH.pattern}|{UNDATED})\.parquet")
_SHA_PART = re.compile(r"[0-9a-f]{40}\.parquet")
ANY_MONTH = "*"
"""A `Window` month that every month file matches (its commits' dates are not known)."""
SORT = ("metric", "machine", "test", "variant", "created", "commit")


def to_fold(paths: Iterable[str], recorded: set[tuple[str, str]]) -> list[str]:
    """The parts among `paths` to fold: those of commits without a record, of each machine
    that has `COMPACT_AT` of them (the newest commits keep their own parts)."""
    loose: dict[str, list[str]] = {}
    for path in paths:
        parts = path.split("/")
        if (
            len(parts) == 3
            and parts[0] == SUMMARY_DIR
            and _SHA_PART.fullmatch(parts[2])
            and (parts[1], parts[2].removesuffix(".parquet")) not in recorded
        ):
            loose.setdefault(parts[1], []).append(path)
    return sorted(p for paths in loose.values() if len(paths) >= COMPACT_AT for p in paths)


def fold(
    parts: Mapping[str, bytes], existing: Callable[[list[str]], Mapping[str, bytes]]
) -> tuple[list[str], dict[str, bytes]]:
    """Fold parts (path -> content) into month files, each merged with the month's file
    where there is one (`existing(paths)`: the content of those of `paths` that exist): the
    parts folded (a broken one is left where it is: every reader names it) and each month
    file's new content."""
    by_month: dict[str, list[pd.DataFrame]] = {}
    folded = []
    for path, content in sorted(parts.items()):
        try:
            table = read_part(content, path)
        except SummaryError:
            continue
        month = month_of(str(table["created"].iloc[0])) if len(table) else UNDATED
        by_month.setdefault(month_path(path.split("/")[1], month), []).append(table)
        folded.append(path)
    earlier = existing(sorted(by_month))
    written = {}
    for path, tables in sorted(by_month.items()):
        before = [read_month(earlier[path], path)] if path in earlier else []
        written[path] = month_bytes([*before, *tables])
    return folded, written


def month_key(path: str) -> tuple[str, str] | None:
    """(machine, month) of a month file's path `.summary/<machine>/<YYYY-MM>.parquet`."""
    parts = path.split("/")
    if len(parts) != 3 or parts[0] != SUMMARY_DIR or not _NAME.fullmatch(parts[2]):
        return None
    return parts[1], parts[2].removesuffix(".parquet")


def month_path(machine: str, month: str) -> str:
    return f"{SUMMARY_DIR}/{machine}/{month}.parquet"


def month_of(created: str) -> str:
    """The month a row is filed under: its date's year and month (UTC, as saves write it)."""
    return created[:7] if _MONTH.match(created[:7]) else UNDATED


def month_bytes(tables: Sequence[pd.DataFrame]) -> bytes:
    """One month file of the rows of `tables` (parts, and the month's earlier file), each
    commit's rows once: where a commit's rows are in two of them, the later table's."""
    import numpy as np
    import pandas as pd

    seen: set[tuple[str, str]] = set()
    kept = []
    for table in reversed(tables):  # the last given wins
        kept.append(without(table, seen))
        seen |= _commits(table)
    rows = concat_parts(list(reversed(kept)))
    order = rows.sort_values(list(SORT), kind="stable").index
    rows = rows.loc[order].reset_index(drop=True)
    for column in TEXT_COLUMNS:
        rows[column] = pd.Categorical(rows[column].astype(object))
    metric = rows["metric"].cat.codes.to_numpy()
    starts = [0, *(np.flatnonzero(metric[1:] != metric[:-1]) + 1).tolist()]
    buffer = _Buffer()
    _fastparquet().write(
        "month",
        rows,
        compression="ZSTD",
        write_index=False,
        row_group_offsets=starts,
        stats=True,
        open_with=lambda *_: buffer,
    )
    return buffer.written


def _commits(table: pd.DataFrame) -> set[tuple[str, str]]:
    """The (machine, commit) pairs `table` has rows of."""
    pairs = table[["machine", "commit"]].drop_duplicates()
    return {(str(m), str(c)) for m, c in pairs.itertuples(index=False, name=None)}


def read_month(content: bytes, where: str, metrics: Iterable[str] | None = None) -> pd.DataFrame:
    """The rows of a month file (of `metrics` alone when given: their row groups only);
    `SummaryError` naming `where` when it is not one."""
    try:
        parquet = _fastparquet().ParquetFile(io.BytesIO(content))
        wanted = None if metrics is None else [("metric", "in", list(metrics))]
        table: pd.DataFrame = parquet.to_pandas(filters=wanted)
    except Exception as exc:  # fastparquet raises many kinds on a damaged file
        raise SummaryError(
            f"{where}: not a summary month file ({type(exc).__name__}: {exc})"
        ) from None
    if tuple(table.columns) != COLUMNS:
        raise SummaryError(f"{where}: not a summary month file (columns {list(table.columns)})")
    if metrics is not None:
        table = table[table["metric"].isin(list(metrics))]
    return table


def month_rows(
    files: Iterable[tuple[str, bytes]],
    metrics: Sequence[str] | None,
    own: set[tuple[str, str]],
    window: Window | None = None,
) -> tuple[list[pd.DataFrame], list[str]]:
    """The rows of month files ((where, content) each) of `metrics`, but those of the
    commits in `own` (read from their own part or record) and, with a `window`, of commits
    outside it; and a line naming each file that is not one (left out: every reader goes
    on without it)."""
    tables, skipped = [], []
    for where, content in files:
        try:
            rows = without(read_month(content, where, metrics), own)
        except SummaryError as exc:
            skipped.append(str(exc))
            continue
        tables.append(rows if window is None else window.rows(rows))
    return tables, skipped


def without(table: pd.DataFrame, commits: set[tuple[str, str]]) -> pd.DataFrame:
    """`table`'s rows but those of (machine, commit) in `commits` (read from elsewhere)."""
    if not commits or table.empty:
        return table
    shas: dict[str, list[str]] = {}
    for machine, commit in commits:
        shas.setdefault(machine, []).append(commit)
    drop = None
    for machine, listed in shas.items():
        these = (table["machine"] == machine) & table["commit"].isin(listed)
        drop = these if drop is None else drop | these
    return table if drop is None or not drop.any() else table[~drop]


@dataclass(frozen=True)
class Window:
    """The newest commits of main that a push's history reads (`--window`): their ids, and
    the months their rows can be filed under (the month of each commit's date and the one
    after: a commit is measured when it lands, or soon after). Every other part, record and
    month file is passed over unread."""

    commits: frozenset[str]
    months: frozenset[str]

    @classmethod
    def of(cls, dated: Iterable[tuple[str, str]]) -> Window:
        """The window of (commit, ISO date) pairs."""
        commits, months = set(), set()
        for sha, date in dated:
            commits.add(sha)
            month = month_of(date)
            months.add(month)
            if month != UNDATED:
                year, number = int(month[:4]), int(month[5:7])
                months.add(f"{year + number // 12}-{number % 12 + 1:02d}")
        return cls(frozenset(commits), frozenset(months))

    def holds(self, commit: str) -> bool:
        return commit in self.commits

    def may_hold(self, month: str) -> bool:
        return month in self.months or month == UNDATED or ANY_MONTH in self.months

    def rows(self, table: pd.DataFrame) -> pd.DataFrame:
        """`table`'s rows of the window's commits."""
        return table[table["commit"].isin(list(self.commits))]
