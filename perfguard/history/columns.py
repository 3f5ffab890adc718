"""Main's series built from the summary table's columns at once: a year of a suite of 1,000
results is some five million rows, and a pass over them in Python took most of a history's
read."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from perfguard.history.series import SERIES_METRICS, Ordered, Pair, Series

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

ONE_KEY_BELOW = 2**62
"""Series times places on main below this fit one int64 sort key per row; above it (some
hundred thousand series over a decade of commits) the rows are sorted on their codes."""


def build_series(ordered: Ordered, metrics: Sequence[str] = SERIES_METRICS) -> list[Series]:
    """One series per machine, test, variant and metric that has at least one value, sorted
    by those; its points in main's order. Done on the table's columns at once: a year of a
    suite of 1,000 results is some five million rows."""
    import numpy as np

    table = ordered.table
    if table is None or table.empty or not ordered.runs:
        return []
    wanted = table["metric"].isin(list(metrics))
    rows = table if wanted.all() else table[wanted]
    codes = {c: _codes(rows[c]) for c in ("machine", "commit", "test", "variant", "metric")}
    at = _positions(ordered, codes["machine"], codes["commit"])
    # one sort key per row: its series (machine, test, variant, metric, as their names sort)
    # and its place in main's order, as one integer (ten million rows: each array pass is
    # a tenth of a second here)
    parts = [codes[c] for c in ("machine", "test", "variant", "metric")]
    steps = len(ordered.runs) + 1
    keep = at >= 0  # not on main's line: left out
    picked = None if keep.all() else np.flatnonzero(keep)
    if math.prod(len(names) for _, names in parts) * steps < ONE_KEY_BELOW:
        key = np.zeros(len(at), dtype=np.int64)
        for found, names in parts:
            key = key * len(names) + found
        key = key * steps + at
        if picked is not None:
            key = key[picked]
        # stable: the rows come mostly sorted (month files are), which it makes use of
        order = np.argsort(key, kind="stable")
        series_key = key[order] // steps
    else:  # more series than one integer holds: sort on the codes themselves
        some = slice(None) if picked is None else picked
        order = np.lexsort((at[some], *(found[some] for found, _ in reversed(parts))))
        series_key = np.sum(
            [np.cumsum(np.diff(found[some][order], prepend=-1) != 0) for found, _ in parts],
            axis=0,
        )
    picked = order if picked is None else picked[order]
    starts = np.flatnonzero(np.diff(series_key, prepend=-1))
    ends = np.append(starts[1:], len(order))
    commits = codes["commit"][1][codes["commit"][0][picked]]
    value, low, high = (rows[c].to_numpy(dtype=float)[picked] for c in ("value", "low", "high"))
    pairs = _pairs(rows, picked, ordered.parents, commits)
    paired = np.array(sorted(pairs), dtype=np.int64)
    out = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        machine, test, variant, metric = (str(names[found[picked[a]]]) for found, names in parts)
        out.append(
            Series(
                machine,
                test,
                variant,
                metric,
                commits=commits[a:b],
                values=value[a:b],
                low=_spread(low[a:b]),
                high=_spread(high[a:b]),
                pairs=_between(pairs, paired, a, b),
            )
        )
    return out


def _pairs(
    rows: pd.DataFrame,
    picked: np.ndarray,
    parents: Mapping[str, str] | None,
    commits: np.ndarray,
) -> dict[int, Pair]:
    """The picked rows' paired changes, by their place among them, where the base is that
    commit's first parent on main's line (a pair beside another commit is not that commit's
    step). Few rows have one: the rest are not looked at."""
    import numpy as np

    if "pair" not in rows.columns:
        return {}
    codes, names = _codes(rows["pair"])
    paired = np.append(names != "", False)  # a missing value's code, -1, is the last
    has = np.flatnonzero(paired[codes[picked]])
    if not has.size:
        return {}
    at = picked[has]
    base = names[codes[at]]
    verdict = rows["pair_verdict"].to_numpy(dtype=object)[at]
    change, low, high, p = (
        rows[c].to_numpy(dtype=float)[at]
        for c in ("pair_change", "pair_low", "pair_high", "pair_p")
    )
    out = {}
    for j, i in enumerate(has.tolist()):
        if parents is not None and parents.get(str(commits[i])) != base[j]:
            continue
        out[i] = Pair(
            str(base[j]),
            str(verdict[j]),
            float(change[j]),
            None if math.isnan(low[j]) else float(low[j]),
            None if math.isnan(high[j]) else float(high[j]),
            None if math.isnan(p[j]) else float(p[j]),
        )
    return out


def _between(
    pairs: Mapping[int, Pair], paired: np.ndarray, a: int, b: int
) -> tuple[Pair | None, ...]:
    """The pairs of rows `a` to `b` (a series), one per row; () when it has none."""
    import numpy as np

    if not paired.size or np.searchsorted(paired, a) == np.searchsorted(paired, b):
        return ()
    return tuple(pairs.get(i) for i in range(a, b))


def _codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) of a column: names sorted, so codes sort as the names do."""
    import numpy as np
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):  # the summary's text: codes at hand
        names = np.asarray(column.cat.categories, dtype=object)
        codes = column.cat.codes.to_numpy()
        if column.cat.categories.is_monotonic_increasing:
            return codes, names
        order = np.argsort(names)
        rank = np.empty(len(names) + 1, dtype=np.int64)
        rank[order] = np.arange(len(names))
        rank[-1] = -1  # a missing value's code
        return rank[codes], names[order]
    codes, found = pd.factorize(column, sort=True)
    return codes, np.asarray(found, dtype=object)


def _positions(
    ordered: Ordered,
    machines: tuple[np.ndarray, np.ndarray],
    commits: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Each row's place in main's order (-1: a baseline not on main's line)."""
    import numpy as np

    machine_at = {str(m): i for i, m in enumerate(machines[1])}
    commit_at = {str(c): i for i, c in enumerate(commits[1])}
    table = np.full((len(machine_at), len(commit_at)), -1, dtype=np.int64)
    for i, r in enumerate(ordered.runs):
        if r.machine in machine_at and r.commit in commit_at:
            table[machine_at[r.machine], commit_at[r.commit]] = i
    found: np.ndarray = table[machines[0], commits[0]]
    return found


def _spread(values: np.ndarray) -> np.ndarray:
    """A series' spread, empty when none of its points has one."""
    import numpy as np

    return np.empty(0) if np.isnan(values).all() else values
