"""The recent baselines of one machine along first-parent history, as a pandas DataFrame.

Used for the noise floor (how much a metric moves between successive baselines on main)
and for trend charts. One row per commit, test, variant and metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from perfguard.git import first_parent_commits
from perfguard.records import Metrics
from perfguard.store.baselines import BaselineStore

if TYPE_CHECKING:
    import pandas as pd

HISTORY_COLUMNS = ("position", "commit", "created", "test", "variant", "metric", "value")
METRICS = tuple(Metrics.__dataclass_fields__)


def load_history(
    store: BaselineStore,
    machine: str,
    root: Path,
    *,
    start: str = "HEAD",
    last: int = 20,
    search_depth: int = 500,
) -> pd.DataFrame:
    """The last `last` baselines of `machine` on `start`'s first-parent line, oldest first.

    `position` counts baselines from 0 (the oldest). Only `ok` results contribute rows.
    A corrupt baseline file raises `BaselineError` naming it, as everywhere.
    """
    import pandas as pd

    found = []
    for sha in first_parent_commits(root, start, search_depth):
        if store.has(machine, sha):
            found.append(sha)
            if len(found) == last:
                break
    rows = []
    for position, sha in enumerate(reversed(found)):
        run = store.load(machine, sha)
        if run is None:  # pragma: no cover - has() said it was there
            continue
        for r in run.results:
            if r.status != "ok":
                continue
            for metric in METRICS:
                value = getattr(r.metrics, metric)
                if value is not None:
                    rows.append((position, sha, run.created, r.test, r.variant, metric, value))
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
    for (test, variant, metric), group in ordered.groupby(["test", "variant", "metric"]):
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
