"""Main's per-commit series: one value per baseline, for each machine, test, variant and metric.

The baselines come from the baseline folder or straight from the baselines branch (through git
plumbing, nothing checked out). They are put in the order of main's first-parent history when
the repository is at hand, else in the order they were measured; commits that are not on main
(a baseline saved from a branch) are left out and counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.git import GitError
from perfguard.git_run import run_git
from perfguard.records import Run
from perfguard.store.run_file import BaselineError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from perfguard.store.months import Window
    from perfguard.store.summary import Summary

# the metrics of a series (those with per-repeat figures have a band: store.summary)
SERIES_METRICS = (
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "ttft_p50_ms",  # a generation's time to its first token, and per token after it
    "tpot_p50_ms",
    "peak_memory_bytes",
    "compile_time_s",
    "drift_max_abs",
    "run_seconds",  # a run's cost on its runner (the summary's row of the run)
)
MAX_COMMITS = 200_000
"""How far back main's first-parent history is walked: twenty years of a busy main (it was
10,000, a year, which left a longer record's older commits out of the whole history)."""


@dataclass(frozen=True)
class Point:
    commit: str
    value: float
    low: float | None = None  # the spread of the value over the run's repeats
    high: float | None = None


@dataclass(frozen=True, eq=False)
class Series:
    """One series, oldest first, kept as numpy columns (a year of a large suite is millions
    of points, and a tuple of Python objects per point took a whole history's read twice
    over: `points` makes them one by one where they are wanted). `low` and `high` are empty
    or one per point; a point without a spread has NaN in them. A point's date is its
    commit's (`Ordered.runs`)."""

    machine: str
    test: str
    variant: str
    metric: str
    commits: np.ndarray  # of str
    values: np.ndarray  # float
    low: np.ndarray  # the spread of the values over the run's repeats (NaN: none)
    high: np.ndarray
    # each point's paired change (main's paired run, beside the commit it names), or None
    pairs: tuple[Pair | None, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.machine, self.test, self.variant, self.metric)

    @property
    def points(self) -> tuple[Point, ...]:
        n = len(self.values)

        def spread(column: np.ndarray) -> list[float | None]:
            return (
                [None if math.isnan(v) else v for v in column.tolist()]
                if len(column)
                else [None] * n
            )

        return tuple(
            Point(str(c), v, lo, hi)
            for c, v, lo, hi in zip(
                self.commits.tolist(),
                self.values.tolist(),
                spread(self.low),
                spread(self.high),
                strict=True,
            )
        )


@dataclass(frozen=True)
class Pair:
    """A figure's change measured beside another commit in the same job (same-job A/B):
    main's paired run measures each commit beside its first parent."""

    base: str  # the commit it was measured beside
    verdict: str
    change_pct: float
    low: float | None  # the change's interval, in percent (latency), where known
    high: float | None
    p_value: float | None

    @property
    def stands(self) -> bool:
        """Whether the pair shows a change (a verdict after the run's correction and its
        confirmation rounds; an accepted regression is still a step)."""
        return self.verdict in ("regression", "improvement", "accepted")


@dataclass(frozen=True)
class Measured:
    """One baseline of main: which machine, which commit, when."""

    machine: str
    commit: str
    created: str | None


@dataclass(frozen=True)
class Ordered:
    runs: tuple[Measured, ...]  # the baselines, oldest first
    how: str  # how the order was found, for the reader
    left_out: int = 0  # baselines of commits not on main's first-parent line
    table: pd.DataFrame | None = None  # their rows of the summary table
    # commit -> its first parent on main's line (None: no line known, so a pair's base is
    # taken as that commit's parent, as main's paired run measures it)
    parents: Mapping[str, str] | None = None


def load_folder(
    directory: Path | str, metrics: Sequence[str] | None = None, window: Window | None = None
) -> Summary:
    """The summary table of every baseline under `directory` (or an object store's URL), the
    rows of `metrics` alone when given, of the `window`'s commits alone when given; a broken
    record is an error that names it."""
    from perfguard.store.objects import open_store

    if isinstance(directory, Path) and not directory.is_dir():
        raise BaselineError(f"{directory}: no such baseline folder (perfguard baselines pull?)")
    return open_store(directory).summary(metrics=metrics, window=window)


