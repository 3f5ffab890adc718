"""The recent baselines of one machine along first-parent history, as a pandas DataFrame.

Used for the noise floor (how much a metric moves between successive baselines on main)
and for trend charts. One row per commit, test, variant and metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from perfguard.git import first_parent_commits
from perfguard.records import Comparison, Metrics, Run

if TYPE_CHECKING:
    import pandas as pd

    from perfguard.store.baselines import BaselineStore
    from perfguard.store.objects import ObjectStore

HISTORY_COLUMNS = ("position", "commit", "created", "test", "variant", "metric", "value")
METRICS = tuple(Metrics.__dataclass_fields__)


def load_history(
    store: BaselineStore | ObjectStore,
    machine: str,
    root: Path,
    *,
    start: str = "HEAD",
    last: int = 20,
    search_depth: int = 500,
) -> pd.DataFrame:
    """The last `last` baselines of `machine` on `start`'s first-parent line, oldest first,
    read from the summary table (a record is read only where its part is missing or stale;
    a part whose record was not pulled is used as it is).

    `position` counts baselines from 0 (the oldest). Only `ok` results contribute rows.
    A corrupt baseline file raises `BaselineError` naming it, as everywhere.
    """
    import pandas as pd

    found = store.history_parts(machine, first_parent_commits(root, start, search_depth), last)
    tables = []
    for position, part in enumerate(reversed(found)):
        rows = part[part["metric"].isin(METRICS)]
        tables.append(
            pd.DataFrame(
                {
                    "position": position,
                    "commit": rows["commit"],
                    "created": rows["created"],
                    "test": rows["test"],
                    "variant": rows["variant"],
                    "metric": rows["metric"],
                    "value": rows["value"],
                }
            )
        )
    tables = [t for t in tables if not t.empty]
    if not tables:
        return pd.DataFrame([], columns=list(HISTORY_COLUMNS))
    return pd.concat(tables, ignore_index=True)


def history_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """The history DataFrame of `runs`, given oldest first (position 0 is the first)."""
    import pandas as pd

    rows = []
    for position, run in enumerate(runs):
        for r in run.results:
            if r.status != "ok":
                continue
            for metric in METRICS:
                value = getattr(r.metrics, metric)
                if value is not None:
                    rows.append(
                        (position, run.commit, run.created, r.test, r.variant, metric, value)
                    )
    return pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))


def noise_floor(
    history: pd.DataFrame, *, quantile: float = 0.9
) -> dict[tuple[str, str, str], float]:
    """Per (test, variant, metric): the `quantile` of |% change| between successive baselines.

    With fewer than three baselines of a metric there is no floor for it (it is left out).
    """
    floors: dict[tuple[str, str, str], float] = {}
    if history.empty:
        return floors
    ordered = history.sort_values("position")
    for (test, variant, metric), group in ordered.groupby(
        ["test", "variant", "metric"], observed=True
    ):
        values = group["value"].astype(float).to_numpy()
        if len(values) < 3:
            continue
        prev, nxt = values[:-1], values[1:]
        valid = prev != 0
        if not valid.any():
            continue
        changes = abs((nxt[valid] - prev[valid]) / prev[valid]) * 100.0
        floors[(str(test), str(variant), str(metric))] = float(np.quantile(changes, quantile))
    return floors


TREND_POINTS = 10


def with_trends(
    comparisons: Sequence[Comparison], history: pd.DataFrame, points: int = TREND_POINTS
) -> tuple[Comparison, ...]:
    """The comparisons, each gating regression carrying its metric over the recent baselines."""
    if history.empty:
        return tuple(comparisons)
    indexed = history.set_index(["test", "variant", "metric"]).sort_index()
    out = []
    for c in comparisons:
        key = (c.test, c.variant, c.metric)
        if c.verdict == "regression" and c.gating and key in indexed.index:
            rows = indexed.loc[[key]].sort_values("position").tail(points)
            trend = tuple(
                (str(commit), float(value))
                for commit, value in zip(rows["commit"], rows["value"], strict=True)
            )
            c = replace(c, trend=trend)
        out.append(c)
    return tuple(out)
