"""Main's per-commit series: one value per baseline, for each machine, test, variant and metric.

The baselines come from the baseline folder or straight from the baselines branch (through git
plumbing, nothing checked out). They are put in the order of main's first-parent history when
the repository is at hand, else in the order they were measured; commits that are not on main
(a baseline saved from a branch) are left out and counted.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.records import Run, VariantResult
from perfguard.store.baselines import BaselineError, BaselineStore, read_run_file

# the metrics of a series, and the ones whose per-repeat values give a band
SERIES_METRICS = (
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "peak_memory_bytes",
    "compile_time_s",
    "drift_max_abs",
)
BAND_PERCENTILE = {"latency_p50_ms": 50.0, "latency_p95_ms": 95.0, "latency_p99_ms": 99.0}
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
class Ordered:
    runs: tuple[Run, ...]  # oldest first
    how: str  # how the order was found, for the reader
    left_out: int = 0  # baselines of commits not on main's first-parent line


def load_folder(directory: Path) -> list[Run]:
    """Every baseline under `directory`; a broken file is an error that names it."""
    if not directory.is_dir():
        raise BaselineError(f"{directory}: no such baseline folder (perfguard baselines pull?)")
    return [read_run_file(path) for _machine, path in BaselineStore(directory).files()]


def load_branch(root: Path, ref: str) -> list[Run]:
    """Every baseline file on git revision `ref` (e.g. `origin/perfguard-baselines`).

    The files are read as git objects, through the plumbing `baselines pull` uses, and
    validated as it does; one that is not a baseline of its own path is an error naming it.
    """
    from perfguard.store.sync import (
        SyncError,
        _git_bytes,
        _remote_files,
        baseline_content_problem,
        baseline_path_problem,
    )

    runs = []
    try:
        for path, blob in sorted(_remote_files(root, ref).items()):
            if baseline_path_problem(path) is not None:
                continue  # a README or other file on the branch
            run, problem = baseline_content_problem(
                path, _git_bytes(root, "cat-file", "blob", blob)
            )
            if run is None:
                raise BaselineError(f"{ref}:{path}: {problem}")
            runs.append(run)
    except (SyncError, subprocess.CalledProcessError) as exc:
        raise BaselineError(f"{ref}: {exc}") from None
    return runs


def main_line(root: Path | None, main_branch: str) -> list[str] | None:
    """Main's first-parent commits, oldest first; None when there is no repository or branch."""
    if root is None:
        return None
    for ref in (main_branch, f"origin/{main_branch}"):
        done = subprocess.run(
            ["git", "rev-list", "--first-parent", f"--max-count={MAX_COMMITS}", ref, "--"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if done.returncode == 0 and done.stdout.strip():
            return list(reversed(done.stdout.split()))
    return None


def order_runs(runs: Iterable[Run], line: Sequence[str] | None, main_branch: str) -> Ordered:
    """`runs` oldest first: along `line` (main's first-parent commits) when given."""
    runs = [r for r in runs if r.commit is not None]
    if line is None:
        ordered = sorted(runs, key=lambda r: (r.created or "", r.commit or ""))
        return Ordered(tuple(ordered), "in the order they were measured (no git history of main)")
    position = {sha: i for i, sha in enumerate(line)}
    on_line = [r for r in runs if r.commit in position]
    on_line.sort(key=lambda r: position[r.commit or ""])
    return Ordered(
        tuple(on_line),
        f"along the first-parent history of {main_branch}",
        left_out=len({r.commit for r in runs}) - len({r.commit for r in on_line}),
    )


def _band(result: VariantResult, metric: str) -> tuple[float | None, float | None]:
    from perfguard.stats.latency import block_percentiles

    percentile = BAND_PERCENTILE.get(metric)
    per_block = block_percentiles(result, percentile) if percentile is not None else []
    if len(per_block) < 2:
        return None, None
    return min(per_block), max(per_block)


def build_series(ordered: Ordered, metrics: Sequence[str] = SERIES_METRICS) -> list[Series]:
    """One series per machine, test, variant and metric that has at least one value."""
    points: dict[tuple[str, str, str, str], list[Point]] = {}
    for run in ordered.runs:
        for result in run.results:
            if result.status != "ok":
                continue
            for metric in metrics:
                value = getattr(result.metrics, metric)
                if value is None:
                    continue
                low, high = _band(result, metric)
                key = (run.machine, result.test, result.variant, metric)
                points.setdefault(key, []).append(
                    Point(run.commit or "", run.created, float(value), low, high)
                )
    return [Series(*key, points=tuple(pts)) for key, pts in sorted(points.items())]


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
