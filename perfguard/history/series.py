"""Main's per-commit series: one value per baseline, for each machine, test, variant and metric.

The baselines come from the baseline folder or straight from the baselines branch (through git
plumbing, nothing checked out). They are put in the order of main's first-parent history when
the repository is at hand, else in the order they were measured; commits that are not on main
(a baseline saved from a branch) are left out and counted.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfguard.records import Run
from perfguard.store.baselines import BaselineError
from perfguard.store.summary import COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from perfguard.store.summary import Summary

# the metrics of a series (those with per-repeat figures have a band: store.summary)
SERIES_METRICS = (
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "peak_memory_bytes",
    "compile_time_s",
    "drift_max_abs",
)
MAX_COMMITS = 10_000  # how far back main's history is walked


@dataclass(frozen=True)
class Point:
    commit: str
    created: str | None
    value: float
    low: float | None = None  # the spread of the value over the run's repeats
    high: float | None = None


@dataclass(frozen=True)
class Series:
    machine: str
    test: str
    variant: str
    metric: str
    points: tuple[Point, ...]  # oldest first

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.machine, self.test, self.variant, self.metric)

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


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


def load_folder(directory: Path | str) -> Summary:
    """The summary table of every baseline under `directory` (or an object store's URL); a
    broken record is an error that names it."""
    from perfguard.store.objects import open_store

    if isinstance(directory, Path) and not directory.is_dir():
        raise BaselineError(f"{directory}: no such baseline folder (perfguard baselines pull?)")
    return open_store(directory).summary()


def load_branch(root: Path, ref: str) -> Summary:
    """The summary table of every baseline on git revision `ref` (e.g.
    `origin/perfguard-baselines`), read as git objects: the parts, and the records whose part
    is missing or stale, validated as `baselines pull` does; a record that is not a baseline
    of its own path is an error naming it."""
    from perfguard.store import summary
    from perfguard.store.sync import SyncError

    try:
        return summary.load_branch(root, ref)
    except (SyncError, subprocess.CalledProcessError) as exc:
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
        done = subprocess.run(
            ["git", "rev-list", "--first-parent", *count, ref, "--"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if done.returncode == 0 and done.stdout.strip():
            return list(reversed(done.stdout.split()))
    return None


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
    )


def build_series(ordered: Ordered, metrics: Sequence[str] = SERIES_METRICS) -> list[Series]:
    """One series per machine, test, variant and metric that has at least one value."""
    table = ordered.table
    if table is None or table.empty or not ordered.runs:
        return []
    order = {(r.machine, r.commit): i for i, r in enumerate(ordered.runs)}
    rows = table[table["metric"].isin(list(metrics))]
    points: dict[tuple[str, str, str, str], list[tuple[int, Point]]] = {}
    for machine, commit, created, test, variant, metric, value, low, high in zip(
        *(rows[c] for c in COLUMNS[:-1]), strict=True
    ):
        at = order.get((machine, commit))
        if at is None:
            continue  # not on main's line
        points.setdefault((machine, test, variant, metric), []).append(
            (at, Point(commit, created or None, float(value), _or_none(low), _or_none(high)))
        )
    return [
        Series(*key, points=tuple(p for _, p in sorted(pts, key=lambda a: a[0])))
        for key, pts in sorted(points.items())
    ]


def _or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def speedups(series: Sequence[Series]) -> list[Series]:
    """Per machine, test and variant: eager's p50 over the variant's, commit by commit."""
    eager = {
        (s.machine, s.test): {p.commit: p.value for p in s.points}
        for s in series
        if s.variant == "eager" and s.metric == "latency_p50_ms"
    }
    out = []
    for s in series:
        reference = eager.get((s.machine, s.test))
        if s.metric != "latency_p50_ms" or s.variant == "eager" or not reference:
            continue
        pts = tuple(
            Point(p.commit, p.created, reference[p.commit] / p.value)
            for p in s.points
            if p.commit in reference and p.value > 0
        )
        if pts:
            out.append(Series(s.machine, s.test, s.variant, "speedup_over_eager", pts))
    return out


def dump_json(series: Series) -> dict[str, object]:
    return {
        "machine": series.machine,
        "test": series.test,
        "variant": series.variant,
        "metric": series.metric,
        "commits": [p.commit for p in series.points],
        "values": [p.value for p in series.points],
    }


def dumps(data: object) -> str:
    return json.dumps(data, indent=1) + "\n"