def load_branch(
    root: Path, ref: str, metrics: Sequence[str] | None = None, window: Window | None = None
) -> Summary:
    """The summary table of every baseline on git revision `ref` (e.g.
    `origin/perfguard-baselines`), read as git objects: the parts, and the records whose part
    is missing or stale, validated as `baselines pull` does; a record that is not a baseline
    of its own path is an error naming it."""
    from perfguard.store.branch_summary import load_branch as load
    from perfguard.store.sync import SyncError

    try:
        return load(root, ref, metrics, window)
    except SyncError as exc:
        raise BaselineError(f"{ref}: {exc}") from None


def main_line(
    root: Path | None, main_branch: str, limit: int | None = MAX_COMMITS
) -> list[str] | None:
    """Main's first-parent commits, oldest first, the newest `limit` of them (None: all);
    None when there is no repository or branch."""
    if root is None:
        return None
    count = [] if limit is None else [f"--max-count={limit}"]
    for ref in (main_branch, f"origin/{main_branch}"):
        try:
            done = run_git(root, "rev-list", "--first-parent", *count, ref, "--")
        except GitError:  # no git here: no line to order by
            return None
        if done.returncode == 0 and done.stdout.strip():
            return list(reversed(done.stdout.split()))
    return None


def window_of(root: Path, line: Sequence[str]) -> Window:
    """The window of `line`'s commits: each with its commit date (UTC), which tells the
    month files that may hold its rows."""
    from datetime import UTC, datetime

    from perfguard.store.months import ANY_MONTH, Window

    dated = []
    if line:
        done = run_git(root, "log", "--no-walk=unsorted", "--format=%H %ct", *line)
        for row in done.stdout.split("\n"):
            sha, _, stamp = row.partition(" ")
            if stamp.strip().isdigit():
                dated.append((sha, datetime.fromtimestamp(int(stamp), UTC).isoformat()))
    return Window.of(dated) if dated else Window(frozenset(line), frozenset({ANY_MONTH}))


def order_runs(
    found: Summary | Iterable[Run], line: Sequence[str] | None, main_branch: str
) -> Ordered:
    """The baselines in `found` oldest first: along `line` (main's first-parent commits) when
    given, else in the order they were measured."""
    from perfguard.store.summary import Summary, summary_of_runs

    table = found if isinstance(found, Summary) else summary_of_runs(found)
    measured = [Measured(m, c, t or None) for m, c, t in table.measured() if c]
    if line is None:
        ordered = sorted(measured, key=lambda r: (r.created or "", r.commit))
        how = "in the order they were measured (no git history of main)"
        return Ordered(tuple(ordered), how, table=table.table)
    position = {sha: i for i, sha in enumerate(line)}
    on_line = sorted(
        (r for r in measured if r.commit in position), key=lambda r: position[r.commit]
    )
    return Ordered(
        tuple(on_line),
        f"along the first-parent history of {main_branch}",
        left_out=len({r.commit for r in measured}) - len({r.commit for r in on_line}),
        table=table.table,
        parents={sha: line[i - 1] for i, sha in enumerate(line) if i > 0},
    )


def speedups(series: Sequence[Series]) -> list[Series]:
    """Per machine, test and variant: eager's p50 over the variant's, commit by commit."""
    eager = {
        (s.machine, s.test): dict(zip(s.commits.tolist(), s.values.tolist(), strict=True))
        for s in series
        if s.variant == "eager" and s.metric == "latency_p50_ms"
    }
    import numpy as np

    out = []
    for s in series:
        reference = eager.get((s.machine, s.test))
        if s.metric != "latency_p50_ms" or s.variant == "eager" or not reference:
            continue
        base = np.array([reference.get(c, math.nan) for c in s.commits.tolist()])
        ok = np.isfinite(base) & (s.values > 0)
        if ok.any():
            out.append(
                Series(
                    s.machine,
                    s.test,
                    s.variant,
                    "speedup_over_eager",
                    s.commits[ok],
                    base[ok] / s.values[ok],
                    np.empty(0),
                    np.empty(0),
                )
            )
    return out


def dump_json(series: Series) -> dict[str, object]:
    return {
        "machine": series.machine,
        "test": series.test,
        "variant": series.variant,
        "metric": series.metric,
        "commits": series.commits.tolist(),
        "values": series.values.tolist(),
    }


def dumps(data: object) -> str:
    return json.dumps(data, indent=1) + "\n"
